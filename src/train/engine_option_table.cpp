#include "train/engine_option_table.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>

#include "core/error.h"
#include "core/limits.h"

namespace ulysses {
namespace {

using Apply = std::function<void(EngineConfig&, const std::string&, const std::string&)>;

int64_t parse_int(const std::string& v, const std::string& where, const IntRange& range) {
  int64_t x = 0;
  const char* first = v.data() + (!v.empty() && v[0] == '+' ? 1 : 0);
  const auto r = std::from_chars(first, v.data() + v.size(), x);
  ULY_CHECK(r.ec == std::errc() && r.ptr == v.data() + v.size() && first != v.data() + v.size(),
            where << " takes an integer, got '" << v << "'");
  return check_in_range(where, x, range);
}

bool parse_bool(const std::string& v, const std::string& where) {
  ULY_CHECK(v == "true" || v == "false", where << " takes true or false, got '" << v << "'");
  return v == "true";
}

// One of `choices` (each a list of spellings whose first is the name); its index.
size_t parse_choice(const std::string& v, const std::string& where,
                    const std::vector<std::vector<std::string>>& choices) {
  std::string names;
  for (size_t i = 0; i < choices.size(); ++i) {
    for (const std::string& c : choices[i])
      if (v == c) return i;
    names += (i ? (i + 1 == choices.size() ? " or " : ", ") : "") + choices[i][0];
  }
  ULY_FAIL(where << " takes " << names << ", got '" << v << "'");
}

Apply int_option(int64_t StepOptions::*member, IntRange range) {
  return [member, range](EngineConfig& e, const std::string& v, const std::string& where) {
    e.memory.*member = parse_int(v, where, range);
  };
}

std::vector<EngineOption> make_table() {
  using namespace limits;
  return {
      {"backend", "backend", "cpu", "", "cuda", "cpu or cuda",
       [](EngineConfig& e, const std::string& v, const std::string& w) {
         e.backend = parse_choice(v, w, {{"cpu"}, {"cuda"}}) == 1 ? BackendKind::Cuda : BackendKind::Cpu;
       }},
      {"dtype", "dtype", "auto", "", "fp32",
       "compute dtype: auto (bf16 on cuda, fp32 on the cpu), bf16 or fp32 (on cuda: to check against float64 "
       "references); the cpu backend is fp32 only",
       [](EngineConfig& e, const std::string& v, const std::string& w) {
         const size_t c = parse_choice(v, w, {{"auto"}, {"bf16", "bfloat16"}, {"fp32", "float32"}});
         // auto follows the backend, read before (the table's first row)
         e.act_dtype = c == 1 || (c == 0 && e.backend == BackendKind::Cuda) ? DType::BF16 : DType::F32;
       }},
      {"comm", "comm", "mpi", "", "nccl",
       "mpi (device tensors staged through host memory; ranks may share a GPU) or nccl (device buffers on NCCL; "
       "cuda, one GPU per rank)",
       [](EngineConfig& e, const std::string& v, const std::string& w) {
         e.comm = parse_choice(v, w, {{"mpi"}, {"nccl"}}) == 1 ? CommKind::Nccl : CommKind::Mpi;
       }},
      {"sp", "sp", "0", "", "2", "sequence-parallel degree; 0 = all ranks (dp = ranks / sp)",
       [](EngineConfig& e, const std::string& v, const std::string& w) {
         e.sp = static_cast<int>(parse_int(v, w, kSpDegree));
       }},
      {"sp_ring", "sp-ring", "1", "", "2",
       "ring-attention degree R inside sp: Ulysses all-to-all inside groups of sp / R ranks, K/V passed around a "
       "ring of R groups; R = sp is pure ring attention, which no head count limits",
       [](EngineConfig& e, const std::string& v, const std::string& w) {
         e.ring = static_cast<int>(parse_int(v, w, kRingDegree));
       }},
      {"zigzag", "zigzag", "false", "true", "true",
       "with sp_ring > 1: zigzag (dual-chunk) sharding, so that every ring rank does the same causal work (the "
       "sequence must divide by 2 x R)",
       [](EngineConfig& e, const std::string& v, const std::string& w) { e.zigzag = parse_bool(v, w); }},
      {"zero", "zero", "0", "", "2",
       "ZeRO stage over all ranks: 0 = each rank holds the whole AdamW state; 1 = the state sharded, 1/ranks each; "
       "2 = the gradients too, reduce-scattered layer by layer in the backward; 3 = the weights too, each layer's "
       "gathered one layer ahead of use",
       [](EngineConfig& e, const std::string& v, const std::string& w) {
         e.zero = static_cast<int>(parse_int(v, w, IntRange{0, 3, "ZeRO stage"}));
       }},
      {"offload_optimizer", "offload-optimizer", "false", "true", "true",
       "the AdamW state (fp32 master, m, v) in pinned host memory and the update on the CPU",
       [](EngineConfig& e, const std::string& v, const std::string& w) { e.offload_optimizer = parse_bool(v, w); }},
      {"grad_dtype", "grad-dtype", "float32", "", "bfloat16",
       "gradient buffers: float32, or bfloat16 (half their memory: each layer's gradients are summed in a float32 "
       "scratch, then rounded into the buffers once; summed across ranks in float32)",
       [](EngineConfig& e, const std::string& v, const std::string& w) {
         e.memory.grad_dtype =
             parse_choice(v, w, {{"float32", "fp32"}, {"bfloat16", "bf16"}}) == 1 ? DType::BF16 : DType::F32;
       }},
      {"memory.tiled_mlp", "tiled-mlp", "1", "0", "4",
       "the MLP over N sequence tiles, recomputed in the backward; 0 = ceil(local tokens / hidden); 1 = off",
       int_option(&StepOptions::mlp_tiles, kMlpTiles)},
      {"memory.tiled_loss", "tiled-loss", "0", "1024", "512",
       "lm_head + loss over tiles of this many tokens; 0 = off (the flag alone: 1024)",
       int_option(&StepOptions::loss_tile_tokens, kLossTile)},
      {"memory.checkpoint", "checkpoint", "false", "true", "true",
       "keep only each layer's input; recompute the layer in the backward",
       [](EngineConfig& e, const std::string& v, const std::string& w) { e.memory.checkpoint = parse_bool(v, w); }},
      {"memory.offload_checkpoints", "offload-checkpoints", "0", "all", "2",
       "the first K layers' checkpoints (or all) in host memory; 0 = none; implies checkpoint (the flag alone: "
       "all)",
       [](EngineConfig& e, const std::string& v, const std::string& w) {
         e.memory.offload_layers = v == "all" ? -1 : parse_int(v, w, kOffloadLayers);
       }},
      {"memory.keep_attention", "keep-attention", "auto", "on", "off",
       "on, off or auto: with checkpoints, keep each layer's attention output and log-sum-exp on the device so "
       "that the recompute skips the attention; auto keeps them when the plan with them fits",
       [](EngineConfig& e, const std::string& v, const std::string& w) {
         const size_t c = parse_choice(v, w, {{"auto"}, {"on", "true"}, {"off", "false"}});
         e.keep_attention = c == 0 ? KeepAttention::Auto : c == 1 ? KeepAttention::On : KeepAttention::Off;
       }},
      {"memory.checkpoint_segment", "checkpoint-segment", "1", "", "2",
       "two-level checkpoints: one saved input per segment of K layers; the backward recomputes a segment's "
       "forward once (K > 1 implies checkpoint)",
       int_option(&StepOptions::checkpoint_segment, kCheckpointSegment)},
      {"memory.head_chunks", "head-chunks", "1", "", "2",
       "the attention side of each layer (q/k/v projections, all-to-alls, kernel) one chunk of H/N heads at a "
       "time, its working set divided by N; the backward recomputes each chunk's q/k/v",
       int_option(&StepOptions::head_chunks, kHeadChunks)},
      {"memory.comm_overlap", "no-comm-overlap", "true", "false", "false",
       "with ZeRO 2 or 3: run each layer's gradient reduce-scatter and weight gather beside the next layer's "
       "compute (the flag turns it off, to measure what the overlap saves)",
       [](EngineConfig& e, const std::string& v, const std::string& w) {
         e.memory.overlap_communication = parse_bool(v, w);
       }},
      {"memory.reserve", "no-reserve", "true", "false", "false",
       "back each memory pool with one block reserved at the planned peak (the flag: allocate each tensor from "
       "the device instead)",
       [](EngineConfig& e, const std::string& v, const std::string& w) { e.reserve = parse_bool(v, w); }},
      {"memory.device_limit", "memory-limit", "0.0", "", "64",
       "refuse steps whose planned device peak exceeds this many GiB; 0 = the device's free memory",
       [](EngineConfig& e, const std::string& v, const std::string& w) {
         double gib = 0;
         const auto r = std::from_chars(v.data(), v.data() + v.size(), gib);
         ULY_CHECK(r.ec == std::errc() && r.ptr == v.data() + v.size() && !v.empty() && std::isfinite(gib),
                   w << " expects a finite number of GiB, got '" << v << "'");
         e.device_limit = gib == 0 ? 0  // the device's free memory
                                   : static_cast<size_t>(check_in_range(w, gib, limits::kGiB) *
                                                         static_cast<double>(size_t(1) << 30));
       }},
  };
}

std::string name_of(const EngineOption& o, OptionSpelling s) {
  return s == OptionSpelling::Flags ? "--" + o.flag : "'" + o.key + "'";
}

const EngineOption& option(const std::string& key) {
  for (const EngineOption& o : engine_options())
    if (o.key == key) return o;
  ULY_FAIL("internal: no engine option '" << key << "'");
}

// The rules between options, after each was read.
void finish(EngineConfig& e, OptionSpelling s, bool optimizer) {
  const auto name = [s](const char* key) { return name_of(option(key), s); };
  StepOptions& m = e.memory;
  if (m.offload_layers != 0 || m.checkpoint_segment > 1) m.checkpoint = true;
  ULY_CHECK(e.keep_attention != KeepAttention::On || m.checkpoint,
            name("memory.keep_attention") << " keeps attention outputs for the recompute of checkpointed layers; "
                                          << "add " << name("memory.checkpoint") << " (or "
                                          << name("memory.offload_checkpoints") << ")");
  m.keep_attention = e.keep_attention == KeepAttention::On;
  ULY_CHECK(!e.zigzag || e.ring > 1, name("zigzag") << " balances causal work over a ring of ranks; set "
                                                    << name("sp_ring") << " R > 1");
  ULY_CHECK(e.backend == BackendKind::Cuda || e.act_dtype == DType::F32,
            name("dtype") << " bf16: the cpu backend computes in fp32 only (it is the reference)");
  // Without an optimizer ZeRO 2 and 3 still shard the gradients and weights (stage 1 has nothing to
  // shard then); the offload has nothing to place.
  ULY_CHECK(optimizer || (e.zero != 1 && !e.offload_optimizer),
            name("zero") << " 1 and " << name("offload_optimizer")
                         << " place the optimizer's state; this step has no optimizer (drop --no-optimizer, or "
                            "drop them; ZeRO 2 and 3 shard the gradients and weights without one)");
  e.optimizer = optimizer;
  e.spelling = s;
}

}  // namespace

const std::vector<EngineOption>& engine_options() {
  static const std::vector<EngineOption> table = make_table();
  return table;
}

EngineConfig engine_config_of(const std::function<std::optional<std::string>(const EngineOption&)>& given,
                              OptionSpelling spelling, bool optimizer) {
  EngineConfig e;
  for (const EngineOption& o : engine_options()) {
    const std::optional<std::string> v = given(o);
    o.apply(e, v ? *v : o.default_value, name_of(o, spelling));
  }
  finish(e, spelling, optimizer);
  return e;
}

std::string engine_options_yaml() {
  std::ostringstream top, memory;
  for (const EngineOption& o : engine_options()) {
    const bool nested = o.key.rfind("memory.", 0) == 0;
    const std::string leaf = nested ? o.key.substr(7) : o.key;
    std::ostringstream line;
    line << (nested ? "  " : "") << leaf << ": " << o.default_value;
    std::string text = line.str();
    text.resize(std::max<size_t>(text.size() + 1, 26), ' ');
    // The help wrapped at about 110 columns, continuation lines under the first comment.
    std::istringstream words(o.help);
    std::string word, out = text + "#", indent(text.size(), ' ');
    size_t col = out.size();
    for (bool first = true; words >> word; first = false) {
      if (!first && col + 1 + word.size() > 112) {
        out += "\n" + indent + "#";
        col = indent.size() + 1;
      }
      out += " " + word;
      col += 1 + word.size();
    }
    (nested ? memory : top) << out << "\n";
  }
  return top.str() + "memory:\n" + memory.str();
}

}  // namespace ulysses
