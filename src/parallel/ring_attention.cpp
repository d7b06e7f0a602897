#include "parallel/ring_attention.h"

#include "backend/profile_scope.h"
#include "parallel/collectives.h"

namespace ulysses {
namespace {

// The two exchanges in flight at once have their own tags (MPI matches by tag; NCCL by order).
constexpr int kBlockTag = 7, kGradTag = 8;

// lse: [H, n × C] viewed as [H, n, C]: chunk c of the rows is "head" c.
Tensor lse_chunks(const Tensor& lse, int64_t n) { return lse.reshape({lse.dim(0), n, lse.dim(1) / n}); }

}  // namespace

RingAttention::RingAttention(Backend& backend, Communicator& ring, bool zigzag)
    : backend_(backend), comm_(ring), layout_(ring.size(), ring.size(), zigzag), R_(ring.size()), r_(ring.rank()) {}

std::vector<RingAttention::Chunk> RingAttention::chunks(int64_t S_row, int64_t ring_rank) const {
  std::vector<Chunk> out;
  int64_t local = 0;
  for (const TokenRange& t : layout_.ring_chunks(S_row, ring_rank)) {
    out.push_back({local, t.start, t.length});
    local += t.length;
  }
  return out;
}

int64_t RingAttention::check_rows(const Tensor& q, const Documents& docs) const {
  const int64_t S_row = docs.tokens();
  ULY_CHECK(q.dim(0) * R_ == S_row, "ring attention: " << q.dim(0) << " rows on each of " << R_
                                                       << " ring ranks, but the documents cover " << S_row
                                                       << " tokens");
  return S_row;
}

Tensor RingAttention::half(const Tensor& kv, int64_t i) {
  return kv.slice(i, i + 1).reshape({kv.dim(1), kv.dim(2), kv.dim(3)});
}

CommHandle RingAttention::pass_on(const Tensor& send, Tensor& recv, int tag) {
  ProfileScope prof(backend_, "ring exchange");
  return sendrecv_async(comm_, backend_, send, static_cast<int>((r_ + 1) % R_), recv,
                        static_cast<int>((r_ + R_ - 1) % R_), tag);
}

void RingAttention::finish(CommHandle& exchange) {
  if (!exchange) return;
  ProfileScope prof(backend_, "ring exchange");
  exchange->wait();
  exchange.reset();
}

void RingAttention::forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                            const Documents& docs, double scale) {
  const int64_t S_row = check_rows(q, docs), H = q.dim(1), d = q.dim(2);
  const std::vector<Chunk> mine = chunks(S_row, r_);
  const int64_t n = static_cast<int64_t>(mine.size()), C = mine[0].length;
  const DType acc_t = backend_.accumulator_dtype(q.dtype());

  // The K/V block in hand and the one arriving, [2, S_r, Hkv, d] each.
  Tensor kv[2];
  {
    MemTagScope tag(backend_.pools(), MemTag::Communication);
    kv[0] = backend_.empty({2, k.dim(0), k.dim(1), k.dim(2)}, k.dtype());
    if (R_ > 1) kv[1] = backend_.empty(kv[0].shape(), k.dtype());
  }
  Tensor k0 = half(kv[0], 0), v0 = half(kv[0], 1);
  backend_.copy(k0, k);
  backend_.copy(v0, v);

  // Per query chunk: the running output and lse (float32 on devices with bf16 data).
  std::vector<Tensor> acc(n), acc_lse(n);
  for (int64_t a = 0; a < n; ++a) {
    acc[a] = backend_.empty({C, H, d}, acc_t);
    acc_lse[a] = backend_.empty({H, C}, acc_t);
  }
  std::vector<bool> started(n, false);
  Tensor part = backend_.empty({C, H, d}, q.dtype());
  Tensor part_lse = backend_.empty({H, C}, acc_t);

  CommHandle next;  // the exchange bringing the next block
  for (int64_t t = 0; t < R_; ++t) {
    const int64_t src = (r_ - t + R_) % R_;
    Tensor& cur = kv[t % 2];
    finish(next);
    if (t + 1 < R_) next = pass_on(cur, kv[(t + 1) % 2], kBlockTag);  // travels during this block's compute
    const Tensor kc = half(cur, 0), vc = half(cur, 1);
    for (int64_t a = 0; a < n; ++a) {
      const Chunk& qa = mine[a];
      const Tensor qs = q.slice(qa.local, qa.local + qa.length);
      for (const Chunk& kb : chunks(S_row, src)) {
        if (kb.global > qa.global + qa.length - 1) continue;  // every key after every query: masked
        const Tensor ks = kc.slice(kb.local, kb.local + kb.length), vs = vc.slice(kb.local, kb.local + kb.length);
        // The first block a chunk meets is its own diagonal one (t = 0), where every row sees itself.
        Tensor& o = started[a] ? part : acc[a];
        Tensor& l = started[a] ? part_lse : acc_lse[a];
        if (!started[a] && acc_t != q.dtype()) {
          backend_.attention_forward_block(part, part_lse, qs, ks, vs, docs, qa.global, kb.global, scale);
          backend_.copy(acc[a], part);
          backend_.copy(acc_lse[a], part_lse);
        } else {
          backend_.attention_forward_block(o, l, qs, ks, vs, docs, qa.global, kb.global, scale);
          if (started[a]) backend_.attention_merge(acc[a], acc_lse[a], part, part_lse);
        }
        started[a] = true;
      }
    }
  }
  for (int64_t a = 0; a < n; ++a) {
    Tensor rows = out.slice(mine[a].local, mine[a].local + C);
    backend_.copy(rows, acc[a]);
    if (n == 1) {
      backend_.copy(lse, acc_lse[a]);
    } else {
      Tensor dst = lse_chunks(lse, n);
      backend_.copy_heads(dst, a, acc_lse[a].reshape({H, 1, C}), 0, 1, false);
    }
  }
}

