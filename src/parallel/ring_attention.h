// Ring attention: the sequence stays split over the R ranks of a ring; each rank
// keeps its query rows and passes its K/V block on around the ring, so after R
// steps every query row has met every key block. Each step runs the backend's
// block-offset attention (Backend::attention_forward_block: the rows' global
// offsets give the causal and document masks, K/V keep their Hkv heads) and merges
// the block's output into a float32 accumulator by log-sum-exp.
//
// Backward: the K/V blocks go round again, each with a float32 dK/dV accumulator
// that collects every rank's share and arrives home after R exchanges; dQ stays
// local. Exchanges are asynchronous (Communicator::sendrecv_async): the next K/V
// block travels while the current one is computed, and a dK/dV accumulator while
// the next block's attention backward runs, waited for just before its first add.
//
// Rows are the ring rank's chunks (parallel/token_layout.h): one contiguous slice,
// or with zigzag the chunks r and 2R - 1 - r. Block pairs that causality masks
// entirely are skipped, which is what zigzag balances.
#pragma once
#include "comm/communicator.h"
#include "parallel/attention_kernel.h"
#include "parallel/token_layout.h"

namespace ulysses {

class RingAttention final : public AttentionKernel {
 public:
  RingAttention(Backend& backend, Communicator& ring, bool zigzag);
  int64_t ranks() const override { return R_; }
  void forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v, const Documents& docs,
               double scale) override;
  void backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& out, const Tensor& lse,
                const Tensor& q, const Tensor& k, const Tensor& v, const Documents& docs, double scale) override;

 private:
  struct Chunk {
    int64_t local = 0, global = 0, length = 0;  // rows [local, local + length) are global [global, ...)
  };
  std::vector<Chunk> chunks(int64_t S_row, int64_t ring_rank) const;
  int64_t check_rows(const Tensor& q, const Documents& docs) const;
  // Packs k, v: [S_r, Hkv, d] into kv: [2, S_r, Hkv, d], and views its halves.
  static Tensor half(const Tensor& kv, int64_t i);
  // Starts sending `send` on to the next rank and receiving the previous rank's into `recv`.
  CommHandle pass_on(const Tensor& send, Tensor& recv, int tag);
  // Waits for an exchange started by pass_on (if any) and clears the handle.
  void finish(CommHandle& exchange);

  Backend& backend_;
  Communicator& comm_;
  TokenLayout layout_;
  int64_t R_, r_;
};

}  // namespace ulysses
