// CudaBackend's ops: shape/dtype checks (as the CPU backend makes them), then
// dispatch to the kernels. Activations/weights are float32 or bfloat16 (one
// dtype per call); rstd, lse, losses and weight gradients are float32.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstring>
#include <utility>

#include "backend/cuda/attention.h"
#include "backend/cuda/attention_fp32.h"
#include "backend/cuda/check.h"
#include "backend/cuda/cross_entropy.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/embedding.h"
#include "backend/cuda/heads.h"
#include "backend/cuda/rmsnorm.h"
#include "backend/cuda/rope.h"
#include "backend/cuda/swiglu.h"
#include "backend/cuda/tensor_checks.h"
#include "core/log.h"

namespace ulysses::cuda {

using namespace checks;

namespace {

// Rows and the normalised width of an activation [..., D].
void rows_cols(const Tensor& t, const char* op, const char* arg, int64_t* rows, int64_t* cols) {
  ULY_CHECK(t.ndim() >= 1, op << ": " << arg << " must have at least one dimension, got " << t.describe());
  *cols = t.dim(-1);
  *rows = *cols == 0 ? 0 : t.numel() / *cols;
}

void need_aligned16(const Tensor& t, const char* op, const char* arg) {
  ULY_CHECK(reinterpret_cast<uintptr_t>(t.raw()) % 16 == 0,
            op << ": " << arg << " (" << t.describe() << ") is not 16-byte aligned; slice on aligned row boundaries");
}

}  // namespace

Tensor CudaBackend::device_int32(const Tensor& t, const char* op, const char* arg) {
  ULY_CHECK(t.defined(), op << ": " << arg << " is an undefined tensor");
  need_dtype(t, DType::I32, op, arg);
  if (t.device() == Device::CUDA) return t;
  Tensor d = empty(t.shape(), DType::I32);
  copy(d, t);
  return d;
}

void CudaBackend::check_host_ids(const Tensor& ids, int64_t V, bool allow_ignored, const char* op, const char* what) {
  if (ids.device() == Device::CUDA) return;
  const int32_t* h = static_cast<const int32_t*>(ids.raw());
  for (int64_t i = 0; i < ids.numel(); ++i)
    ULY_CHECK((allow_ignored && h[i] == -100) || (h[i] >= 0 && h[i] < V),
              op << ": " << what << " " << h[i] << " at position " << i << " is outside the vocabulary [0, " << V
                 << ")" << (allow_ignored ? " and is not -100 (ignored)" : "")
                 << "; the tokenizer and the model's vocab_size disagree");
}

// Ids on the host are checked here; ids already on the device were validated when the
// batch was made (model/llama.cpp), so the step reads nothing back (the kernels never go
// out of bounds on a bad id all the same: see embedding.h).
void CudaBackend::embedding_forward(Tensor& out, const Tensor& ids, const Tensor& table) {
  const char* op = "embedding_forward";
  need_act(table, op, "table");
  need_ndim(table, 2, op, "table");
  const int64_t V = table.dim(0), D = table.dim(1);
  need_dtype(ids, DType::I32, op, "ids");
  need_ndim(ids, 1, op, "ids");
  const int64_t N = ids.dim(0);
  need_device(out, op, "out");
  need_dtype(out, table.dtype(), op, "out");
  need_shape(out, {N, D}, op, "out");
  check_host_ids(ids, V, false, op, "token id");
  const Tensor dids = device_int32(ids, op, "ids");
  dispatch_act(table.dtype(), op, [&]<class T>() {
    cuda::embedding_forward(ptr<T>(out), ptr<const int32_t>(dids), ptr<const T>(table), N, V, D, stream_);
  });
}

void CudaBackend::embedding_backward(Tensor& dtable, const Tensor& dout, const Tensor& ids) {
  const char* op = "embedding_backward";
  need_device(dtable, op, "dtable");
  need_dtype(dtable, DType::F32, op, "dtable");
  need_ndim(dtable, 2, op, "dtable");
  const int64_t V = dtable.dim(0), D = dtable.dim(1);
  need_dtype(ids, DType::I32, op, "ids");
  need_ndim(ids, 1, op, "ids");
  const int64_t N = ids.dim(0);
  need_act(dout, op, "dout");
  need_shape(dout, {N, D}, op, "dout");
  check_host_ids(ids, V, false, op, "token id");
  const Tensor dids = device_int32(ids, op, "ids");
  dispatch_act(dout.dtype(), op, [&]<class T>() {
    cuda::embedding_backward(ptr<float>(dtable), ptr<const T>(dout), ptr<const int32_t>(dids), N, V, D, stream_);
  });
}

void CudaBackend::rmsnorm_forward(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w, double eps) {
  const char* op = "rmsnorm_forward";
  ULY_CHECK(eps >= 0, op << ": eps must be >= 0, got " << eps);
  need_act(x, op, "x");
  int64_t N, D;
  rows_cols(x, op, "x", &N, &D);
  need_like(y, x, op, "y", "x");
  need_device(w, op, "w");
  need_dtype(w, x.dtype(), op, "w");
  need_shape(w, {D}, op, "w");
  need_device(rstd, op, "rstd");
  need_dtype(rstd, DType::F32, op, "rstd");
  ULY_CHECK(rstd.numel() == N, op << ": rstd is " << rstd.describe() << ", expected " << N << " elements (one per row of x "
                                  << shape_str(x.shape()) << ")");
  dispatch_act(x.dtype(), op, [&]<class T>() {
    cuda::rmsnorm_forward(ptr<T>(y), ptr<float>(rstd), ptr<const T>(x), ptr<const T>(w), N, D, eps, stream_);
  });
}

void CudaBackend::rmsnorm_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w,
                                   const Tensor& rstd) {
  const char* op = "rmsnorm_backward";
  need_act(x, op, "x");
  int64_t N, D;
  rows_cols(x, op, "x", &N, &D);
  need_like(dx, x, op, "dx", "x");
  need_like(dy, x, op, "dy", "x");
  need_device(w, op, "w");
  need_dtype(w, x.dtype(), op, "w");
  need_shape(w, {D}, op, "w");
  need_device(dw, op, "dw");
  need_dtype(dw, DType::F32, op, "dw");
  need_shape(dw, {D}, op, "dw");
  need_device(rstd, op, "rstd");
  need_dtype(rstd, DType::F32, op, "rstd");
  ULY_CHECK(rstd.numel() == N, op << ": rstd is " << rstd.describe() << ", expected " << N << " elements");
  dispatch_act(x.dtype(), op, [&]<class T>() {
    cuda::rmsnorm_backward(ptr<T>(dx), ptr<float>(dw), ptr<const T>(dy), ptr<const T>(x), ptr<const T>(w),
                           ptr<const float>(rstd), N, D, stream_);
  });
}

