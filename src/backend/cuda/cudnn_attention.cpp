// The cuDNN frontend's SDPA graphs for our attention (see cudnn_attention.h).
//
// Layouts, as cuDNN's [B, H, S, d] dims with our strides:
//   one document:  B = 1; q, out, dq: strides [S·H·d, d, H·d, 1] (our [S, H, d]); k, v likewise with Hkv;
//                  stats [1, H, S, 1] packed, which is our lse [H, S].
//   packed rows:   B = documents (padded to a power of two with empty entries), S = longest document
//                  (rounded up to a power of two); each entry starts at its ragged offset, sequence lengths
//                  mask the rest; stats are token-major [T, H] (the layout cuDNN offers for ragged
//                  statistics) and transposed to and from our [H, S] in the workspace.
//   equal documents: a packed row whose documents all have the same length (documents · longest = S,
//                  known on the host) runs as a dense batch, B = documents, S = that length, no
//                  offsets or padding masks; stats [B, H, S/B, 1] with strides [S/B, S, 1, 1] are our
//                  lse [H, S] itself. Falls back to the ragged form when cuDNN refuses it.
#include "backend/cuda/cudnn_attention.h"

#include <cudnn.h>
#include <cudnn_frontend.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>

#include "backend/cuda/check.h"
#include "backend/cuda/cudnn_ragged.h"
#include "core/log.h"
#include "core/error.h"

namespace fe = cudnn_frontend;

namespace ulysses::cuda {
namespace {

enum Uid : int64_t {
  kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV, kSeqLenQ, kSeqLenKV, kOffQ, kOffKV, kOffStats, kScale,
};

size_t align256(size_t x) { return (x + 255) / 256 * 256; }

int64_t next_pow2(int64_t x) {
  int64_t p = 1;
  while (p < x) p <<= 1;
  return p;
}

#define CUDNN_OK(call)                                                                              \
  do {                                                                                              \
    const cudnnStatus_t uly_st_ = (call);                                                           \
    ULY_CHECK(uly_st_ == CUDNN_STATUS_SUCCESS, #call << " failed: " << cudnnGetErrorString(uly_st_)); \
  } while (0)

// The batch layout of one problem: what a graph is built for.
struct Layout {
  bool ragged = false;
  int64_t batch = 1, seq = 0;  // cuDNN's B and S
  bool int64_offsets = false;
  bool ragged_stats = false;  // packed rows: token-major ragged statistics, else padded [batch, H, seq]
  bool dense = false;         // packed rows of equal documents as a dense batch

  static bool equal_documents(const AttentionProblem& p) {
    return p.documents > 1 && p.longest > 0 && p.documents * p.longest == p.S;
  }

  static Layout of(const AttentionProblem& p, const CudnnAttention::Options& o) {
    Layout l;
    if (o.dense_batch && equal_documents(p)) {
      l.dense = true;
      l.batch = p.documents;
      l.seq = p.longest;
      return l;
    }
    l.ragged = p.documents > 1;
    l.ragged_stats = l.ragged && o.ragged_stats;
    if (!l.ragged) {
      l.seq = p.S;
      return l;
    }
    l.batch = o.pad_batch ? next_pow2(p.documents) : p.documents;
    l.seq = std::min(next_pow2(std::max<int64_t>(p.longest, 1)), std::max<int64_t>(p.S, 1));
    // The largest offset is S · H · d (the end of q); int32 holds it below 2^31.
    l.int64_offsets = o.int64_offsets || p.S * p.H * p.d >= (int64_t{1} << 31);
    return l;
  }
};

struct Key {
  bool backward;
  int64_t S, H, Hkv, d, batch, seq;
  bool ragged, int64_offsets, ragged_stats, dense;
  auto tie() const {
    return std::tie(backward, S, H, Hkv, d, batch, seq, ragged, int64_offsets, ragged_stats, dense);
  }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
};

struct Entry {
  Layout layout;
  std::shared_ptr<fe::graph::Graph> graph;  // null when cuDNN has no engine for the problem
  std::string why;
  size_t cudnn_workspace = 0;
  size_t aux_bytes = 0;  // ragged offsets, sequence lengths and token-major stats after cuDNN's workspace
  std::vector<int64_t> plans;  // with autotune: the built plans that fit the first choice's workspace
  int64_t chosen = -1;         // the plan index in use once timed (autotune), else -1: the graph's own choice
};

// Byte offsets of the auxiliary arrays of a packed row in the workspace, after cuDNN's part.
struct AuxLayout {
  size_t off_q = 0, off_kv = 0, off_stats = 0, seq_len = 0, stats = 0, end = 0;
  AuxLayout(const Layout& l, const AttentionProblem& p, size_t base, bool backward) {
    if (l.dense && backward) {  // the backward takes its statistics packed [batch, H, seq]: a copy
      stats = align256(base);
      end = stats + align256(static_cast<size_t>(l.batch * p.H * l.seq) * 4);
      return;
    }
    if (!l.ragged) {
      end = base;
      return;
    }
    const size_t ob = static_cast<size_t>(l.batch + 1) * (l.int64_offsets ? 8 : 4);
    off_q = align256(base);
    off_kv = off_q + align256(ob);
    off_stats = off_kv + align256(ob);
    seq_len = off_stats + align256(ob);
    stats = seq_len + align256(static_cast<size_t>(l.batch) * 4);
    end = stats + align256(static_cast<size_t>(l.ragged_stats ? p.S * p.H : l.batch * p.H * l.seq) * 4);
  }
};

}  // namespace

struct CudnnAttention::Impl {
  cudaStream_t stream;
  Options options;
  cudnnHandle_t handle = nullptr;
  std::map<Key, Entry> cache;

