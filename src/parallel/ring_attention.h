// Ring attention: the sequence stays split over the R ranks of a ring; each rank
// keeps its query rows and passes its K/V block on around the ring, so after R
// steps every query row has met every key block. Each step runs the backend's
// block-offset attention (Backend::attention_forward_block: the rows' global
// offsets give the causal and document masks, K/V keep their Hkv heads) and merges
// the block's output into a float32 accumulator by log-sum-exp.
//
// Backward: the K/V blocks go round again, each with a float32 dK/dV accumulator
// that collects every rank's share and arrives home after R exchanges; dQ stays
// local. The exchange of the next block is issued before the current block's
// compute (today's communicators block, so the overlap comes with an asynchronous
// sendrecv; the order is already the overlapped one).
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
  // Sends `send` on to the next rank and receives the previous rank's into `recv`.
  void pass_on(const Tensor& send, Tensor& recv);

  Backend& backend_;
  Communicator& comm_;
  TokenLayout layout_;
  int64_t R_, r_;
};

}  // namespace ulysses