namespace {
struct RopeDims {
  int64_t N, H, d;
};
RopeDims rope_dims(const Tensor& x, const Tensor& pos, const Tensor& inv_freq, const char* op) {
  need_ndim(x, 3, op, "x");
  RopeDims r{x.dim(0), x.dim(1), x.dim(2)};
  ULY_CHECK(r.d % 2 == 0, op << ": head dim " << r.d << " must be even");
  need_ndim(pos, 1, op, "pos");
  ULY_CHECK(pos.dim(0) == r.N, op << ": pos is " << pos.describe() << ", expected " << r.N << " positions");
  ULY_CHECK(inv_freq.defined(), op << ": inv_freq is undefined");
  need_dtype(inv_freq, DType::F32, op, "inv_freq");
  need_shape(inv_freq, {r.d / 2}, op, "inv_freq");
  return r;
}
}  // namespace

void CudaBackend::rope_forward(Tensor& out, const Tensor& x, const Tensor& pos, const Tensor& inv_freq) {
  const char* op = "rope_forward";
  need_act(x, op, "x");
  need_like(out, x, op, "out", "x");
  const RopeDims r = rope_dims(x, pos, inv_freq, op);
  const Tensor dpos = device_int32(pos, op, "pos");
  Tensor dfreq = inv_freq;
  if (inv_freq.device() != Device::CUDA) {
    dfreq = empty(inv_freq.shape(), DType::F32);
    copy(dfreq, inv_freq);
  }
  dispatch_act(x.dtype(), op, [&]<class T>() {
    cuda::rope_forward(ptr<T>(out), ptr<const T>(x), ptr<const int32_t>(dpos), ptr<const float>(dfreq), r.N, r.H, r.d,
                       stream_);
  });
}