  using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

  Key key_of(const AttentionProblem& p, const Layout& l, bool backward) const {
    return Key{backward, p.S, p.H, p.Hkv, p.d, l.batch, l.seq, l.ragged, l.int64_offsets, l.ragged_stats, l.dense};
  }

  // A [B, heads, seq, d] tensor over our [S, heads, d] layout.
  static TensorPtr tokens(fe::graph::Graph& g, const char* name, int64_t uid, const Layout& l, int64_t heads,
                          int64_t d) {
    return g.tensor(fe::graph::Tensor_attributes()
                        .set_name(name)
                        .set_uid(uid)
                        .set_dim({l.batch, heads, l.seq, d})
                        .set_stride({l.seq * heads * d, d, heads * d, 1})
                        .set_data_type(fe::DataType_t::BFLOAT16));
  }
  static void as_output(const TensorPtr& t, const char* name, int64_t uid, const Layout& l, int64_t heads, int64_t d) {
    t->set_output(true)
        .set_name(name)
        .set_uid(uid)
        .set_dim({l.batch, heads, l.seq, d})
        .set_stride({l.seq * heads * d, d, heads * d, 1})
        .set_data_type(fe::DataType_t::BFLOAT16);
  }
  static TensorPtr index(fe::graph::Graph& g, const char* name, int64_t uid, int64_t n, bool int64) {
    return g.tensor(fe::graph::Tensor_attributes()
                        .set_name(name)
                        .set_uid(uid)
                        .set_dim({n, 1, 1, 1})
                        .set_stride({1, 1, 1, 1})
                        .set_data_type(int64 ? fe::DataType_t::INT64 : fe::DataType_t::INT32));
  }
  // Stats: our lse [H, S] (one document, or equal documents as a dense batch in the forward),
  // token-major [T, H] (packed rows, ragged), or padded [batch, H, seq] (packed rows, not ragged;
  // and a dense batch's backward, which cuDNN wants packed in that order).
  static void stats_layout(fe::graph::Tensor_attributes& t, const Layout& l, int64_t H, bool backward) {
    t.set_uid(kStats).set_name("stats").set_data_type(fe::DataType_t::FLOAT).set_dim({l.batch, H, l.seq, 1});
    if (l.dense && !backward) t.set_stride({l.seq, l.batch * l.seq, 1, 1});
    else if (l.ragged_stats) t.set_stride({l.seq * H, 1, H, 1});
    else t.set_stride({H * l.seq, l.seq, 1, 1});
  }

