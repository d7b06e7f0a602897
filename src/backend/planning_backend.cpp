#include "backend/planning_backend.h"

#include <vector>

#include "backend/cuda_attention_workspace.h"

namespace ulysses {
namespace {

class PlanningBackend final : public Backend {
 public:
  PlanningBackend(DType act, Device device, Backend* runtime) : act_(act), device_(device), runtime_(runtime) {
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
  void profile_push(const char* family, bool) override {
    families_.push_back(family);
    pools().set_family(family);
  }
  void profile_pop() override {
    if (!families_.empty()) families_.pop_back();
    pools().set_family(families_.empty() ? nullptr : families_.back());
  }

  void synchronize() override {}
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
  }
  void attention_backward_impl(Tensor&, Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor& q,
                               const Tensor& k, const Tensor&, const Documents& docs, double) override {
    take_workspace(q, k, docs, true);
  }
  void attention_forward_block_impl(Tensor&, Tensor&, const Tensor& q, const Tensor& k, const Tensor&,
                                    const Documents& docs, int64_t, int64_t, double) override {
    take_workspace(q, k, docs, false, true);
  }
  void attention_backward_block_impl(Tensor&, Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                     const Tensor& q, const Tensor& k, const Tensor&, const Documents& docs, int64_t,
                                     int64_t, double) override {
    take_workspace(q, k, docs, true, true);
  }

 private:
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
  Tensor scalar_;
  std::vector<const char*> families_;
};

}  // namespace

std::unique_ptr<Backend> make_planning_backend(DType act_dtype, Device device, Backend* runtime) {
  return std::make_unique<PlanningBackend>(act_dtype, device, runtime);
}

}  // namespace ulysses
