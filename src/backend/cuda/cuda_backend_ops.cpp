// CudaBackend's ops: dispatch to the kernels, with arguments that Backend's
// entries (backend/op_checks.cpp) have checked: activations/weights float32 or
// bfloat16 (one dtype per call); rstd, lse, losses and weight gradients float32.
// Checked here: what only these kernels need (16-byte alignment for bf16
// attention) and host ids against the vocabulary (device ids are not read back).
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstring>
#include <utility>

#include "backend/attention_choice.h"
#include "backend/cuda/attention.h"
#include "backend/cuda/attention_fp32.h"
#include "backend/cuda/bias.h"
#include "backend/cuda/check.h"
#include "backend/cuda/cross_entropy.h"
#include "backend/cuda/dispatch.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/embedding.h"
#include "backend/cuda/gated_activation.h"
#include "backend/cuda/heads.h"
#include "backend/cuda/hopper_attention.h"
#include "backend/cuda/rmsnorm.h"
#include "backend/cuda/rope.h"
#include "core/log.h"

namespace ulysses::cuda {

namespace {

void need_aligned16(const Tensor& t, const char* op, const char* arg) {
  ULY_CHECK(reinterpret_cast<uintptr_t>(t.raw()) % 16 == 0,
            op << ": " << arg << " (" << t.describe() << ") is not 16-byte aligned; slice on aligned row boundaries");
}

}  // namespace

Tensor CudaBackend::to_device(const Tensor& t) {
  if (t.device() == Device::CUDA) return t;
  Tensor d = empty(t.shape(), t.dtype());
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
void CudaBackend::embedding_forward_impl(Tensor& out, const Tensor& ids, const Tensor& table) {
  const char* op = "embedding_forward";
  const int64_t V = table.dim(0), D = table.dim(1), N = ids.dim(0);
  check_host_ids(ids, V, false, op, "token id");
  const Tensor dids = to_device(ids);
  dispatch_act(table.dtype(), op, [&]<class T>() {
    cuda::embedding_forward(ptr<T>(out), ptr<const int32_t>(dids), ptr<const T>(table), N, V, D, stream_);
  });
}

void CudaBackend::embedding_backward_impl(Tensor& dtable, const Tensor& dout, const Tensor& ids) {
  const char* op = "embedding_backward";
  const int64_t V = dtable.dim(0), D = dtable.dim(1), N = ids.dim(0);
  check_host_ids(ids, V, false, op, "token id");
  const Tensor dids = to_device(ids);
  dispatch_act(dout.dtype(), op, [&]<class T>() {
    cuda::embedding_backward(ptr<float>(dtable), ptr<const T>(dout), ptr<const int32_t>(dids), N, V, D, stream_);
  });
}

// x: [..., D] in N rows.
void CudaBackend::rmsnorm_forward_impl(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w, double eps) {
  const int64_t D = x.dim(-1), N = D == 0 ? 0 : x.numel() / D;
  dispatch_act(x.dtype(), "rmsnorm_forward", [&]<class T>() {
    cuda::rmsnorm_forward(ptr<T>(y), ptr<float>(rstd), ptr<const T>(x), ptr<const T>(w), N, D, eps, stream_);
  });
}

void CudaBackend::rmsnorm_backward_impl(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w,
                                        const Tensor& rstd, bool accumulate_dx) {
  const int64_t D = x.dim(-1), N = D == 0 ? 0 : x.numel() / D;
  dispatch_act(x.dtype(), "rmsnorm_backward", [&]<class T>() {
    cuda::rmsnorm_backward(ptr<T>(dx), ptr<float>(dw), ptr<const T>(dy), ptr<const T>(x), ptr<const T>(w),
                           ptr<const float>(rstd), N, D, stream_, accumulate_dx);
  });
}

// pos and inv_freq may be host tensors: uploaded for the call.
void CudaBackend::rope_forward_impl(Tensor& out, const Tensor& x, const Tensor& pos, const Tensor& inv_freq) {
  const Tensor dpos = to_device(pos), dfreq = to_device(inv_freq);
  dispatch_act(x.dtype(), "rope_forward", [&]<class T>() {
    cuda::rope_forward(ptr<T>(out), ptr<const T>(x), ptr<const int32_t>(dpos), ptr<const float>(dfreq), x.dim(0),
                       x.dim(1), x.dim(2), stream_);
  });
}

void CudaBackend::rope_backward_impl(Tensor& dx, const Tensor& dout, const Tensor& pos, const Tensor& inv_freq) {
  const Tensor dpos = to_device(pos), dfreq = to_device(inv_freq);
  dispatch_act(dout.dtype(), "rope_backward", [&]<class T>() {
    cuda::rope_backward(ptr<T>(dx), ptr<const T>(dout), ptr<const int32_t>(dpos), ptr<const float>(dfreq),
                        dout.dim(0), dout.dim(1), dout.dim(2), stream_);
  });
}

namespace {
struct AttnDims {
  int64_t S, H, Hkv, d;
};
// q [S, H, d] and k [S, Hkv, d] (shapes checked by the entry); q, k and v must be
// 16-byte aligned for our kernels and cuDNN.
AttnDims attn_dims(const Tensor& q, const Tensor& k, const Tensor& v, const char* op) {
  for (const auto& [t, name] : {std::pair<const Tensor*, const char*>{&q, "q"}, {&k, "k"}, {&v, "v"}})
    need_aligned16(*t, op, name);
  return AttnDims{q.dim(0), q.dim(1), k.dim(1), q.dim(2)};
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
  return AttentionShape{a.S, a.H, a.Hkv, a.d, docs.count, docs.longest, docs.window};
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
  // A sliding window lives in doc_start only; cuDNN reads the document bounds.
  const bool ok = shape.window == 0 ? cudnn_->supports(cudnn_problem(shape, 1.0), backward, &why)
                                    : (why = "a sliding window of " + std::to_string(shape.window) + " tokens", false);
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

bool CudaBackend::use_hopper_forward(const AttentionShape& shape, int* variant) {
  if (act_dtype_ != DType::BF16 || shape.S == 0) return false;
  // Asked for (=hopper: ULYSSES_HOPPER_VARIANT's variant), or under =auto where the measured table has
  // our kernel ahead of the alternative (cuDNN; with a sliding window, which cuDNN does not take, our
  // FA2 kernels): the row's variant.
  std::string measured;
  const bool asked = attention_kernels_ == AttentionKernels::Hopper;
  const bool windowed = shape.window != 0;
  if (!asked && !(attention_kernels_ == AttentionKernels::Auto &&
                  hopper_measured_faster(shape.d, false, shape.longest, windowed, &measured)))
    return false;
  const int v = asked ? hopper_forward_ : attention_choice_row(shape.d, false, shape.longest, windowed)->variant;
  std::string why;
  const bool ok = hopper_attention_supported(shape.d, shape.H, shape.Hkv, &why);
  if (!ok && !asked) return false;  // (=auto: the alternative as usual, nothing to say)
  if (variant) *variant = v;
  const std::string choice =
      ok ? "our Hopper (sm_90a wgmma) kernel, variant " + std::to_string(v) +
               (asked ? "" : " (" + measured + ")")
         : "not our Hopper kernel (" + why + "), as ULYSSES_ATTENTION=auto";
  if (attention_choices_logged_.insert("hopper: " + choice).second) ULY_INFO("attention forward: " << choice);
  return ok;
}

bool CudaBackend::use_hopper_backward(const AttentionShape& shape, int* variant) {
  if (act_dtype_ != DType::BF16 || shape.S == 0) return false;
  // Asked for (=hopper with ULYSSES_HOPPER_BWD), or under =auto where the measured table has our
  // kernel ahead of the alternative (cuDNN; with a sliding window our FA2 kernels), the row's variant.
  std::string measured;
  const bool asked = attention_kernels_ == AttentionKernels::Hopper && hopper_backward_ != 0;
  const bool windowed = shape.window != 0;
  const AttentionChoiceRow* row = nullptr;
  if (!asked) {
    if (attention_kernels_ != AttentionKernels::Auto ||
        !hopper_measured_faster(shape.d, true, shape.longest, windowed, &measured))
      return false;
    row = attention_choice_row(shape.d, true, shape.longest, windowed);
  }
  std::string why;
  const int v = asked ? hopper_backward_ : row->variant;
  const bool ok = hopper_attention_backward_supported(shape.d, shape.H, shape.Hkv, &why);
  if (!ok && !asked) return false;
  if (variant) *variant = v;
  const std::string choice = ok ? "our Hopper (sm_90a wgmma) kernel, variant " + std::to_string(v) +
                                      (asked && hopper_deterministic_ ? ", deterministic" : "") +
                                      (asked ? "" : " (" + measured + ")")
                                : "not our Hopper kernel (" + why + "), as ULYSSES_ATTENTION=auto";
  if (attention_choices_logged_.insert("hopper backward: " + choice).second)
    ULY_INFO("attention backward: " << choice);
  return ok;
}

size_t CudaBackend::attention_workspace_bytes(const AttentionShape& s, bool backward) {
  if (act_dtype_ == DType::F32) return backward ? attention_backward_f32_workspace_bytes(s.S, s.H, s.Hkv, s.d) : 0;
  if (!backward && use_hopper_forward(s)) return 0;
  if (backward && use_hopper_backward(s)) return attention_backward_workspace_bytes(s.S, s.H, s.Hkv, s.d);
  if (use_cudnn(s, backward)) return cudnn_->workspace_bytes(cudnn_problem(s, 1.0), backward);
  return backward ? attention_backward_workspace_bytes(s.S, s.H, s.Hkv, padded_head_dim(s.d)) : 0;
}

void CudaBackend::attention_forward_impl(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                                         const Documents& docs, double scale) {
  const char* op = "attention_forward";
  const AttnDims a = attn_dims(q, k, v, op);
  const AttentionShape shape = shape_of(a, docs);
  if (q.dtype() == DType::F32) {
    attention_forward_f32(ptr<float>(out), ptr<float>(lse), ptr<const float>(q), ptr<const float>(k),
                          ptr<const float>(v), ptr<const int32_t>(docs.doc_start), a.S, a.H, a.Hkv, a.d, scale,
                          stream_);
    return;
  }
  need_aligned16(out, op, "out");
  if (int variant = 0; use_hopper_forward(shape, &variant)) {
    hopper_attention_forward_variant(ptr<__nv_bfloat16>(out), ptr<float>(lse), ptr<const __nv_bfloat16>(q),
                                     ptr<const __nv_bfloat16>(k), ptr<const __nv_bfloat16>(v),
                                     ptr<const int32_t>(docs.doc_start), a.S, a.H, a.Hkv, a.d, scale, stream_,
                                     variant);
    return;
  }
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

void CudaBackend::attention_backward_impl(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& out,
                                          const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                                          const Documents& docs, double scale) {
  const char* op = "attention_backward";
  const AttnDims a = attn_dims(q, k, v, op);
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
  if (int variant = 0; use_hopper_backward(shape, &variant)) {
    const size_t ws = attention_backward_workspace_bytes(a.S, a.H, a.Hkv, a.d);
    const Tensor workspace = attention_workspace(ws);
    hopper_attention_backward(ptr<__nv_bfloat16>(dq), ptr<__nv_bfloat16>(dk), ptr<__nv_bfloat16>(dv),
                              ptr<const __nv_bfloat16>(dout), ptr<const __nv_bfloat16>(out), ptr<const float>(lse),
                              ptr<const __nv_bfloat16>(q), ptr<const __nv_bfloat16>(k),
                              ptr<const __nv_bfloat16>(v), ptr<const int32_t>(docs.doc_start), a.S, a.H, a.Hkv,
                              a.d, scale, workspace.raw(), ws, stream_, variant,
                              hopper_deterministic_ && variant == 3, shape.longest);
    return;
  }
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

size_t CudaBackend::attention_block_workspace_bytes(const AttentionShape& s, bool backward) {
  if (!backward || s.S == 0) return 0;
  if (act_dtype_ == DType::F32) return attention_backward_f32_workspace_bytes(s.S, s.H, s.Hkv, s.d);
  return attention_backward_workspace_bytes(s.S, s.H, s.Hkv, padded_head_dim(s.d));
}

void CudaBackend::attention_forward_block_impl(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k,
                                               const Tensor& v, const Documents& docs, int64_t q0, int64_t k0,
                                               double scale) {
  const char* op = "attention_forward_block";
  const int64_t Sq = q.dim(0), Sk = k.dim(0), H = q.dim(1), Hkv = k.dim(1), d = q.dim(2);
  const int32_t* ds = ptr<const int32_t>(docs.doc_start);
  if (q.dtype() == DType::F32) {
    attention_forward_block_f32(ptr<float>(out), ptr<float>(lse), ptr<const float>(q), ptr<const float>(k),
                                ptr<const float>(v), ds, Sq, Sk, q0, k0, H, Hkv, d, scale, stream_);
    return;
  }
  attn_dims(q, k, v, op);
  need_aligned16(out, op, "out");
  const int64_t dp = padded_head_dim(d);
  if (dp != d) {
    Tensor out_p = empty({Sq, H, dp}, out.dtype());
    cuda::attention_forward_block(ptr<__nv_bfloat16>(out_p), ptr<float>(lse),
                                  ptr<const __nv_bfloat16>(pad_heads(*this, q, dp)),
                                  ptr<const __nv_bfloat16>(pad_heads(*this, k, dp)),
                                  ptr<const __nv_bfloat16>(pad_heads(*this, v, dp)), ds, Sq, Sk, q0, k0, H, Hkv, dp,
                                  scale, stream_);
    unpad_heads(*this, out, out_p);
    return;
  }
  cuda::attention_forward_block(ptr<__nv_bfloat16>(out), ptr<float>(lse), ptr<const __nv_bfloat16>(q),
                                ptr<const __nv_bfloat16>(k), ptr<const __nv_bfloat16>(v), ds, Sq, Sk, q0, k0, H, Hkv,
                                d, scale, stream_);
}

void CudaBackend::attention_backward_block_impl(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout,
                                                const Tensor& out, const Tensor& lse, const Tensor& q,
                                                const Tensor& k, const Tensor& v, const Documents& docs, int64_t q0,
                                                int64_t k0, double scale) {
  const char* op = "attention_backward_block";
  const int64_t Sq = q.dim(0), Sk = k.dim(0), H = q.dim(1), Hkv = k.dim(1), d = q.dim(2);
  const int32_t* ds = ptr<const int32_t>(docs.doc_start);
  const AttentionShape shape{Sq, H, Hkv, d, docs.count, docs.longest};
  const size_t ws = attention_block_workspace_bytes(shape, true);
  const Tensor workspace = attention_workspace(ws);
  void* wp = ws > 0 ? workspace.raw() : nullptr;
  if (q.dtype() == DType::F32) {
    attention_backward_block_f32(ptr<float>(dq), ptr<float>(dk), ptr<float>(dv), ptr<const float>(dout),
                                 ptr<const float>(out), ptr<const float>(lse), ptr<const float>(q),
                                 ptr<const float>(k), ptr<const float>(v), ds, Sq, Sk, q0, k0, H, Hkv, d, scale, wp,
                                 ws, stream_);
    return;
  }
  attn_dims(q, k, v, op);
  for (const auto& [t, name] : {std::pair<const Tensor*, const char*>{&dq, "dq"}, {&dk, "dk"}, {&dv, "dv"},
                                {&dout, "dout"}, {&out, "out"}})
    need_aligned16(*t, op, name);
  const int64_t dp = padded_head_dim(d);
  if (dp != d) {
    Tensor dq_p = empty({Sq, H, dp}, dq.dtype()), dk_p = empty({Sk, Hkv, dp}, dk.dtype()),
           dv_p = empty({Sk, Hkv, dp}, dv.dtype());
    cuda::attention_backward_block(ptr<__nv_bfloat16>(dq_p), ptr<__nv_bfloat16>(dk_p), ptr<__nv_bfloat16>(dv_p),
                                   ptr<const __nv_bfloat16>(pad_heads(*this, dout, dp)),
                                   ptr<const __nv_bfloat16>(pad_heads(*this, out, dp)), ptr<const float>(lse),
                                   ptr<const __nv_bfloat16>(pad_heads(*this, q, dp)),
                                   ptr<const __nv_bfloat16>(pad_heads(*this, k, dp)),
                                   ptr<const __nv_bfloat16>(pad_heads(*this, v, dp)), ds, Sq, Sk, q0, k0, H, Hkv, dp,
                                   scale, wp, ws, stream_);
    unpad_heads(*this, dq, dq_p);
    unpad_heads(*this, dk, dk_p);
    unpad_heads(*this, dv, dv_p);
    return;
  }
  cuda::attention_backward_block(ptr<__nv_bfloat16>(dq), ptr<__nv_bfloat16>(dk), ptr<__nv_bfloat16>(dv),
                                 ptr<const __nv_bfloat16>(dout), ptr<const __nv_bfloat16>(out), ptr<const float>(lse),
                                 ptr<const __nv_bfloat16>(q), ptr<const __nv_bfloat16>(k), ptr<const __nv_bfloat16>(v),
                                 ds, Sq, Sk, q0, k0, H, Hkv, d, scale, wp, ws, stream_);
}

void CudaBackend::attention_merge_impl(Tensor& acc, Tensor& acc_lse, const Tensor& out, const Tensor& lse) {
  const int64_t S = out.dim(0), H = out.dim(1), d = out.dim(2);
  if (out.dtype() == DType::F32)
    cuda::attention_merge(ptr<float>(acc), ptr<float>(acc_lse), ptr<const float>(out), ptr<const float>(lse), S, H, d,
                          stream_);
  else
    cuda::attention_merge(ptr<float>(acc), ptr<float>(acc_lse), ptr<const __nv_bfloat16>(out),
                          ptr<const float>(lse), S, H, d, stream_);
}

void CudaBackend::gated_activation_forward_impl(Tensor& h, const Tensor& gate, const Tensor& up, Activation act) {
  dispatch_act(gate.dtype(), "gated_activation_forward", [&]<class T>() {
    cuda::gated_activation_forward(ptr<T>(h), ptr<const T>(gate), ptr<const T>(up), gate.numel(), act, stream_);
  });
}

void CudaBackend::gated_activation_backward_impl(Tensor& dgate, Tensor& dup, const Tensor& dh, const Tensor& gate,
                                                 const Tensor& up, Activation act) {
  dispatch_act(gate.dtype(), "gated_activation_backward", [&]<class T>() {
    cuda::gated_activation_backward(ptr<T>(dgate), ptr<T>(dup), ptr<const T>(dh), ptr<const T>(gate),
                                    ptr<const T>(up), gate.numel(), act, stream_);
  });
}

void CudaBackend::cross_entropy_forward_backward_impl(Tensor& dlogits, Tensor& losses, const Tensor& logits,
                                                      const Tensor& targets, double grad_scale) {
  const char* op = "cross_entropy_forward_backward";
  const int64_t N = logits.dim(0), V = logits.dim(1);
  check_host_ids(targets, V, true, op, "target");
  const Tensor dt = to_device(targets);
  dispatch_act(logits.dtype(), op, [&]<class T>() {
    cuda::cross_entropy_forward_backward(ptr<T>(dlogits), ptr<float>(losses), ptr<const T>(logits),
                                         ptr<const int32_t>(dt), N, V, grad_scale, stream_);
  });
}

void CudaBackend::bias_add_impl(Tensor& y, const Tensor& b) {
  const int64_t n = b.numel(), N = n == 0 ? 0 : y.numel() / n;
  dispatch_act(y.dtype(), "bias_add", [&]<class T>() { cuda::bias_add(ptr<T>(y), ptr<const T>(b), N, n, stream_); });
}

void CudaBackend::bias_backward_impl(Tensor& db, const Tensor& dy) {
  const int64_t n = db.numel(), N = n == 0 ? 0 : dy.numel() / n;
  dispatch_act(dy.dtype(), "bias_backward",
               [&]<class T>() { cuda::bias_backward(ptr<float>(db), ptr<const T>(dy), N, n, stream_); });
}

void CudaBackend::add_impl(Tensor& y, const Tensor& a, const Tensor& b) {
  dispatch_act(a.dtype(), "add",
               [&]<class T>() { cuda::add(ptr<T>(y), ptr<const T>(a), ptr<const T>(b), a.numel(), stream_); });
}

void CudaBackend::axpy_impl(Tensor& y, const Tensor& x, double alpha) {
  const char* op = "axpy";
  dispatch_act(y.dtype(), op, [&]<class TY>() {
    dispatch_act(x.dtype(), op, [&]<class TX>() {
      cuda::axpy(ptr<TY>(y), ptr<const TX>(x), alpha, y.numel(), stream_);
    });
  });
}

void CudaBackend::init_uniform_impl(Tensor& x, uint64_t seed, uint64_t stream, int64_t first, float bound) {
  dispatch_act(x.dtype(), "init_uniform", [&]<class T>() {
    cuda::init_uniform(ptr<T>(x), seed, stream, first, bound, x.numel(), stream_);
  });
}

void CudaBackend::copy_heads_impl(Tensor& dst, int64_t dst_head0, const Tensor& src, int64_t src_head0,
                                  int64_t n_heads, bool accumulate) {
  const int64_t N = dst.dim(0), Hd = dst.dim(1), d = dst.dim(2), Hs = src.dim(1);
  dispatch_act(dst.dtype(), "copy_heads", [&]<class T>() {
    cuda::copy_heads(ptr<T>(dst), Hd, dst_head0, ptr<const T>(src), Hs, src_head0, n_heads, N, d, accumulate,
                     stream_);
  });
}

}  // namespace ulysses::cuda