void CudaBackend::rope_backward(Tensor& dx, const Tensor& dout, const Tensor& pos, const Tensor& inv_freq) {
  const char* op = "rope_backward";
  need_act(dout, op, "dout");
  need_like(dx, dout, op, "dx", "dout");
  const RopeDims r = rope_dims(dout, pos, inv_freq, op);
  const Tensor dpos = device_int32(pos, op, "pos");
  Tensor dfreq = inv_freq;
  if (inv_freq.device() != Device::CUDA) {
    dfreq = empty(inv_freq.shape(), DType::F32);
    copy(dfreq, inv_freq);
  }
  dispatch_act(dout.dtype(), op, [&]<class T>() {
    cuda::rope_backward(ptr<T>(dx), ptr<const T>(dout), ptr<const int32_t>(dpos), ptr<const float>(dfreq), r.N, r.H,
                        r.d, stream_);
  });
}

namespace {
struct AttnDims {
  int64_t S, H, Hkv, d;
};
AttnDims attn_dims(const Tensor& q, const Tensor& k, const Tensor& v, const Documents& docs, const char* op) {
  for (const auto& [t, name] : {std::pair<const Tensor*, const char*>{&q, "q"}, {&k, "k"}, {&v, "v"}}) {
    need_device(*t, op, name);
    need_act(*t, op, name);
    need_dtype(*t, q.dtype(), op, name);
    need_ndim(*t, 3, op, name);
    need_aligned16(*t, op, name);
  }
  AttnDims a{q.dim(0), q.dim(1), k.dim(1), q.dim(2)};
  need_shape(k, {a.S, a.Hkv, a.d}, op, "k");
  need_shape(v, {a.S, a.Hkv, a.d}, op, "v");
  ULY_CHECK(a.Hkv > 0 && a.H % a.Hkv == 0,
            op << ": query heads " << a.H << " must be a multiple of key/value heads " << a.Hkv);
  ULY_CHECK(docs.doc_start.defined() && docs.bounds.defined(), op << ": the documents are not set");
  need_device(docs.doc_start, op, "doc_start");
  need_dtype(docs.doc_start, DType::I32, op, "doc_start");
  need_shape(docs.doc_start, {a.S}, op, "doc_start");
  need_device(docs.bounds, op, "document bounds");
  need_dtype(docs.bounds, DType::I32, op, "document bounds");
  need_shape(docs.bounds, {docs.count + 1}, op, "document bounds");
  ULY_CHECK(docs.count >= (a.S > 0 ? 1 : 0) && docs.longest <= a.S,
            op << ": " << docs.count << " documents, the longest of " << docs.longest << " tokens, in " << a.S);
  return a;
}
void need_attention_lse(const Tensor& lse, const AttnDims& a, const char* op) {
  need_device(lse, op, "lse");
  need_dtype(lse, DType::F32, op, "lse");
  need_shape(lse, {a.H, a.S}, op, "lse");
}

// Our bf16 kernels take d in {16, 32, 64, 128}; other head sizes (8 in tiny
// test models, 48, 96, ...) run zero-padded to the next supported size: zero
// q/k columns add nothing to the scores (the scale stays the caller's) and zero
// v columns give zero output columns, which are dropped.
int64_t padded_head_dim(int64_t d) {
  for (int64_t s : {16, 32, 64, 128})
    if (d <= s) return s;
  return d;
}

Tensor pad_heads(Backend& be, const Tensor& x, int64_t dp) {
  Tensor y = be.empty({x.dim(0), x.dim(1), dp}, x.dtype());
  auto stream = static_cast<cudaStream_t>(be.native_stream());
  const size_t es = dtype_size(x.dtype()), d = static_cast<size_t>(x.dim(2));
  CUDA_CHECK(cudaMemsetAsync(y.raw(), 0, y.nbytes(), stream));
  CUDA_CHECK(cudaMemcpy2DAsync(y.raw(), dp * es, x.raw(), d * es, d * es, static_cast<size_t>(x.dim(0) * x.dim(1)),
                               cudaMemcpyDeviceToDevice, stream));
  return y;
}

void unpad_heads(Backend& be, Tensor& x, const Tensor& y) {
  auto stream = static_cast<cudaStream_t>(be.native_stream());
  const size_t es = dtype_size(x.dtype()), d = static_cast<size_t>(x.dim(2)), dp = static_cast<size_t>(y.dim(2));
  CUDA_CHECK(cudaMemcpy2DAsync(x.raw(), d * es, y.raw(), dp * es, d * es, static_cast<size_t>(x.dim(0) * x.dim(1)),
                               cudaMemcpyDeviceToDevice, stream));
}

AttentionShape shape_of(const AttnDims& a, const Documents& docs) {
  return AttentionShape{a.S, a.H, a.Hkv, a.d, docs.count, docs.longest};
}

}  // namespace