void RingAttention::backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& out,
                             const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Documents& docs, double scale) {
  const int64_t S_row = check_rows(q, docs), H = q.dim(1), d = q.dim(2), S_r = k.dim(0), Hkv = k.dim(1);
  const std::vector<Chunk> mine = chunks(S_row, r_);
  const int64_t n = static_cast<int64_t>(mine.size()), C = mine[0].length;
  const DType acc_t = backend_.accumulator_dtype(q.dtype());

  // K/V blocks as in forward, and the dK/dV accumulator travelling with each block.
  Tensor kv[2], dkv[2];
  {
    MemTagScope tag(backend_.pools(), MemTag::Communication);
    kv[0] = backend_.empty({2, S_r, Hkv, d}, k.dtype());
    dkv[0] = backend_.empty({2, S_r, Hkv, d}, acc_t);
    if (R_ > 1) {
      kv[1] = backend_.empty(kv[0].shape(), k.dtype());
      dkv[1] = backend_.empty(dkv[0].shape(), acc_t);
    }
  }
  Tensor k0 = half(kv[0], 0), v0 = half(kv[0], 1);
  backend_.copy(k0, k);
  backend_.copy(v0, v);
  backend_.zero(dkv[0]);

  Tensor dq_acc = backend_.empty({S_r, H, d}, acc_t);
  backend_.zero(dq_acc);
  // Each query chunk's lse as its own [H, C] tensor (a view when there is one chunk).
  std::vector<Tensor> lse_of(n);
  for (int64_t a = 0; a < n; ++a) {
    if (n == 1) {
      lse_of[a] = lse;
      continue;
    }
    lse_of[a] = backend_.empty({H, C}, lse.dtype());
    Tensor dst = lse_of[a].reshape({H, 1, C});
    backend_.copy_heads(dst, 0, lse_chunks(lse, n), a, 1, false);
  }
  Tensor dq_part = backend_.empty({C, H, d}, q.dtype());
  Tensor dk_part = backend_.empty({C, Hkv, d}, q.dtype());
  Tensor dv_part = backend_.empty({C, Hkv, d}, q.dtype());

  // In flight: the next K/V block, and the dK/dV accumulator that arrives with this one.
  CommHandle next, grads;
  for (int64_t t = 0; t < R_; ++t) {
    const int64_t src = (r_ - t + R_) % R_;
    Tensor& cur = kv[t % 2];
    Tensor& dcur = dkv[t % 2];
    finish(next);
    if (t + 1 < R_) next = pass_on(cur, kv[(t + 1) % 2], kBlockTag);
    const Tensor kc = half(cur, 0), vc = half(cur, 1);
    Tensor dkc = half(dcur, 0), dvc = half(dcur, 1);
    for (int64_t a = 0; a < n; ++a) {
      const Chunk& qa = mine[a];
      const Tensor qs = q.slice(qa.local, qa.local + C), os = out.slice(qa.local, qa.local + C),
                   dos = dout.slice(qa.local, qa.local + C);
      for (const Chunk& kb : chunks(S_row, src)) {
        if (kb.global > qa.global + qa.length - 1) continue;
        const Tensor ks = kc.slice(kb.local, kb.local + C), vs = vc.slice(kb.local, kb.local + C);
        backend_.attention_backward_block(dq_part, dk_part, dv_part, dos, os, lse_of[a], qs, ks, vs, docs,
                                          qa.global, kb.global, scale);
        Tensor dq_rows = dq_acc.slice(qa.local, qa.local + C);
        Tensor dk_rows = dkc.slice(kb.local, kb.local + C), dv_rows = dvc.slice(kb.local, kb.local + C);
        backend_.axpy(dq_rows, dq_part, 1.0);
        finish(grads);  // the accumulator must have arrived before the first add into it
        backend_.axpy(dk_rows, dk_part, 1.0);
        backend_.axpy(dv_rows, dv_part, 1.0);
      }
    }
    // This block's accumulator moves on with it; after R moves each is home.
    finish(grads);
    if (R_ > 1) grads = pass_on(dcur, dkv[(t + 1) % 2], kGradTag);
  }
  finish(grads);
  Tensor& home = dkv[R_ > 1 ? R_ % 2 : 0];
  backend_.copy(dq, dq_acc);
  backend_.copy(dk, half(home, 0));
  backend_.copy(dv, half(home, 1));
}

}  // namespace ulysses
