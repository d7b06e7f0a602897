// The attention over the heads a rank holds, once the sequence-parallel layout
// is settled: the backend's op when the rank holds the whole sequence (sp = 1, or
// Ulysses after its all-to-all), ring attention when the sequence is still split
// over the ranks of a ring (parallel/ring_attention.h). Same arguments as
// Backend::attention_forward / attention_backward, except that q, k, v, out, lse
// hold only this rank's rows and docs cover the whole row (rows() × ranks() tokens).
#pragma once
#include "backend/backend.h"

namespace ulysses {

class AttentionKernel {
 public:
  virtual ~AttentionKernel() = default;
  // The ranks the rows of one sequence are spread over (1: this rank holds them all).
  virtual int64_t ranks() const = 0;
  // out: [S_r, H, d] (write); lse: [H, S_r] (write); q: [S_r, H, d]; k, v: [S_r, Hkv, d].
  virtual void forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Documents& docs, double scale) = 0;
  // dq: [S_r, H, d], dk, dv: [S_r, Hkv, d] (write); out, lse from forward.
  virtual void backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& out, const Tensor& lse,
                        const Tensor& q, const Tensor& k, const Tensor& v, const Documents& docs, double scale) = 0;
};

// The backend's own attention: this rank holds every row.
class LocalAttentionKernel final : public AttentionKernel {
 public:
  explicit LocalAttentionKernel(Backend& backend) : backend_(backend) {}
  int64_t ranks() const override { return 1; }
  void forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v, const Documents& docs,
               double scale) override {
    backend_.attention_forward(out, lse, q, k, v, docs, scale);
  }
  void backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& out, const Tensor& lse,
                const Tensor& q, const Tensor& k, const Tensor& v, const Documents& docs, double scale) override {
    backend_.attention_backward(dq, dk, dv, dout, out, lse, q, k, v, docs, scale);
  }

 private:
  Backend& backend_;
};

}  // namespace ulysses