// The attention's scratch memory, for this call only: with the memory reserved
// (the default) taking it is free, and a step's peak is then the same in its
// first and in every later step (the planner takes attention_workspace_bytes too).
Tensor CudaBackend::attention_workspace(size_t bytes) {
  return bytes == 0 ? Tensor{} : empty({static_cast<int64_t>(bytes)}, DType::U8);
}

AttentionProblem CudaBackend::cudnn_problem(const AttentionShape& s, double scale) const {
  AttentionProblem p;
  p.S = s.S;
  p.H = s.H;
  p.Hkv = s.Hkv;
  p.d = s.d;
  p.documents = s.documents;
  p.longest = s.longest;
  p.scale = scale;
  return p;
}

bool CudaBackend::use_cudnn(const AttentionShape& shape, bool backward) {
  if (act_dtype_ != DType::BF16 || attention_kernels_ == AttentionKernels::Own || shape.S == 0) return false;
  if (!cudnn_) cudnn_ = std::make_unique<CudnnAttention>(stream_);
  std::string why;
  const bool ok = cudnn_->supports(cudnn_problem(shape, 1.0), backward, &why);
  ULY_CHECK(ok || attention_kernels_ != AttentionKernels::Cudnn,
            "attention: ULYSSES_ATTENTION=cudnn, but cuDNN " << CudnnAttention::runtime_version()
                                                             << " has no engine for S=" << shape.S << ", H=" << shape.H
                                                             << ", Hkv=" << shape.Hkv << ", d=" << shape.d << ", "
                                                             << shape.documents << " documents: " << why);
  // The form (one sequence, dense or ragged batch) is logged, not its sizes: a line per form.
  const std::string choice = ok ? "cuDNN " + CudnnAttention::runtime_version() + " fused attention, " +
                                      cudnn_->form(cudnn_problem(shape, 1.0), backward)
                                : "our attention kernels (cuDNN: " + why + ")";
  if (attention_choices_logged_.insert(choice).second)
    ULY_INFO("attention " << (backward ? "backward" : "forward") << ": " << choice);
  return ok;
}

size_t CudaBackend::attention_workspace_bytes(const AttentionShape& s, bool backward) {
  if (act_dtype_ == DType::F32) return backward ? attention_backward_f32_workspace_bytes(s.S, s.H, s.Hkv, s.d) : 0;
  if (use_cudnn(s, backward)) return cudnn_->workspace_bytes(cudnn_problem(s, 1.0), backward);
  return backward ? attention_backward_workspace_bytes(s.S, s.H, s.Hkv, padded_head_dim(s.d)) : 0;
}

