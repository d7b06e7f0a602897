#include "backend/planning_backend.h"

namespace ulysses {
namespace {

class PlanningBackend final : public Backend {
 public:
  PlanningBackend(DType act, Device device) : act_(act), device_(device) {
    set_pools(std::make_unique<MemoryPools>(host_allocator(), host_allocator(), /*planning=*/true));
  }
  Device device() const override { return device_; }
  std::string name() const override { return "plan"; }
  DType act_dtype() const override { return act_; }
  Allocator& allocator() override { return host_allocator(); }  // never used: the pools only count

  void zero(Tensor&) override {}
  void copy(Tensor&, const Tensor&) override {}
  void synchronize() override {}
  void embedding_forward(Tensor&, const Tensor&, const Tensor&) override {}
  void embedding_backward(Tensor&, const Tensor&, const Tensor&) override {}
  void rmsnorm_forward(Tensor&, Tensor&, const Tensor&, const Tensor&, double) override {}
  void rmsnorm_backward(Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) override {}
  void rope_forward(Tensor&, const Tensor&, const Tensor&, const Tensor&) override {}
  void rope_backward(Tensor&, const Tensor&, const Tensor&, const Tensor&) override {}
  void attention_forward(Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                         double) override {}
  void attention_backward(Tensor&, Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                          const Tensor&, const Tensor&, const Tensor&, double) override {}
  void swiglu_forward(Tensor&, const Tensor&, const Tensor&) override {}
  void swiglu_backward(Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&) override {}
  void cross_entropy_forward_backward(Tensor&, Tensor&, const Tensor&, const Tensor&, double) override {}
  void matmul(Tensor&, const Tensor&, const Tensor&, bool, bool, double, double) override {}
  void add(Tensor&, const Tensor&, const Tensor&) override {}
  void axpy(Tensor&, const Tensor&, double) override {}
  double sum(const Tensor&) override { return 0.0; }
  void copy_heads(Tensor&, int64_t, const Tensor&, int64_t, int64_t, bool) override {}

 private:
  DType act_;
  Device device_;
};

}  // namespace

std::unique_ptr<Backend> make_planning_backend(DType act_dtype, Device device) {
  return std::make_unique<PlanningBackend>(act_dtype, device);
}

}  // namespace ulysses
