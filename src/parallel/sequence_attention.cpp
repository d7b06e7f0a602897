#include "parallel/sequence_attention.h"

#include <cmath>
#include <sstream>

#include "parallel/ring_attention.h"
#include "parallel/ulysses_attention.h"

namespace ulysses {
namespace {

// The rank's rows as they are: the whole sequence (kernel: the backend's attention),
// or one ring rank's share of it (kernel: ring attention).
class LocalAttention : public SequenceAttention {
 public:
  LocalAttention(Backend& backend, double scale, std::unique_ptr<AttentionKernel> kernel)
      : backend_(backend), scale_(scale), kernel_(std::move(kernel)) {}

  void forward(Tensor& out, AttentionSaved& saved, const Tensor& q, const Tensor& k, const Tensor& v,
               const Documents& docs) override {
    const int64_t S = q.dim(0), H = q.dim(1);
    saved.q = q;
    saved.k = k;
    saved.v = v;
    saved.out = out;
    saved.lse = backend_.empty({H, S}, DType::F32);
    kernel_->forward(out, saved.lse, q, k, v, docs, scale_);
  }

  void backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const AttentionSaved& s,
                const Documents& docs) override {
    kernel_->backward(dq, dk, dv, dout, s.out, s.lse, s.q, s.k, s.v, docs, scale_);
  }

  void restore(Tensor& out, AttentionSaved& saved, const Tensor& q, const Tensor& k, const Tensor& v,
               const Documents&, const Tensor& kept_out, const Tensor& kept_lse) override {
    saved.q = q;
    saved.k = k;
    saved.v = v;
    backend_.copy(out, kept_out);
    saved.out = out;
    saved.lse = kept_lse;
  }

  void prepare_backward(AttentionSaved& saved, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& out_local) override {
    saved.q = q;
    saved.k = k;
    saved.v = v;
    if (!saved.out.defined()) saved.out = out_local;
  }

 private:
  Backend& backend_;
  double scale_;
  std::unique_ptr<AttentionKernel> kernel_;
};

std::string valid_degrees(int64_t H, int64_t Hkv) {
  std::ostringstream os;
  bool first = true;
  for (int64_t p = 1; p <= H; ++p) {
    if (H % p != 0) continue;
    if (Hkv % p != 0 && p % Hkv != 0) continue;
    os << (first ? "" : ", ") << p;
    first = false;
  }
  return os.str();
}

}  // namespace

void check_ulysses_degree(int64_t H, int64_t Hkv, int64_t P, int64_t S_global) {
  ULY_CHECK(P >= 1, "sequence-parallel degree must be >= 1, got " << P);
  ULY_CHECK(H % P == 0, "sequence-parallel degree " << P << " does not divide num_attention_heads " << H
                                                    << " (Ulysses gives each rank H/P heads); valid degrees: "
                                                    << valid_degrees(H, Hkv));
  ULY_CHECK(Hkv % P == 0 || P % Hkv == 0,
            "sequence-parallel degree " << P << " and num_key_value_heads " << Hkv
                                        << " do not fit: kv heads must split evenly (Hkv % P == 0) or be replicated "
                                           "evenly (P % Hkv == 0); valid degrees: "
                                        << valid_degrees(H, Hkv));
  ULY_CHECK(S_global >= P, "sequence of " << S_global << " tokens cannot be split over " << P
                                          << " sequence-parallel ranks (each rank needs at least one token)");
}

void check_head_chunks(int64_t H, int64_t Hkv, int64_t P, int64_t chunks) {
  ULY_CHECK(chunks >= 1, "--head-chunks must be >= 1, got " << chunks);
  if (chunks == 1) return;
  ULY_CHECK(H % chunks == 0 && Hkv % chunks == 0,
            "--head-chunks " << chunks << ": a chunk must hold whole KV groups, so num_attention_heads " << H
                             << " and num_key_value_heads " << Hkv << " must both divide by it (H/N = " << H
                             << "/" << chunks << ", Hkv/N = " << Hkv << "/" << chunks << ")");
  const int64_t h = H / chunks, hkv = Hkv / chunks;
  ULY_CHECK(h % P == 0 && (hkv % P == 0 || P % hkv == 0),
            "--head-chunks " << chunks << " at sequence-parallel degree " << P << ": each chunk's " << h
                             << " query and " << hkv << " kv heads must still spread over the " << P
                             << " ranks (H/N % P == 0, and Hkv/N % P == 0 or P % (Hkv/N) == 0); use fewer chunks");
}

std::unique_ptr<SequenceAttention> make_sequence_attention(Backend& backend, Communicator& sp_group, int64_t H,
                                                           int64_t Hkv, int64_t d, double scale) {
  if (sp_group.size() == 1)
    return std::make_unique<LocalAttention>(backend, scale, std::make_unique<LocalAttentionKernel>(backend));
  return std::make_unique<UlyssesAttention>(backend, sp_group, H, Hkv, d, scale);
}

std::unique_ptr<SequenceAttention> make_sequence_attention(Backend& backend, Communicator& ulysses_group,
                                                           Communicator& ring_group, bool zigzag, int64_t H,
                                                           int64_t Hkv, int64_t d, double scale) {
  if (ring_group.size() == 1) return make_sequence_attention(backend, ulysses_group, H, Hkv, d, scale);
  auto ring = std::make_unique<RingAttention>(backend, ring_group, zigzag);
  if (ulysses_group.size() == 1) return std::make_unique<LocalAttention>(backend, scale, std::move(ring));
  return std::make_unique<UlyssesAttention>(backend, ulysses_group, H, Hkv, d, scale, std::move(ring));
}

std::unique_ptr<SequenceAttention> make_sequence_attention(Backend& backend, const ProcessMesh& mesh, int64_t H,
                                                           int64_t Hkv, int64_t d, double scale) {
  return make_sequence_attention(backend, mesh.ulysses(), mesh.ring(), mesh.zigzag(), H, Hkv, d, scale);
}

}  // namespace ulysses