void CudaBackend::attention_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Documents& docs, double scale) {
  const char* op = "attention_forward";
  const AttnDims a = attn_dims(q, k, v, docs, op);
  need_like(out, q, op, "out", "q");
  need_attention_lse(lse, a, op);
  const AttentionShape shape = shape_of(a, docs);
  if (q.dtype() == DType::F32) {
    attention_forward_f32(ptr<float>(out), ptr<float>(lse), ptr<const float>(q), ptr<const float>(k),
                          ptr<const float>(v), ptr<const int32_t>(docs.doc_start), a.S, a.H, a.Hkv, a.d, scale,
                          stream_);
    return;
  }
  need_aligned16(out, op, "out");
  if (use_cudnn(shape, false)) {
    const Tensor workspace = attention_workspace(cudnn_->workspace_bytes(cudnn_problem(shape, scale), false));
    cudnn_->forward(ptr<__nv_bfloat16>(out), ptr<float>(lse), ptr<const __nv_bfloat16>(q),
                    ptr<const __nv_bfloat16>(k), ptr<const __nv_bfloat16>(v), ptr<const int32_t>(docs.bounds),
                    cudnn_problem(shape, scale), workspace.defined() ? workspace.raw() : nullptr);
    return;
  }
  if (padded_head_dim(a.d) != a.d) {
    const int64_t dp = padded_head_dim(a.d);
    Tensor out_p = empty({a.S, a.H, dp}, out.dtype());
    cuda::attention_forward(ptr<__nv_bfloat16>(out_p), ptr<float>(lse),
                            ptr<const __nv_bfloat16>(pad_heads(*this, q, dp)),
                            ptr<const __nv_bfloat16>(pad_heads(*this, k, dp)),
                            ptr<const __nv_bfloat16>(pad_heads(*this, v, dp)), ptr<const int32_t>(docs.doc_start), a.S,
                            a.H, a.Hkv, dp, scale, stream_);
    unpad_heads(*this, out, out_p);
    return;
  }
  cuda::attention_forward(ptr<__nv_bfloat16>(out), ptr<float>(lse), ptr<const __nv_bfloat16>(q),
                          ptr<const __nv_bfloat16>(k), ptr<const __nv_bfloat16>(v), ptr<const int32_t>(docs.doc_start),
                          a.S, a.H, a.Hkv, a.d, scale, stream_);
}

