#include "train/memory_plan.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <cstdio>
#include <functional>
#include <sstream>

#include "backend/planning_backend.h"
#include "backend/profile_scope.h"
#include "core/step_work.h"
#include "comm/communicator.h"
#include "model/batch.h"
#include "train/optimizer.h"

namespace ulysses {

MemorySnapshot MemorySnapshot::of(const MemoryPools& pools) {
  MemorySnapshot s;
  for (int i = 0; i < kNumPools; ++i) s.pools[i] = pools.counters(static_cast<Pool>(i));
  for (int i = 0; i < kNumMemTags; ++i) s.tags[i] = pools.tag_counters(static_cast<MemTag>(i));
  s.device = pools.device();
  s.host = pools.host();
  return s;
}

int64_t local_tokens(const PlanRequest& r) {
  return TokenLayout(r.sp, r.ring, r.zigzag).padded_length(r.seq_len) / r.sp;
}

namespace {

// The step as bench times it (cli/bench.cpp, train/step.cpp), for the time model's ledger:
// zero grads, forward and backward with each layer's gradients all-reduced over the sp ranks
// as the backward leaves the layer (ZeRO 2/3: reduce-scattered inside the backward instead),
// the rest at the end, then the optimizer. The collectives are noted on the ledger directly:
// the time model's target (NCCL) moves device buffers, without the host staging of MPI.
void run_timed_step(const PlanRequest& r, Backend& backend, LlamaModel& model, LlamaWeights& weights,
                    LoraWeights* lora, ParameterSet& trained, AdamW* optimizer, const SequenceShard& shard) {
  {
    ProfileScope prof(backend, "zero grads");
    trained.zero_grads(backend);
  }
  const bool reduce = !trained.grads_sharded();
  const int world = r.sp;
  auto all_reduce = [&](const std::vector<Parameter*>& params) {
    for (Parameter* p : params) {
      // NCCL sums bfloat16 gradients as they are (Communicator::reduces_bf16).
      const double bytes = double(p->grad.numel()) * double(dtype_size(p->grad.dtype()));
      r.work->add_collective("all-reduce", world, bytes);
    }
  };
  std::vector<bool> done(trained.params().size(), false);
  auto layer_params = [&](int64_t l) { return lora ? lora->layer_params(l) : weights.layer(l).all(); };
  std::function<void(int64_t)> hook;
  if (reduce && world > 1)
    hook = [&](int64_t l) {
      ProfileScope prof(backend, "grad all-reduce");
      std::vector<Parameter*> ps;
      for (Parameter* p : layer_params(l)) {
        const size_t i = static_cast<size_t>(p - trained.params().data());
        if (!done[i]) ps.push_back(p), done[i] = true;
      }
      all_reduce(ps);
    };
  model.forward_backward(shard, 1.0, hook);
  trained.settle_grads(backend);
  if (reduce) {
    ProfileScope prof(backend, "grad all-reduce");
    std::vector<Parameter*> rest;
    for (size_t i = 0; i < trained.params().size(); ++i)
      if (!done[i]) rest.push_back(&trained.params()[i]);
    all_reduce(rest);
  }
  // The offloaded update runs on the host's copies of the state (no placeholders to run it on):
  // its work is counted as bench's profile files it, under "optimizer".
  if (optimizer && !r.optimizer_offload) {
    optimizer->step();
  } else if (optimizer) {
    ProfileScope prof(backend, "optimizer");
    for (const Parameter& p : trained.params()) {
      const double n = double(p.grad.numel()) / std::max(1, r.optimizer_shards);
      r.work->add_transfer(n * double(dtype_size(p.grad.dtype()) + dtype_size(r.act_dtype)));
      r.work->add_bytes(n * 4.0 * 7.0);  // master, m, v read and written; the gradient read (float32)
    }
  }
}

// One dry run of the step; capture_at > 0 itemises the device allocations live when the device
// pools first hold that many bytes.
MemorySnapshot dry_run(const PlanRequest& r, size_t capture_at) {
  const TokenLayout layout(r.sp, r.ring, r.zigzag);
  check_ulysses_degree(r.config.num_attention_heads, r.config.num_key_value_heads, layout.ulysses(), r.seq_len);
  ULY_CHECK(r.documents >= 1 && r.documents <= r.seq_len,
            "plan: " << r.documents << " documents cannot be packed in " << r.seq_len << " tokens");
  auto backend = make_planning_backend(r.act_dtype, r.device, r.runtime, r.work);
  if (capture_at > 0) backend->pools().capture_at_device_bytes(capture_at);
  // Rank 0 of each group stands for every rank: their allocations are the same. The time model
  // plans the last rank of the SP group instead, the slowest: without zigzag the last ring rank
  // holds the causal mask's fullest rows (under Ulysses or zigzag every rank does equal work).
  // (The sp group's one collective, the row's positions gathered by shard_sequence, falls
  // outside every family: the time model's "other".)
  const int ulysses_size = static_cast<int>(layout.ulysses());
  const int sp_rank = r.work ? r.sp - 1 : 0;
  auto sp = make_simulated_communicator(r.sp, sp_rank, r.work);
  auto ulysses = make_simulated_communicator(ulysses_size, sp_rank % ulysses_size, r.work);
  auto ring = make_simulated_communicator(r.ring, sp_rank / ulysses_size, r.work);
  // ZeRO 2/3's gradient reduce-scatters and weight gathers, recorded for the time model only.
  auto shard_group = make_simulated_communicator(r.gradient_shards, 0, r.work);
  MemorySnapshot out;
  {
    // ZeRO stages 2 and 3: rank 0's gradient (and weight) shards, its blocks taken as they are (no
    // peers to sum with or gather from).
    ULY_CHECK(r.weight_shards == 1 || r.weight_shards == r.gradient_shards,
              "plan: weights sharded over " << r.weight_shards << " ranks but gradients over " << r.gradient_shards
                                            << " (ZeRO stage 3 shards both over all ranks)");
    LlamaWeights weights(r.config, r.options.grad_dtype,
                         ParameterSharding{r.work && r.gradient_shards > 1 ? shard_group.get() : nullptr, 0,
                                           r.gradient_shards, r.weight_shards > 1});
    if (r.lora.enabled()) weights.freeze();
    weights.allocate(*backend);
    std::unique_ptr<LoraWeights> lora;
    if (r.lora.enabled()) {
      lora = std::make_unique<LoraWeights>(r.config, r.lora);
      lora->allocate(*backend);
    }
    // Rank 0 holds the largest share of sharded optimizer state (the last ranks' may be short).
    auto optimizer_group = make_simulated_communicator(r.optimizer_shards, 0, r.work);
    std::unique_ptr<AdamW> optimizer;
    if (r.optimizer)
      optimizer = std::make_unique<AdamW>(lora ? static_cast<ParameterSet&>(*lora) : weights, *backend,
                                          OptimizerConfig{},
                                          OptimizerPlacement{optimizer_group.get(), r.optimizer_offload});
    // The attention working set per rank is the scheme's own: Ulysses' gathered heads, the
    // ring's K/V blocks in flight and fp32 accumulators, or both (parallel/ring_attention.h).
    // With --head-chunks the attention runs one chunk of H/C heads at a time: built for a chunk.
    const ModelConfig& c = r.config;
    const int64_t chunks = std::max<int64_t>(1, r.options.head_chunks);
    check_head_chunks(c.num_attention_heads, c.num_key_value_heads, layout.ulysses(), chunks);
    LlamaModel model(weights, *backend,
                     make_sequence_attention(*backend, *ulysses, *ring, layout.zigzag(),
                                             c.num_attention_heads / chunks, c.num_key_value_heads / chunks,
                                             c.head_dim, c.attention_scale()),
                     r.options);
    if (lora) model.attach_lora(*lora);
    TokenBatch batch;  // one sequence of the planned length; the values do not matter
    batch.B = 1;
    batch.S = r.seq_len;
    batch.ids.assign(r.seq_len, 0);
    batch.targets.assign(r.seq_len, 0);
    batch.positions.resize(r.seq_len);
    const int64_t doc_len = (r.seq_len + r.documents - 1) / r.documents;
    for (int64_t i = 0; i < r.seq_len; ++i) batch.positions[i] = static_cast<int32_t>(i % doc_len);
    SequenceShard shard = shard_sequence(batch, 0, *sp, layout);
    // The simulated group moves no data, so the row's documents are set here from the whole
    // row (padding past the sequence is a document of its own, as shard_sequence makes it).
    std::vector<int32_t> row(static_cast<size_t>(shard.S_global));
    for (int64_t g = 0; g < shard.S_global; ++g)
      row[g] = g < r.seq_len ? batch.positions[g] : static_cast<int32_t>(g - r.seq_len);
    shard.doc_start = document_starts(row);
    shard.rope_length = std::min(r.seq_len, doc_len);
    backend->pools().reset_peaks();
    if (r.work) {
      ParameterSet& trained = lora ? static_cast<ParameterSet&>(*lora) : weights;
      run_timed_step(r, *backend, model, weights, lora.get(), trained, optimizer.get(), shard);
    } else {
      model.forward_backward(shard, 1.0);
    }
    out = MemorySnapshot::of(backend->pools());
    out.at_peak = backend->pools().captured();
  }
  return out;
}

}  // namespace

MemorySnapshot plan_step_memory(const PlanRequest& r, bool itemize) {
  ULY_CHECK(r.seq_len > 0, "plan: sequence length must be positive, got " << r.seq_len);
  MemorySnapshot m = dry_run(r, 0);
  if (itemize) m.at_peak = dry_run(r, m.device.peak).at_peak;
  return m;
}

std::string peak_items_report(const MemorySnapshot& m, size_t rows) {
  struct Group {
    Pool pool;
    std::string label;
    size_t count = 0, bytes = 0;
  };
  std::vector<Group> groups;
  std::map<std::pair<int, std::string>, size_t> index;
  size_t total = 0;
  for (const LiveAllocation& a : m.at_peak) {
    // Parameters, their gradients and optimizer state are one line per pool; activations by label.
    const bool per_label = a.pool == Pool::Working || a.pool == Pool::Checkpoints;
    const std::string label = per_label ? a.label : "";
    auto [it, fresh] = index.emplace(std::make_pair(static_cast<int>(a.pool), label), groups.size());
    if (fresh) groups.push_back(Group{a.pool, label});
    Group& g = groups[it->second];
    ++g.count;
    g.bytes += a.bytes;
    total += a.bytes;
  }
  std::sort(groups.begin(), groups.end(), [](const Group& a, const Group& b) { return a.bytes > b.bytes; });
  std::ostringstream os;
  char line[256];
  os << "live at the device peak (" << m.at_peak.size() << " allocations, " << format_bytes(total) << "):\n";
  std::snprintf(line, sizeof line, "  %-12s %-52s %6s %12s\n", "pool", "family [shape] dtype", "count", "bytes");
  os << line;
  size_t rest = 0, rest_count = 0;
  for (size_t i = 0; i < groups.size(); ++i) {
    const Group& g = groups[i];
    if (i >= rows) {
      rest += g.bytes;
      rest_count += g.count;
      continue;
    }
    std::snprintf(line, sizeof line, "  %-12s %-52s %6zu %12s\n", pool_name(g.pool),
                  g.label.empty() ? "(all)" : g.label.c_str(), g.count, format_bytes(g.bytes).c_str());
    os << line;
  }
  if (rest_count > 0) {
    std::snprintf(line, sizeof line, "  %-12s %-52s %6zu %12s\n", "", "(the rest)", rest_count,
                  format_bytes(rest).c_str());
    os << line;
  }
  return os.str();
}

double working_coefficient(const MemorySnapshot& m, int64_t tokens, int64_t hidden) {
  const double fixed = static_cast<double>(m.peak(Pool::Weights) + m.peak(Pool::Gradients) + m.peak(Pool::Optimizer) +
                                           m.peak(Pool::Checkpoints));
  return (static_cast<double>(m.device.peak) - fixed) / (static_cast<double>(tokens) * hidden * 2.0);
}

std::string memory_report(const MemorySnapshot& m, int64_t tokens, int64_t hidden) {
  std::ostringstream os;
  char line[200];
  std::snprintf(line, sizeof line, "  %-18s %-7s %14s\n", "pool", "where", "peak");
  os << line;
  for (int i = 0; i < kNumPools; ++i) {
    const Pool p = static_cast<Pool>(i);
    std::snprintf(line, sizeof line, "  %-18s %-7s %14s\n", pool_name(p), pool_on_host(p) ? "host" : "device",
                  format_bytes(m.pools[i].peak).c_str());
    os << line;
  }
  for (int i = 1; i < kNumMemTags; ++i) {
    std::snprintf(line, sizeof line, "    of which %-17s %13s\n", mem_tag_name(static_cast<MemTag>(i)),
                  format_bytes(m.tags[i].peak).c_str());
    os << line;
  }
  std::snprintf(line, sizeof line, "  %-18s %-7s %14s  (%zu bytes)\n", "peak", "device",
                format_bytes(m.device.peak).c_str(), m.device.peak);
  os << line;
  std::snprintf(line, sizeof line, "  %-18s %-7s %14s  (%zu bytes)\n", "peak", "host", format_bytes(m.host.peak).c_str(),
                m.host.peak);
  os << line;
  std::snprintf(line, sizeof line, "  working-set coefficient c = %.2f  (%lld local tokens x hidden %lld x 2 B)\n",
                working_coefficient(m, tokens, hidden), static_cast<long long>(tokens),
                static_cast<long long>(hidden));
  os << line;
  return os.str();
}

int64_t max_sequence(PlanRequest req, size_t device_budget, size_t host_budget, int64_t granularity) {
  ULY_CHECK(granularity > 0 && req.sp > 0, "max_sequence: granularity and sp must be positive");
  // A multiple of the granularity and of what the token layout needs (sp, or lcm(sp, 2 ring) with zigzag).
  const int64_t unit = std::lcm(granularity % req.sp == 0 ? granularity : granularity * req.sp,
                                TokenLayout(req.sp, req.ring, req.zigzag).multiple());
  auto fits = [&](int64_t units) {
    req.seq_len = units * unit;
    req.documents = std::min<int64_t>(req.documents, req.seq_len);
    const MemorySnapshot m = plan_step_memory(req);
    return m.device.peak <= device_budget && m.host.peak <= host_budget;
  };
  // Sequences past 2^30 tokens leave the int32 token indices behind: the search stops there.
  const int64_t cap = (int64_t{1} << 30) / unit;
  if (!fits(1)) return 0;
  int64_t lo = 1, hi = 2;  // fits(lo), and hi is the next to try
  while (hi <= cap && fits(hi)) {
    lo = hi;
    hi *= 2;
  }
  if (hi > cap) hi = cap + 1;
  while (hi - lo > 1) {  // fits(lo), !fits(hi) (or hi past the cap)
    const int64_t mid = lo + (hi - lo) / 2;
    if (fits(mid)) lo = mid;
    else hi = mid;
  }
  return lo * unit;
}

bool keep_attention_fits(const PlanRequest& r, size_t device_available, size_t host_available,
                         size_t* device_peak) {
  PlanRequest keep = r;
  keep.options.keep_attention = true;
  const MemorySnapshot m = plan_step_memory(keep);
  if (device_peak) *device_peak = m.device.peak;
  return m.device.peak <= device_available && m.host.peak <= host_available;
}

std::string plan_misfit(const PlanRequest& r, const MemorySnapshot& planned, size_t device_available,
                        size_t host_available, OptionSpelling spelling) {
  const bool device_ok = planned.device.peak <= device_available;
  const bool host_ok = planned.host.peak <= host_available;
  if (device_ok && host_ok) return "";
  // Which single change would make it fit? Each is a cheap dry run. A train config's
  // offload_checkpoints implies checkpoint, as --offload-checkpoints does.
  const bool keys = spelling == OptionSpelling::TrainKeys;
  const char* checkpoint = keys ? "memory.checkpoint=true" : "--checkpoint";
  const char* offload = keys ? "memory.offload_checkpoints=-1" : "--offload-checkpoints=all";
  const char* tiled_loss = keys ? "memory.tiled_loss=1024" : "--tiled-loss";
  const char* tiled_mlp = keys ? "memory.tiled_mlp=0" : "--tiled-mlp";
  const char* every4 = keys ? "memory.checkpoint_segment=4" : "--checkpoint-segment 4";
  struct Variant { std::string change; StepOptions o; };
  std::vector<Variant> variants;
  StepOptions o = r.options;
  if (!o.checkpoint) { StepOptions v = o; v.checkpoint = true; variants.push_back({checkpoint, v}); }
  if (o.offload_layers != -1) {
    StepOptions v = o; v.checkpoint = true; v.offload_layers = -1;
    variants.push_back({offload, v});
  }
  if (o.loss_tile_tokens == 0) { StepOptions v = o; v.loss_tile_tokens = 1024; variants.push_back({tiled_loss, v}); }
  if (o.mlp_tiles == 1) { StepOptions v = o; v.mlp_tiles = 0; variants.push_back({tiled_mlp, v}); }
  { StepOptions v = o; v.checkpoint = true; v.offload_layers = -1; v.loss_tile_tokens = v.loss_tile_tokens ? v.loss_tile_tokens : 1024;
    if (v.mlp_tiles == 1) v.mlp_tiles = 0;
    const std::string tiles = std::string(" ") + tiled_loss + " " + tiled_mlp;
    variants.push_back({(keys ? std::string() : std::string(checkpoint) + " ") + offload + tiles, v});
    v.checkpoint_segment = 4;
    variants.push_back({std::string(offload) + " " + every4 + tiles, v}); }
  std::ostringstream fits;
  for (const Variant& v : variants) {
    PlanRequest alt = r;
    alt.options = v.o;
    const MemorySnapshot m = plan_step_memory(alt);
    if (m.device.peak <= device_available && m.host.peak <= host_available) {
      fits << v.change << " (device peak " << format_bytes(m.device.peak) << ")";
      break;  // the first (cheapest) one that fits is the advice
    }
  }
  std::ostringstream os;
  if (!device_ok)
    os << "the step needs " << format_bytes(planned.device.peak) << " of device memory but "
       << format_bytes(device_available) << " is available: over by "
       << format_bytes(planned.device.peak - device_available);
  else
    os << "the step needs " << format_bytes(planned.host.peak) << " of host memory ("
       << format_bytes(planned.peak(Pool::HostCheckpoints)) << " of offloaded checkpoints, "
       << format_bytes(planned.peak(Pool::HostOptimizer)) << " of offloaded optimizer state) but "
       << format_bytes(host_available) << " is available: over by " << format_bytes(planned.host.peak - host_available);
  os << " (sequence " << r.seq_len << ", sp " << r.sp << "). ";
  if (!fits.str().empty())
    os << "It fits with " << fits.str();
  else
    os << "No memory option alone makes it fit: use more sequence-parallel ranks (" << (keys ? "sp" : "--sp")
       << ") or a shorter sequence";
  return os.str();
}

void check_plan_fits(const PlanRequest& r, const MemorySnapshot& planned, size_t device_available,
                     size_t host_available, OptionSpelling spelling) {
  const std::string misfit = plan_misfit(r, planned, device_available, host_available, spelling);
  if (misfit.empty()) return;
  ULY_FAIL(misfit << (spelling == OptionSpelling::TrainKeys
                          ? ". 'ulysses plan' with the same model, sequence and options shows the plan per pool."
                          : ". Run with --dry-run to see the plan per pool."));
}

void check_tokens_fit_host(const std::string& what, int64_t tokens, size_t host_available) {
  const double need = static_cast<double>(tokens) * static_cast<double>(kHostBytesPerToken);
  ULY_CHECK(need <= static_cast<double>(host_available),
            what << " of " << tokens << " tokens needs about " << format_bytes(static_cast<size_t>(need))
                 << " of host memory for its token arrays alone (" << kHostBytesPerToken << " bytes a token); this host has "
                 << format_bytes(host_available) << " available: use a shorter sequence or fewer sequences");
}

}  // namespace ulysses