  Entry build(const AttentionProblem& p, const Layout& l, bool backward) {
    Entry e;
    e.layout = l;
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    TensorPtr q = tokens(*g, "q", kQ, l, p.H, p.d), k = tokens(*g, "k", kK, l, p.Hkv, p.d),
              v = tokens(*g, "v", kV, l, p.Hkv, p.d);
    TensorPtr seq_q, seq_kv, off_q, off_kv, off_stats;
    if (l.ragged) {
      seq_q = index(*g, "seq_len_q", kSeqLenQ, l.batch, false);
      seq_kv = index(*g, "seq_len_kv", kSeqLenKV, l.batch, false);
      off_q = index(*g, "offsets_q", kOffQ, l.batch + 1, l.int64_offsets);
      off_kv = index(*g, "offsets_kv", kOffKV, l.batch + 1, l.int64_offsets);
      if (l.ragged_stats) off_stats = index(*g, "offsets_stats", kOffStats, l.batch + 1, l.int64_offsets);
      q->set_ragged_offset(off_q);
      k->set_ragged_offset(off_kv);
      v->set_ragged_offset(off_kv);
    }
    // The scale is passed by value at run time, so that one graph serves every scale.
    TensorPtr scale = g->tensor(fe::graph::Tensor_attributes()
                                    .set_name("scale")
                                    .set_uid(kScale)
                                    .set_dim({1, 1, 1, 1})
                                    .set_stride({1, 1, 1, 1})
                                    .set_is_pass_by_value(true)
                                    .set_data_type(fe::DataType_t::FLOAT));
    if (!backward) {
      auto opts = fe::graph::SDPA_attributes()
                      .set_name("attention_forward")
                      .set_generate_stats(true)
                      .set_attn_scale(scale)
                      .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                      .set_diagonal_band_right_bound(0);
      if (l.ragged) opts.set_padding_mask(true).set_seq_len_q(seq_q).set_seq_len_kv(seq_kv);
      auto [o, stats] = g->sdpa(q, k, v, opts);
      as_output(o, "out", kO, l, p.H, p.d);
      stats->set_output(true);
      stats_layout(*stats, l, p.H, false);
      if (l.ragged) o->set_ragged_offset(off_q);
      if (l.ragged_stats) stats->set_ragged_offset(off_stats);
    } else {
      TensorPtr o = tokens(*g, "out", kO, l, p.H, p.d), dout = tokens(*g, "dout", kDO, l, p.H, p.d);
      fe::graph::Tensor_attributes sa;
      stats_layout(sa, l, p.H, true);
      TensorPtr stats = g->tensor(sa);
      if (l.ragged) {
        o->set_ragged_offset(off_q);
        dout->set_ragged_offset(off_q);
      }
      if (l.ragged_stats) stats->set_ragged_offset(off_stats);
      auto opts = fe::graph::SDPA_backward_attributes()
                      .set_name("attention_backward")
                      .set_attn_scale(scale)
                      .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                      .set_diagonal_band_right_bound(0);
      if (l.ragged)
        opts.set_padding_mask(true)
            .set_seq_len_q(seq_q)
            .set_seq_len_kv(seq_kv)
            .set_max_total_seq_len_q(p.S)
            .set_max_total_seq_len_kv(p.S);
      auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, dout, stats, opts);
      as_output(dq, "dq", kDQ, l, p.H, p.d);
      as_output(dk, "dk", kDK, l, p.Hkv, p.d);
      as_output(dv, "dv", kDV, l, p.Hkv, p.d);
      if (l.ragged) {
        dq->set_ragged_offset(off_q);
        dk->set_ragged_offset(off_kv);
        dv->set_ragged_offset(off_kv);
      }
    }
    auto fail = [&](const char* step, fe::error_t err) {
      e.why = std::string(step) + ": " + err.get_message();
      e.graph.reset();
      return e;
    };
    if (auto err = g->validate(); !err.is_good()) return fail("validate", err);
    if (auto err = g->build_operation_graph(handle); !err.is_good()) return fail("build_operation_graph", err);
    const std::vector<fe::HeurMode_t> modes =
        options.autotune ? std::vector<fe::HeurMode_t>{fe::HeurMode_t::A, fe::HeurMode_t::B}
                         : std::vector<fe::HeurMode_t>{fe::HeurMode_t::A};
    if (auto err = g->create_execution_plans(modes); !err.is_good()) return fail("create_execution_plans", err);
    if (auto err = g->check_support(handle); !err.is_good()) return fail("check_support", err);
    if (auto err = g->build_plans(handle, options.autotune ? fe::BuildPlanPolicy_t::ALL
                                                           : fe::BuildPlanPolicy_t::HEURISTICS_CHOICE);
        !err.is_good())
      return fail("build_plans", err);
    int64_t ws = 0;
    if (auto err = g->get_workspace_size(ws); !err.is_good()) return fail("get_workspace_size", err);
    if (options.autotune)
      for (int64_t i = 0; i < g->get_execution_plan_count(); ++i) {
        int64_t wi = 0;
        if (g->get_workspace_size_plan_at_index(i, wi).is_good() && wi <= ws) e.plans.push_back(i);
      }
    e.graph = g;
    e.cudnn_workspace = static_cast<size_t>(ws);
    e.aux_bytes = AuxLayout(l, p, align256(e.cudnn_workspace), backward).end - align256(e.cudnn_workspace);
    return e;
  }