void CudaBackend::attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& out,
                                     const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Documents& docs, double scale) {
  const char* op = "attention_backward";
  const AttnDims a = attn_dims(q, k, v, docs, op);
  need_like(dq, q, op, "dq", "q");
  need_like(dout, q, op, "dout", "q");
  need_like(out, q, op, "out", "q");
  need_like(dk, k, op, "dk", "k");
  need_like(dv, v, op, "dv", "v");
  need_attention_lse(lse, a, op);
  const AttentionShape shape = shape_of(a, docs);
  if (q.dtype() == DType::F32) {
    const size_t ws = attention_workspace_bytes(shape, true);
    const Tensor workspace = attention_workspace(ws);
    attention_backward_f32(ptr<float>(dq), ptr<float>(dk), ptr<float>(dv), ptr<const float>(dout),
                           ptr<const float>(out), ptr<const float>(lse), ptr<const float>(q), ptr<const float>(k),
                           ptr<const float>(v), ptr<const int32_t>(docs.doc_start), a.S, a.H, a.Hkv, a.d, scale,
                           ws > 0 ? workspace.raw() : nullptr, ws, stream_);
    return;
  }
  for (const auto& [t, name] : {std::pair<const Tensor*, const char*>{&dq, "dq"}, {&dk, "dk"}, {&dv, "dv"},
                                {&dout, "dout"}, {&out, "out"}})
    need_aligned16(*t, op, name);
  if (use_cudnn(shape, true)) {
    const Tensor workspace = attention_workspace(cudnn_->workspace_bytes(cudnn_problem(shape, scale), true));
    cudnn_->backward(ptr<__nv_bfloat16>(dq), ptr<__nv_bfloat16>(dk), ptr<__nv_bfloat16>(dv),
                     ptr<const __nv_bfloat16>(dout), ptr<const __nv_bfloat16>(out), ptr<const float>(lse),
                     ptr<const __nv_bfloat16>(q), ptr<const __nv_bfloat16>(k), ptr<const __nv_bfloat16>(v),
                     ptr<const int32_t>(docs.bounds), cudnn_problem(shape, scale),
                     workspace.defined() ? workspace.raw() : nullptr);
    return;
  }
  const int64_t dp = padded_head_dim(a.d);
  const size_t ws = attention_workspace_bytes(shape, true);
  const Tensor workspace = attention_workspace(ws);
  if (dp != a.d) {
    Tensor dq_p = empty({a.S, a.H, dp}, dq.dtype()), dk_p = empty({a.S, a.Hkv, dp}, dk.dtype()),
           dv_p = empty({a.S, a.Hkv, dp}, dv.dtype());
    cuda::attention_backward(ptr<__nv_bfloat16>(dq_p), ptr<__nv_bfloat16>(dk_p), ptr<__nv_bfloat16>(dv_p),
                             ptr<const __nv_bfloat16>(pad_heads(*this, dout, dp)),
                             ptr<const __nv_bfloat16>(pad_heads(*this, out, dp)), ptr<const float>(lse),
                             ptr<const __nv_bfloat16>(pad_heads(*this, q, dp)),
                             ptr<const __nv_bfloat16>(pad_heads(*this, k, dp)),
                             ptr<const __nv_bfloat16>(pad_heads(*this, v, dp)), ptr<const int32_t>(docs.doc_start),
                             a.S, a.H, a.Hkv, dp, scale, ws > 0 ? workspace.raw() : nullptr, ws, stream_);
    unpad_heads(*this, dq, dq_p);
    unpad_heads(*this, dk, dk_p);
    unpad_heads(*this, dv, dv_p);
    return;
  }
  cuda::attention_backward(ptr<__nv_bfloat16>(dq), ptr<__nv_bfloat16>(dk), ptr<__nv_bfloat16>(dv),
                           ptr<const __nv_bfloat16>(dout), ptr<const __nv_bfloat16>(out), ptr<const float>(lse),
                           ptr<const __nv_bfloat16>(q), ptr<const __nv_bfloat16>(k), ptr<const __nv_bfloat16>(v),
                           ptr<const int32_t>(docs.doc_start), a.S, a.H, a.Hkv, a.d, scale,
                           ws > 0 ? workspace.raw() : nullptr, ws, stream_);
}

void CudaBackend::swiglu_forward(Tensor& h, const Tensor& gate, const Tensor& up) {
  const char* op = "swiglu_forward";
  need_act(gate, op, "gate");
  need_like(up, gate, op, "up", "gate");
  need_like(h, gate, op, "h", "gate");
  dispatch_act(gate.dtype(), op, [&]<class T>() {
    cuda::swiglu_forward(ptr<T>(h), ptr<const T>(gate), ptr<const T>(up), 1, gate.numel(), stream_);
  });
}

void CudaBackend::swiglu_backward(Tensor& dgate, Tensor& dup, const Tensor& dh, const Tensor& gate,
                                  const Tensor& up) {
  const char* op = "swiglu_backward";
  need_act(gate, op, "gate");
  need_like(up, gate, op, "up", "gate");
  need_like(dh, gate, op, "dh", "gate");
  need_like(dgate, gate, op, "dgate", "gate");
  need_like(dup, gate, op, "dup", "gate");
  dispatch_act(gate.dtype(), op, [&]<class T>() {
    cuda::swiglu_backward(ptr<T>(dgate), ptr<T>(dup), ptr<const T>(dh), ptr<const T>(gate), ptr<const T>(up), 1,
                          gate.numel(), stream_);
  });
}

