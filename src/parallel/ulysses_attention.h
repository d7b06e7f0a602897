// Ulysses sequence parallelism: an all-to-all turns "my S/P tokens, all heads"
// into "all S tokens, my H/P heads", each rank runs ordinary attention on its
// heads, and a second all-to-all turns the output back. KV heads are split
// when Hkv % P == 0 and replicated to the ranks that need them when P % Hkv == 0
// (their gradients summed back on the way out). The attention between the
// all-to-alls is `kernel`: the backend's op, or ring attention across Ulysses
// groups (the hybrid mesh), whose rows are then one ring rank's share of the row.
#pragma once
#include "parallel/attention_kernel.h"
#include "parallel/sequence_attention.h"

namespace ulysses {

class UlyssesAttention : public SequenceAttention {
 public:
  // kernel: null for the backend's attention over the whole gathered sequence.
  // scale: the softmax scale (ModelConfig::attention_scale).
  UlyssesAttention(Backend& backend, Communicator& sp_group, int64_t H, int64_t Hkv, int64_t d, double scale,
                   std::unique_ptr<AttentionKernel> kernel = nullptr);
  void forward(Tensor& out, AttentionSaved& saved, const Tensor& q, const Tensor& k, const Tensor& v,
               const Documents& docs) override;
  void backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const AttentionSaved& saved,
                const Documents& docs) override;
  void restore(Tensor& out, AttentionSaved& saved, const Tensor& q, const Tensor& k, const Tensor& v,
               const Documents& docs, const Tensor& kept_out, const Tensor& kept_lse) override;
  void prepare_backward(AttentionSaved& saved, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& out_local) override;

 private:
  // [S_l, heads, d] local → [S, n, d] gathered, rank j's block taken from head head0(j).
  Tensor scatter_heads(const Tensor& local, int64_t n, bool kv);
  // [S, n, d] gathered → [S_l, heads, d] local, the block from rank j written at head0(j)
  // (accumulated for replicated kv heads).
  void gather_heads(Tensor& local, const Tensor& gathered, int64_t n, bool kv);
  int64_t head0(int64_t rank, bool kv) const;

  Backend& backend_;
  Communicator& comm_;
  int64_t H_, Hkv_, d_, P_;
  double scale_;
  int64_t heads_per_rank_, kv_per_rank_;
  std::unique_ptr<AttentionKernel> kernel_;
};

}  // namespace ulysses
