#include "parallel/ulysses_attention.h"

#include <cmath>

#include "backend/profile_scope.h"
#include "parallel/collectives.h"

namespace ulysses {

UlyssesAttention::UlyssesAttention(Backend& backend, Communicator& sp_group, int64_t H, int64_t Hkv, int64_t d,
                                   double scale, std::unique_ptr<AttentionKernel> kernel)
    : backend_(backend), comm_(sp_group), H_(H), Hkv_(Hkv), d_(d), P_(sp_group.size()), scale_(scale),
      kernel_(kernel ? std::move(kernel) : std::make_unique<LocalAttentionKernel>(backend)) {
  check_ulysses_degree(H, Hkv, P_, P_);
  heads_per_rank_ = H / P_;
  kv_per_rank_ = Hkv >= P_ ? Hkv / P_ : 1;
}

int64_t UlyssesAttention::head0(int64_t rank, bool kv) const {
  if (!kv) return rank * heads_per_rank_;
  // Replicated: rank j's query heads all map to kv head j / (P / Hkv).
  return Hkv_ >= P_ ? rank * kv_per_rank_ : rank / (P_ / Hkv_);
}

Tensor UlyssesAttention::scatter_heads(const Tensor& local, int64_t n, bool kv) {
  const int64_t S_l = local.dim(0);
  Tensor recv = backend_.empty({P_ * S_l, n, d_}, local.dtype());
  MemTagScope tag(backend_.pools(), MemTag::Communication);
  Tensor send = backend_.empty({P_ * S_l, n, d_}, local.dtype());
  for (int64_t j = 0; j < P_; ++j) {
    Tensor block = send.slice(j * S_l, (j + 1) * S_l);
    backend_.copy_heads(block, 0, local, head0(j, kv), n, false);
  }
  ProfileScope prof(backend_, "all-to-all");
  all_to_all(comm_, backend_, send, recv);
  return recv;
}

void UlyssesAttention::gather_heads(Tensor& local, const Tensor& gathered, int64_t n, bool kv) {
  const int64_t S_l = local.dim(0);
  MemTagScope tag(backend_.pools(), MemTag::Communication);
  Tensor recv = backend_.empty(gathered.shape(), gathered.dtype());
  ProfileScope prof(backend_, "all-to-all");
  all_to_all(comm_, backend_, gathered, recv);
  prof.end();
  const bool replicated = kv && Hkv_ < P_;
  if (replicated) backend_.zero(local);
  for (int64_t j = 0; j < P_; ++j) {
    Tensor block = recv.slice(j * S_l, (j + 1) * S_l);
    backend_.copy_heads(local, head0(j, kv), block, 0, n, replicated);
  }
}

void UlyssesAttention::forward(Tensor& out, AttentionSaved& saved, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Documents& docs) {
  const int64_t S = q.dim(0) * P_;
  ULY_CHECK(docs.tokens() == S * kernel_->ranks(),
            "ulysses attention: the documents cover " << docs.tokens() << " tokens, expected " << S * kernel_->ranks());
  saved.q = scatter_heads(q, heads_per_rank_, false);
  saved.k = scatter_heads(k, kv_per_rank_, true);
  saved.v = scatter_heads(v, kv_per_rank_, true);
  saved.out = backend_.empty({S, heads_per_rank_, d_}, q.dtype());
  saved.lse = backend_.empty({heads_per_rank_, S}, DType::F32);
  kernel_->forward(saved.out, saved.lse, saved.q, saved.k, saved.v, docs, scale_);
  gather_heads(out, saved.out, heads_per_rank_, false);
}

void UlyssesAttention::restore(Tensor& out, AttentionSaved& saved, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Documents& docs, const Tensor& kept_out, const Tensor& kept_lse) {
  ULY_CHECK(docs.tokens() == q.dim(0) * P_ * kernel_->ranks(),
            "ulysses attention: the documents cover " << docs.tokens() << " tokens, expected "
                                                      << q.dim(0) * P_ * kernel_->ranks());
  saved.q = scatter_heads(q, heads_per_rank_, false);
  saved.k = scatter_heads(k, kv_per_rank_, true);
  saved.v = scatter_heads(v, kv_per_rank_, true);
  saved.out = kept_out;
  saved.lse = kept_lse;
  gather_heads(out, saved.out, heads_per_rank_, false);
}

void UlyssesAttention::prepare_backward(AttentionSaved& saved, const Tensor& q, const Tensor& k, const Tensor& v,
                                        const Tensor& out_local) {
  saved.q = scatter_heads(q, heads_per_rank_, false);
  saved.k = scatter_heads(k, kv_per_rank_, true);
  saved.v = scatter_heads(v, kv_per_rank_, true);
  if (!saved.out.defined()) saved.out = scatter_heads(out_local, heads_per_rank_, false);
}

void UlyssesAttention::backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const AttentionSaved& s,
                                const Documents& docs) {
  const int64_t S = dout.dim(0) * P_;
  Tensor dout_full = scatter_heads(dout, heads_per_rank_, false);
  Tensor dq_full = backend_.empty({S, heads_per_rank_, d_}, dout.dtype());
  Tensor dk_full = backend_.empty({S, kv_per_rank_, d_}, dout.dtype());
  Tensor dv_full = backend_.empty({S, kv_per_rank_, d_}, dout.dtype());
  kernel_->backward(dq_full, dk_full, dv_full, dout_full, s.out, s.lse, s.q, s.k, s.v, docs,
                    scale_);
  gather_heads(dq, dq_full, heads_per_rank_, false);
  gather_heads(dk, dk_full, kv_per_rank_, true);
  gather_heads(dv, dv_full, kv_per_rank_, true);
}

}  // namespace ulysses
