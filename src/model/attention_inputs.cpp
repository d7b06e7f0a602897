#include "model/attention_inputs.h"

#include "backend/profile_scope.h"
#include "model/lora_linear.h"

namespace ulysses {
namespace {

// Rows [h0 d, (h0 + n) d) of a projection's weight or bias: the heads of the range.
Tensor head_rows(const Tensor& t, int64_t h0, int64_t n, int64_t d) { return t.slice(h0 * d, (h0 + n) * d); }

// x: [N, n, d] -> y: [N, n, d], each head's d values RMS-normed with w: [d].
void head_norm(Backend& be, Tensor& y, Tensor& rstd, const Tensor& x, const Parameter& w, double eps) {
  const int64_t rows = x.dim(0) * x.dim(1), d = x.dim(2);
  Tensor y2 = y.reshape({rows, d});
  be.rmsnorm_forward(y2, rstd, x.reshape({rows, d}), w.value, eps);
}

void head_norm_backward(Backend& be, GradientAccumulator& grads, Tensor& dx, const Tensor& dy, const Tensor& x,
                        Parameter& w, const Tensor& rstd) {
  const int64_t rows = x.dim(0) * x.dim(1), d = x.dim(2);
  Tensor dx2 = dx.reshape({rows, d});
  be.rmsnorm_backward(dx2, grads.target(w), dy.reshape({rows, d}), x.reshape({rows, d}), w.value, rstd);
}

}  // namespace

void qkv_forward(Backend& be, const ModelConfig& c, const LlamaWeights::Layer& L, const HeadRange& r,
                 const Tensor& xn, const Tensor& pos, const Tensor& inv_freq, Tensor& q, Tensor& k, Tensor& v,
                 QkNormSaved* saved, const LoraWeights* lora, int64_t layer) {
  const int64_t N = xn.dim(0), d = c.head_dim;
  const DType t = be.act_dtype();
  ProfileScope prof(be, "qkv projections");
  q = be.empty({N, r.q * d}, t);
  k = be.empty({N, r.kv * d}, t);
  v = be.empty({N, r.kv * d}, t);
  be.matmul(q, xn, head_rows(L.wq->value, r.q0, r.q, d), false, true);
  be.matmul(k, xn, head_rows(L.wk->value, r.kv0, r.kv, d), false, true);
  be.matmul(v, xn, head_rows(L.wv->value, r.kv0, r.kv, d), false, true);
  if (lora) {
    const auto add = [&](Tensor& y, LoraTarget t, int64_t h0, int64_t n) {
      if (const LoraAdapter* ad = lora->adapter(layer, t))
        lora_forward(be, y, xn, *ad, lora->scaling(), {h0 * d, (h0 + n) * d});
    };
    add(q, LoraTarget::Q, r.q0, r.q);
    add(k, LoraTarget::K, r.kv0, r.kv);
    add(v, LoraTarget::V, r.kv0, r.kv);
  }
  if (c.qkv_bias) {
    be.bias_add(q, head_rows(L.q_bias->value, r.q0, r.q, d));
    be.bias_add(k, head_rows(L.k_bias->value, r.kv0, r.kv, d));
    be.bias_add(v, head_rows(L.v_bias->value, r.kv0, r.kv, d));
  }
  q = q.reshape({N, r.q, d});
  k = k.reshape({N, r.kv, d});
  v = v.reshape({N, r.kv, d});
  if (c.qk_norm) {
    prof.next("rmsnorm");
    QkNormSaved s;
    s.q_pre = q;
    s.k_pre = k;
    s.rstd_q = be.empty({N * r.q}, DType::F32);
    s.rstd_k = be.empty({N * r.kv}, DType::F32);
    q = be.empty({N, r.q, d}, t);
    k = be.empty({N, r.kv, d}, t);
    head_norm(be, q, s.rstd_q, s.q_pre, *L.q_norm, c.rms_norm_eps);
    head_norm(be, k, s.rstd_k, s.k_pre, *L.k_norm, c.rms_norm_eps);
    if (saved) *saved = std::move(s);
  }
  prof.next("rope");
  be.rope_forward(q, q, pos, inv_freq);
  be.rope_forward(k, k, pos, inv_freq);
}

void qkv_backward(Backend& be, GradientAccumulator& grads, const ModelConfig& c, const LlamaWeights::Layer& L,
                  const HeadRange& r, const Tensor& pos, const Tensor& inv_freq, Tensor& dq, Tensor& dk,
                  const Tensor& dv, const QkNormSaved& saved) {
  const int64_t N = dq.dim(0), d = c.head_dim;
  ProfileScope prof(be, "rope");
  be.rope_backward(dq, dq, pos, inv_freq);
  be.rope_backward(dk, dk, pos, inv_freq);
  if (c.qk_norm) {
    prof.next("rmsnorm");
    Tensor dq_pre = be.empty(dq.shape(), dq.dtype()), dk_pre = be.empty(dk.shape(), dk.dtype());
    head_norm_backward(be, grads, dq_pre, dq, saved.q_pre, *L.q_norm, saved.rstd_q);
    head_norm_backward(be, grads, dk_pre, dk, saved.k_pre, *L.k_norm, saved.rstd_k);
    dq = dq_pre;
    dk = dk_pre;
  }
  if (c.qkv_bias) {
    prof.next("qkv projections");
    Tensor dbq = head_rows(grads.target(*L.q_bias), r.q0, r.q, d);
    Tensor dbk = head_rows(grads.target(*L.k_bias), r.kv0, r.kv, d);
    Tensor dbv = head_rows(grads.target(*L.v_bias), r.kv0, r.kv, d);
    be.bias_backward(dbq, dq.reshape({N, r.q * d}));
    be.bias_backward(dbk, dk.reshape({N, r.kv * d}));
    be.bias_backward(dbv, dv.reshape({N, r.kv * d}));
  }
}

void qkv_projections_backward(Backend& be, GradientAccumulator& grads, const ModelConfig& c,
                              const LlamaWeights::Layer& L, const HeadRange& r, const Tensor& xn, const Tensor& dq,
                              const Tensor& dk, const Tensor& dv, Tensor& dxn, bool accumulate,
                              const LoraWeights* lora, int64_t layer) {
  ProfileScope prof(be, "qkv projections");
  const int64_t N = xn.dim(0), d = c.head_dim;
  const auto one = [&](Parameter& w, LoraTarget t, const Tensor& dy, int64_t h0, int64_t n, bool add) {
    be.matmul(dxn, dy, head_rows(w.value, h0, n, d), false, false, 1.0, add ? 1.0 : 0.0);
    if (!grads.frozen()) {
      double beta = 1.0;
      // Whole heads range: the step's first contribution may overwrite (beta 0); a chunk adds.
      Tensor& whole = n * d == w.shape[0] ? grads.first_write(w, beta) : grads.target(w);
      Tensor wg = head_rows(whole, h0, n, d);
      be.matmul(wg, dy, xn, true, false, 1.0, beta);
    }
    if (lora)
      if (const LoraAdapter* ad = lora->adapter(layer, t))
        lora_backward(be, dxn, *ad, dy, xn, lora->scaling(), {h0 * d, (h0 + n) * d});
  };
  one(*L.wq, LoraTarget::Q, dq.reshape({N, r.q * d}), r.q0, r.q, accumulate);
  one(*L.wk, LoraTarget::K, dk.reshape({N, r.kv * d}), r.kv0, r.kv, true);
  one(*L.wv, LoraTarget::V, dv.reshape({N, r.kv * d}), r.kv0, r.kv, true);
}

}  // namespace ulysses