  Entry& entry(const AttentionProblem& p, bool backward) {
    const Layout l = Layout::of(p, options);
    const Key key = key_of(p, l, backward);
    auto it = cache.find(key);
    if (it == cache.end()) {
      Entry e = build(p, l, backward);
      if (!e.graph && l.dense) {  // cuDNN refused the dense batch: the ragged form serves any documents
        ULY_INFO("cuDNN refused a dense batch of " << l.batch << " x " << l.seq << (backward ? " (backward)" : "")
                                                   << ": " << e.why << "; running it as a ragged batch");
        Options ragged = options;
        ragged.dense_batch = false;
        e = build(p, Layout::of(p, ragged), backward);
      }
      it = cache.emplace(key, std::move(e)).first;
    }
    return it->second;
  }

  // Fills the ragged offsets and lengths of a packed row into the workspace; returns the layout.
  AuxLayout prepare_ragged(const AttentionProblem& p, const Entry& e, const int32_t* bounds, void* workspace,
                           std::unordered_map<int64_t, void*>& pack, bool backward) {
    const Layout& l = e.layout;
    AuxLayout a(l, p, align256(e.cudnn_workspace), backward);
    if (!l.ragged) return a;
    auto* base = static_cast<char*>(workspace);
    auto* seq_len = reinterpret_cast<int32_t*>(base + a.seq_len);
    if (l.int64_offsets)
      ragged_offsets<int64_t>(reinterpret_cast<int64_t*>(base + a.off_q), reinterpret_cast<int64_t*>(base + a.off_kv),
                              reinterpret_cast<int64_t*>(base + a.off_stats), seq_len, bounds, p.documents, l.batch,
                              p.H, p.Hkv, p.d, stream);
    else
      ragged_offsets<int32_t>(reinterpret_cast<int32_t*>(base + a.off_q), reinterpret_cast<int32_t*>(base + a.off_kv),
                              reinterpret_cast<int32_t*>(base + a.off_stats), seq_len, bounds, p.documents, l.batch,
                              p.H, p.Hkv, p.d, stream);
    pack[kSeqLenQ] = seq_len;
    pack[kSeqLenKV] = seq_len;
    pack[kOffQ] = base + a.off_q;
    pack[kOffKV] = base + a.off_kv;
    if (l.ragged_stats) pack[kOffStats] = base + a.off_stats;
    return a;
  }

