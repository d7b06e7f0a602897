#include "backend/planning_backend.h"

#include <algorithm>
#include <vector>

#include "backend/cuda_attention_workspace.h"
#include "core/step_work.h"

namespace ulysses {
namespace {

class PlanningBackend final : public Backend {
 public:
  PlanningBackend(DType act, Device device, Backend* runtime, WorkLedger* work)
      : act_(act), device_(device), runtime_(runtime), work_(work) {
    set_pools(std::make_unique<MemoryPools>(host_allocator(), host_allocator(), /*planning=*/true));
    // What the CUDA backend itself takes from its pools: a one-double result slot
    // from construction on, and the attention backward's workspace during each call (below).
    if (device_ == Device::CUDA) scalar_ = empty({1}, DType::F64);
  }
  Device device() const override { return device_; }
  std::string name() const override { return "plan"; }
  DType act_dtype() const override { return act_; }
  Allocator& allocator() override { return host_allocator(); }  // never used: the pools only count
  // Its tensors are placeholders counted in host pools, whatever the device planned for:
  // the entries check shapes and dtypes (by the planned device's rules), not where tensors are.
  bool holds(const Tensor&) const override { return true; }

  // The profile's families name the allocations of an itemised peak (MemoryPools::capture_at_device_bytes).
  void profile_push(const char* family, bool absorb_nested) override {
    families_.push_back(family);
    pools().set_family(family);
    if (work_) work_->open(family, absorb_nested);
  }
  void profile_pop() override {
    if (work_) work_->close();
    if (!families_.empty()) families_.pop_back();
    pools().set_family(families_.empty() ? nullptr : families_.back());
  }

  void synchronize() override {}
  // The transfer stream's copies (offloaded checkpoints): host <-> device bytes.
  uint64_t copy_async(Tensor& dst, const Tensor& src) override {
    WorkLedger* work = work_;
    work_ = nullptr;  // checked as the copy it is, counted once, as a transfer
    copy(dst, src);
    work_ = work;
    if (work_) work_->add_transfer(static_cast<double>(src.nbytes()));
    return 0;
  }
  size_t attention_workspace_bytes(const AttentionShape& s, bool backward) override {
    if (runtime_) return runtime_->attention_workspace_bytes(s, backward);
    if (device_ != Device::CUDA || !backward) return 0;
    return act_ == DType::F32 ? cuda_attention_f32_backward_workspace_bytes(s.S, s.H)
                              : cuda_attention_backward_workspace_bytes(s.S, s.H, s.d);
  }
  // The block form runs our own kernels on CUDA (cuDNN takes no offsets).
  size_t attention_block_workspace_bytes(const AttentionShape& s, bool backward) override {
    if (runtime_) return runtime_->attention_block_workspace_bytes(s, backward);
    if (device_ != Device::CUDA || !backward) return 0;
    return act_ == DType::F32 ? cuda_attention_f32_backward_workspace_bytes(s.S, s.H)
                              : cuda_attention_backward_workspace_bytes(s.S, s.H, s.d);
  }

 protected:
  // Every op the planner does not model below only writes tensors it was given: nothing to count.
  void missing_op(const char*) override {}
  void attention_forward_impl(Tensor&, Tensor&, const Tensor& q, const Tensor& k, const Tensor&, const Documents& docs,
                              double) override {
    take_workspace(q, k, docs, false);
    count_attention(q, k, docs, 0, 0, false);
  }
  void attention_backward_impl(Tensor&, Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor& q,
                               const Tensor& k, const Tensor&, const Documents& docs, double) override {
    take_workspace(q, k, docs, true);
    count_attention(q, k, docs, 0, 0, true);
  }
  void attention_forward_block_impl(Tensor&, Tensor&, const Tensor& q, const Tensor& k, const Tensor&,
                                    const Documents& docs, int64_t q0, int64_t k0, double) override {
    take_workspace(q, k, docs, false, true);
    count_attention(q, k, docs, q0, k0, false);
  }
  void attention_backward_block_impl(Tensor&, Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                     const Tensor& q, const Tensor& k, const Tensor&, const Documents& docs, int64_t q0,
                                     int64_t k0, double) override {
    take_workspace(q, k, docs, true, true);
    count_attention(q, k, docs, q0, k0, true);
  }
  // GEMMs: 2·M·N·K. matmul_add's default is a copy and a matmul, each counted here.
  void matmul_impl(Tensor& C, const Tensor& A, const Tensor&, bool trans_a, bool, double, double) override {
    if (work_) work_->add_gemm(2.0 * double(C.dim(0)) * double(C.dim(1)) * double(trans_a ? A.dim(0) : A.dim(1)));
  }
  // The memory-bound ops: the bytes of every tensor they are given, read or written once.
  void zero_impl(Tensor& t) override { touch(t); }
  void copy_impl(Tensor& d, const Tensor& s) override { touch(d, s); }
  void embedding_forward_impl(Tensor& o, const Tensor& ids, const Tensor&) override { touch(o, ids, o); }
  void embedding_backward_impl(Tensor&, const Tensor& dout, const Tensor& ids) override { touch(dout, ids, dout); }
  void rmsnorm_forward_impl(Tensor& y, Tensor& r, const Tensor& x, const Tensor& w, double) override {
    touch(y, r, x, w);
  }
  void rmsnorm_backward_impl(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w,
                             const Tensor& r, bool) override {
    touch(dx, dw, dy, x, w, r);
  }
  void rope_forward_impl(Tensor& o, const Tensor& x, const Tensor&, const Tensor&) override { touch(o, x); }
  void rope_backward_impl(Tensor& dx, const Tensor& d, const Tensor&, const Tensor&) override { touch(dx, d); }
  void attention_merge_impl(Tensor& a, Tensor& al, const Tensor& o, const Tensor& l) override { touch(a, al, o, l); }
  void gated_activation_forward_impl(Tensor& h, const Tensor& g, const Tensor& u, Activation) override {
    touch(h, g, u);
  }
  void gated_activation_backward_impl(Tensor& dg, Tensor& du, const Tensor& dh, const Tensor& g, const Tensor& u,
                                      Activation) override {
    touch(dg, du, dh, g, u);
  }
  void cross_entropy_forward_backward_impl(Tensor& d, Tensor& l, const Tensor& x, const Tensor& t, double) override {
    touch(d, l, x, t);
  }
  void bias_add_impl(Tensor& y, const Tensor& b) override { touch(y, y, b); }
  void bias_backward_impl(Tensor& db, const Tensor& dy) override { touch(db, dy); }
  void add_impl(Tensor& y, const Tensor& a, const Tensor& b) override { touch(y, a, b); }
  void axpy_impl(Tensor& y, const Tensor& x, double) override { touch(y, y, x); }
  void adamw_step_impl(Tensor& m, Tensor& a, Tensor& b, Tensor& w, const Tensor& g, const AdamWParams&) override {
    touch(m, a, b, m, a, b, w, g);  // master and moments read and written
  }
  void copy_heads_impl(Tensor& d, int64_t, const Tensor& s, int64_t, int64_t n, bool acc) override {
    if (!work_) return;
    // n heads of each of the N rows move: read (and with accumulate also read dst) and written.
    const double moved = double(s.dim(0)) * double(n) * double(s.dim(2)) * double(dtype_size(s.dtype()));
    work_->add_bytes(moved * (acc ? 3.0 : 2.0));
    (void)d;
  }