void CudaBackend::cross_entropy_forward_backward(Tensor& dlogits, Tensor& losses, const Tensor& logits,
                                                 const Tensor& targets, double grad_scale) {
  const char* op = "cross_entropy_forward_backward";
  need_act(logits, op, "logits");
  need_ndim(logits, 2, op, "logits");
  const int64_t N = logits.dim(0), V = logits.dim(1);
  need_like(dlogits, logits, op, "dlogits", "logits");
  need_device(losses, op, "losses");
  need_dtype(losses, DType::F32, op, "losses");
  need_shape(losses, {N}, op, "losses");
  need_dtype(targets, DType::I32, op, "targets");
  need_shape(targets, {N}, op, "targets");
  check_host_ids(targets, V, true, op, "target");
  const Tensor dt = device_int32(targets, op, "targets");
  dispatch_act(logits.dtype(), op, [&]<class T>() {
    cuda::cross_entropy_forward_backward(ptr<T>(dlogits), ptr<float>(losses), ptr<const T>(logits),
                                         ptr<const int32_t>(dt), N, V, grad_scale, stream_);
  });
}

void CudaBackend::add(Tensor& y, const Tensor& a, const Tensor& b) {
  const char* op = "add";
  need_act(a, op, "a");
  need_device(b, op, "b");
  need_device(y, op, "y");
  ULY_CHECK(b.dtype() == a.dtype() && y.dtype() == a.dtype() && b.numel() == a.numel() && y.numel() == a.numel(),
            op << ": y " << y.describe() << ", a " << a.describe() << ", b " << b.describe()
               << " must have one dtype and one element count");
  dispatch_act(a.dtype(), op,
               [&]<class T>() { cuda::add(ptr<T>(y), ptr<const T>(a), ptr<const T>(b), a.numel(), stream_); });
}

void CudaBackend::axpy(Tensor& y, const Tensor& x, double alpha) {
  const char* op = "axpy";
  need_act(y, op, "y");
  need_act(x, op, "x");
  ULY_CHECK(x.numel() == y.numel(), op << ": y " << y.describe() << " and x " << x.describe()
                                       << " have different element counts");
  dispatch_act(y.dtype(), op, [&]<class TY>() {
    dispatch_act(x.dtype(), op, [&]<class TX>() {
      cuda::axpy(ptr<TY>(y), ptr<const TX>(x), alpha, y.numel(), stream_);
    });
  });
}

void CudaBackend::copy_heads(Tensor& dst, int64_t dst_head0, const Tensor& src, int64_t src_head0, int64_t n_heads,
                             bool accumulate) {
  const char* op = "copy_heads";
  need_act(dst, op, "dst");
  need_device(src, op, "src");
  need_dtype(src, dst.dtype(), op, "src");
  need_ndim(dst, 3, op, "dst");
  need_ndim(src, 3, op, "src");
  const int64_t N = dst.dim(0), Hd = dst.dim(1), d = dst.dim(2), Hs = src.dim(1);
  ULY_CHECK(src.dim(0) == N && src.dim(2) == d,
            op << ": src " << src.describe() << " and dst " << dst.describe() << " must agree in N and d");
  ULY_CHECK(n_heads >= 0 && dst_head0 >= 0 && src_head0 >= 0 && dst_head0 + n_heads <= Hd &&
                src_head0 + n_heads <= Hs,
            op << ": heads [" << src_head0 << ", " << src_head0 + n_heads << ") of src " << src.describe() << " -> ["
               << dst_head0 << ", " << dst_head0 + n_heads << ") of dst " << dst.describe() << " are out of range");
  dispatch_act(dst.dtype(), op, [&]<class T>() {
    cuda::copy_heads(ptr<T>(dst), Hd, dst_head0, ptr<const T>(src), Hs, src_head0, n_heads, N, d, accumulate,
                     stream_);
  });
}

}  // namespace ulysses::cuda