  // Times each candidate plan on this call's own buffers (every plan writes the same outputs, which
  // the real call then overwrites) and keeps the fastest: one host wait per problem, on its first call.
  void tune(Entry& e, std::unordered_map<int64_t, void*>& pack, void* workspace, const char* what) {
    cudaEvent_t t0, t1;
    CUDA_CHECK(cudaEventCreate(&t0));
    CUDA_CHECK(cudaEventCreate(&t1));
    std::string times;
    float best_ms = 0;
    for (int64_t i : e.plans) {
      if (!e.graph->execute_plan_at_index(handle, pack, workspace, i).is_good()) continue;  // warm-up
      float total = 0;
      bool ok = true;
      for (int r = 0; r < 3 && ok; ++r) {
        CUDA_CHECK(cudaEventRecord(t0, stream));
        ok = e.graph->execute_plan_at_index(handle, pack, workspace, i).is_good();
        CUDA_CHECK(cudaEventRecord(t1, stream));
        CUDA_CHECK(cudaEventSynchronize(t1));
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, t0, t1));
        total += ms;
      }
      if (!ok) continue;
      times += (times.empty() ? "" : ", ") + std::to_string(i) + ": " + std::to_string(total / 3) + " ms";
      if (e.chosen < 0 || total / 3 < best_ms) {
        e.chosen = i;
        best_ms = total / 3;
      }
    }
    CUDA_CHECK(cudaEventDestroy(t0));
    CUDA_CHECK(cudaEventDestroy(t1));
    ULY_CHECK(e.chosen >= 0, what << ": none of cuDNN's " << e.plans.size() << " plans ran");
    ULY_INFO("cuDNN " << what << ": plan " << e.chosen << " of " << e.plans.size() << " timed (" << times << ")");
  }

  void run(Entry& e, std::unordered_map<int64_t, void*>& pack, const AttentionProblem& p, void* workspace,
           const char* what) {
    ULY_CHECK(e.graph, what << ": cuDNN has no engine for this problem (" << e.why << ")");
    float scale = static_cast<float>(p.scale);
    pack[kScale] = &scale;
    CUDNN_OK(cudnnSetStream(handle, stream));
    if (e.plans.size() > 1 && e.chosen < 0) tune(e, pack, workspace, what);
    fe::error_t err = e.chosen >= 0 ? e.graph->execute_plan_at_index(handle, pack, workspace, e.chosen)
                                    : e.graph->execute(handle, pack, workspace);
    ULY_CHECK(err.is_good(), what << ": cuDNN execute failed: " << err.get_message());
  }
};

CudnnAttention::CudnnAttention(cudaStream_t stream) : CudnnAttention(stream, Options{}) {}

CudnnAttention::CudnnAttention(cudaStream_t stream, Options options) : impl_(std::make_unique<Impl>()) {
  impl_->stream = stream;
  impl_->options = options;
  const cudnnStatus_t st = cudnnCreate(&impl_->handle);
  ULY_CHECK(st == CUDNN_STATUS_SUCCESS,
            "cuDNN: cannot create a handle (" << cudnnGetErrorString(st) << "; runtime " << runtime_version()
                                              << "); make the cuDNN 9 libraries findable (LD_LIBRARY_PATH, see "
                                                 "docs/launching.md)");
}

CudnnAttention::~CudnnAttention() {
  if (impl_ && impl_->handle) cudnnDestroy(impl_->handle);
}

std::string CudnnAttention::runtime_version() {
  const size_t v = cudnnGetVersion();
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

bool CudnnAttention::supports(const AttentionProblem& p, bool backward, std::string* why) {
  if (p.S <= 0 || p.H <= 0 || p.Hkv <= 0 || p.H % p.Hkv != 0 || p.documents < 1) {
    if (why) *why = "empty or malformed problem";
    return false;
  }
  if (p.d % 8 != 0 || p.d > 128) {
    if (why) *why = "head size " + std::to_string(p.d) + " (the fused kernels take multiples of 8 up to 128)";
    return false;
  }
  // Seen on the H200, 2026-12-02: cuDNN 9.14's variable-length kernels fault on packed rows
  // that 9.19 runs correctly (tests/cuda/cudnn_attention_test.cpp).
  if (p.documents > 1 && cudnnGetVersion() < 91900) {
    if (why) *why = "packed documents need cuDNN >= 9.19 at run time (" + runtime_version() + " is loaded; see docs/launching.md)";
    return false;
  }
  const Entry& e = impl_->entry(p, backward);
  if (!e.graph && why) *why = e.why;
  return static_cast<bool>(e.graph);
}

size_t CudnnAttention::workspace_bytes(const AttentionProblem& p, bool backward) {
  const Entry& e = impl_->entry(p, backward);
  ULY_CHECK(e.graph, "cuDNN attention: no engine for this problem (" << e.why << ")");
  const size_t total = e.aux_bytes ? align256(e.cudnn_workspace) + e.aux_bytes : e.cudnn_workspace;
  return total;
}

void CudnnAttention::forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* q, const __nv_bfloat16* k,
                             const __nv_bfloat16* v, const int32_t* bounds, const AttentionProblem& p,
                             void* workspace) {
  Entry& e = impl_->entry(p, false);
  std::unordered_map<int64_t, void*> pack{{kQ, const_cast<__nv_bfloat16*>(q)},
                                          {kK, const_cast<__nv_bfloat16*>(k)},
                                          {kV, const_cast<__nv_bfloat16*>(v)},
                                          {kO, out}};
  const AuxLayout a = impl_->prepare_ragged(p, e, bounds, workspace, pack, false);
  const Layout& l = e.layout;
  float* stats = l.ragged ? reinterpret_cast<float*>(static_cast<char*>(workspace) + a.stats) : lse;
  pack[kStats] = stats;
  impl_->run(e, pack, p, workspace, "attention_forward");
  if (l.ragged_stats) transpose_f32(lse, stats, p.S, p.H, impl_->stream);  // [S, H] -> [H, S]
  else if (l.ragged) padded_stats_to_lse(lse, stats, bounds, p.documents, p.H, l.seq, p.S, impl_->stream);
}