 private:
  template <typename... T>
  void touch(const T&... t) {
    if (work_) work_->add_bytes((0.0 + ... + static_cast<double>(t.defined() ? t.nbytes() : 0)));
  }
  // Causal attention over the row's documents, taken as equal documents of `longest` tokens
  // (as the planner packs them); the block form sees keys k0.. from queries q0.. only.
  // Forward 4·d FLOPs per visible (query, key) pair and query head; backward 2.5× that (DESIGN §5).
  void count_attention(const Tensor& q, const Tensor& k, const Documents& docs, int64_t q0, int64_t k0, bool backward) {
    if (!work_) return;
    const int64_t L = std::max<int64_t>(1, docs.longest > 0 ? docs.longest : q0 + q.dim(0));
    double pairs = 0;
    const int64_t qa = q0, qb = q0 + q.dim(0), ka = k0, kb = k0 + k.dim(0);
    for (int64_t doc = qa / L; doc * L < qb; ++doc)
      pairs += causal_pairs(std::max(qa, doc * L), std::min(qb, (doc + 1) * L), std::max(ka, doc * L),
                            std::min(kb, (doc + 1) * L));
    const double f = 4.0 * double(q.dim(2)) * double(q.dim(1)) * pairs;
    work_->add_attention(backward ? 2.5 * f : f);
  }
  // Pairs (i, j) with i in [qa, qb), j in [ka, kb), j <= i.
  static double causal_pairs(int64_t qa, int64_t qb, int64_t ka, int64_t kb) {
    if (qb <= qa || kb <= ka) return 0;
    double n = 0;
    // Rows i in [ka, min(qb, kb)): i - ka + 1 keys; rows i >= kb: all kb - ka keys.
    const int64_t r0 = std::max(qa, ka), r1 = std::min(qb, kb);
    if (r1 > r0) n += (double(r0 - ka + 1) + double(r1 - ka)) * double(r1 - r0) / 2.0;
    const int64_t f0 = std::max(qa, kb);
    if (qb > f0) n += double(qb - f0) * double(kb - ka);
    return n;
  }

  // The backend takes its workspace for the call only: taken and given back here too.
  void take_workspace(const Tensor& q, const Tensor& k, const Documents& docs, bool backward, bool block = false) {
    const AttentionShape shape{q.dim(0), q.dim(1), k.dim(1), q.dim(2), docs.count, docs.longest, docs.window};
    const size_t ws =
        block ? attention_block_workspace_bytes(shape, backward) : attention_workspace_bytes(shape, backward);
    if (ws > 0) (void)empty({static_cast<int64_t>(ws)}, DType::U8);
  }

  DType act_;
  Device device_;
  Backend* runtime_;
  WorkLedger* work_;
  Tensor scalar_;
  std::vector<const char*> families_;
};

}  // namespace

std::unique_ptr<Backend> make_planning_backend(DType act_dtype, Device device, Backend* runtime, WorkLedger* work) {
  return std::make_unique<PlanningBackend>(act_dtype, device, runtime, work);
}

}  // namespace ulysses