void CudnnAttention::backward(__nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv, const __nv_bfloat16* dout,
                              const __nv_bfloat16* out, const float* lse, const __nv_bfloat16* q,
                              const __nv_bfloat16* k, const __nv_bfloat16* v, const int32_t* bounds,
                              const AttentionProblem& p, void* workspace) {
  Entry& e = impl_->entry(p, true);
  std::unordered_map<int64_t, void*> pack{{kQ, const_cast<__nv_bfloat16*>(q)},
                                          {kK, const_cast<__nv_bfloat16*>(k)},
                                          {kV, const_cast<__nv_bfloat16*>(v)},
                                          {kO, const_cast<__nv_bfloat16*>(out)},
                                          {kDO, const_cast<__nv_bfloat16*>(dout)},
                                          {kDQ, dq},
                                          {kDK, dk},
                                          {kDV, dv}};
  const AuxLayout a = impl_->prepare_ragged(p, e, bounds, workspace, pack, true);
  const Layout& l = e.layout;
  const float* stats = lse;
  if (l.dense) {  // [H, batch·seq] -> [batch, H, seq]: equal documents fill every padded row
    float* t = reinterpret_cast<float*>(static_cast<char*>(workspace) + a.stats);
    lse_to_padded_stats(t, lse, bounds, p.documents, p.H, l.seq, p.S, impl_->stream);
    stats = t;
  } else if (l.ragged) {
    float* t = reinterpret_cast<float*>(static_cast<char*>(workspace) + a.stats);
    if (l.ragged_stats) {
      transpose_f32(t, lse, p.H, p.S, impl_->stream);  // [H, S] -> [S, H]
    } else {  // padded rows are masked, but hold no NaN all the same
      CUDA_CHECK(cudaMemsetAsync(t, 0, a.end - a.stats, impl_->stream));
      lse_to_padded_stats(t, lse, bounds, p.documents, p.H, l.seq, p.S, impl_->stream);
    }
    stats = t;
  }
  pack[kStats] = const_cast<float*>(stats);
  impl_->run(e, pack, p, workspace, "attention_backward");
}

std::string CudnnAttention::form(const AttentionProblem& p, bool backward) {
  const Layout& l = impl_->entry(p, backward).layout;
  return l.dense ? "dense batch" : l.ragged ? "ragged batch" : "one sequence";
}

std::string CudnnAttention::describe(const AttentionProblem& p, bool backward) {
  const Layout& l = impl_->entry(p, backward).layout;
  if (!l.dense && !l.ragged) return form(p, backward);
  return form(p, backward) + " of " + std::to_string(l.batch) + " x " + std::to_string(l.seq);
}

size_t CudnnAttention::cached_graphs() const { return impl_->cache.size(); }

size_t CudnnAttention::candidate_plans(const AttentionProblem& p, bool backward) {
  return std::max<size_t>(1, impl_->entry(p, backward).plans.size());
}

int64_t CudnnAttention::chosen_plan(const AttentionProblem& p, bool backward) {
  return impl_->entry(p, backward).chosen;
}

}  // namespace ulysses::cuda
