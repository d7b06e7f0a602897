// The CUDA backend: bf16 activations and weights, fp32 math, one owned compute
// stream, cuBLASLt GEMMs. Backend's entries check the ops' shapes and dtypes
// (backend/op_checks.cpp); the *_impl here dispatch to the kernels in this
// folder. The model sees only Backend; the extras below (optimizer, clipping)
// are for CUDA-aware code and tests.
#pragma once
#include <cuda_runtime_api.h>

#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cudnn_attention.h"
#include "backend/cuda/gemm.h"
#include "core/arena_allocator.h"
#include "core/caching_allocator.h"

namespace ulysses::cuda {

class CudaBackend : public Backend {
 public:
  // Throws when no GPU is visible, the index is out of range, or the GPU is not sm_90.
  // act_dtype: BF16 (bf16 storage, fp32 math) or F32 (fp32 throughout, no TF32).
  explicit CudaBackend(int device_index, DType act_dtype = DType::BF16);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  Device device() const override { return Device::CUDA; }
  std::string name() const override { return "cuda:" + std::to_string(device_index_); }
  DType act_dtype() const override { return act_dtype_; }
  Allocator& allocator() override;
  Allocator& offload_allocator() override;
  Allocator& staging_allocator() override { return *staging_; }
  void* native_stream() override { return stream_; }
  // Free device memory now (cudaMemGetInfo).
  size_t device_memory_available() override;

  void reserve_memory(size_t device_bytes, size_t host_bytes) override;
  std::string memory_reservation_report() override;
  uint64_t copy_async(Tensor& dst, const Tensor& src) override;
  void wait_transfer(uint64_t id) override;

  void synchronize() override;
  void synchronize_polling(const std::function<void()>& poll) override;

  // Profile marks are events on the compute stream (and NVTX ranges for Nsight
  // Systems); their times are read only in profile_flush().
  void enable_profiling(StepProfile* profile) override;
  void profile_push(const char* family, bool absorb_nested) override;
  void profile_pop() override;
  void profile_flush() override;

  size_t attention_workspace_bytes(const AttentionShape& shape, bool backward) override;
  size_t attention_block_workspace_bytes(const AttentionShape& shape, bool backward) override;

  // ---- CUDA-only extras ----
  cudaStream_t stream() const { return stream_; }
  int device_index() const override { return device_index_; }
  CublasLtGemm& gemm() { return *gemm_; }
  // x *= alpha in place (float32/bfloat16 device tensor).
  void scale(Tensor& x, double alpha);

 protected:
  void zero_impl(Tensor& t) override;
  // Stream-ordered; returns when a host destination holds the data and a host source may be reused.
  void copy_impl(Tensor& dst, const Tensor& src) override;
  // Host ids/targets are checked against the vocabulary and uploaded; device ones were
  // validated when the batch was made and are not read back.
  void embedding_forward_impl(Tensor& out, const Tensor& ids, const Tensor& table) override;
  void embedding_backward_impl(Tensor& dtable, const Tensor& dout, const Tensor& ids) override;
  void rmsnorm_forward_impl(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w, double eps) override;
  void rmsnorm_backward_impl(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w,
                             const Tensor& rstd, bool accumulate_dx) override;
  void rope_forward_impl(Tensor& out, const Tensor& x, const Tensor& pos, const Tensor& inv_freq) override;
  void rope_backward_impl(Tensor& dx, const Tensor& dout, const Tensor& pos, const Tensor& inv_freq) override;
  // bf16: cuDNN's fused attention where it takes the problem, our kernels otherwise (the
  // choice is logged once per reason; ULYSSES_ATTENTION=own|cudnn|auto forces it; =hopper runs the
  // forward on our sm_90a wgmma kernel where it takes the problem, everything else as auto (its
  // variant from ULYSSES_HOPPER_VARIANT, checked at construction), and with ULYSSES_HOPPER_BWD=2 to 7 or 9
  // the backward on that variant of our sm_90a backward kernel where it takes it); f32: ours.
  void attention_forward_impl(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Documents& docs, double scale) override;
  void attention_backward_impl(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& out,
                               const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Documents& docs, double scale) override;
  // The block-offset form (ring attention) always runs our kernels: cuDNN's SDPA takes no offsets.
  void attention_forward_block_impl(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Documents& docs, int64_t q0, int64_t k0, double scale) override;
  void attention_backward_block_impl(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& out,
                                     const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Documents& docs, int64_t q0, int64_t k0, double scale) override;
  void attention_merge_impl(Tensor& acc, Tensor& acc_lse, const Tensor& out, const Tensor& lse) override;
  void gated_activation_forward_impl(Tensor& h, const Tensor& gate, const Tensor& up, Activation act) override;
  void gated_activation_backward_impl(Tensor& dgate, Tensor& dup, const Tensor& dh, const Tensor& gate,
                                      const Tensor& up, Activation act) override;
  void cross_entropy_forward_backward_impl(Tensor& dlogits, Tensor& losses, const Tensor& logits,
                                           const Tensor& targets, double grad_scale) override;
  // C must not overlap A or B (cuBLASLt).
  void matmul_add_impl(Tensor& D, const Tensor& A, const Tensor& B, bool trans_a, bool trans_b,
                       const Tensor& R) override;
  void matmul_impl(Tensor& C, const Tensor& A, const Tensor& B, bool trans_a, bool trans_b, double alpha,
                   double beta) override;
  void bias_add_impl(Tensor& y, const Tensor& b) override;
  void bias_backward_impl(Tensor& db, const Tensor& dy) override;
  void add_impl(Tensor& y, const Tensor& a, const Tensor& b) override;
  void axpy_impl(Tensor& y, const Tensor& x, double alpha) override;
  void init_uniform_impl(Tensor& x, uint64_t seed, uint64_t stream, int64_t first, float bound) override;
  // x: host (a float dtype, or int32/int64 for sum) or device (float32, bfloat16; int32 for
  // sum); float64 accumulation.
  double sum_impl(const Tensor& x) override;
  double sum_squares_impl(const Tensor& x) override;
  // All the tensors' sums of squares accumulated on the device, one read-back.
  double sum_squares_all_impl(const std::vector<const Tensor*>& xs) override;
  void adamw_step_impl(Tensor& master, Tensor& m, Tensor& v, Tensor& weight, const Tensor& grad,
                       const AdamWParams& p) override;
  void copy_heads_impl(Tensor& dst, int64_t dst_head0, const Tensor& src, int64_t src_head0, int64_t n_heads,
                       bool accumulate) override;

 private:
  // A device tensor with t's values: t itself when already on the device.
  Tensor to_device(const Tensor& t);
  // Checks the values of an int32 tensor on the host (ids or targets) against [0, V) (and -100
  // when allow_ignored); device tensors were validated when the batch was made and are not read back.
  static void check_host_ids(const Tensor& ids, int64_t V, bool allow_ignored, const char* op, const char* what);
  double read_back_scalar();  // reads scalar_ and synchronises

  cudaEvent_t take_event();
  void profile_mark(const char* family, bool absorb_nested);  // family nullptr: a close
  void drop_profile_marks();
  Tensor attention_workspace(size_t bytes);
  // Whether cuDNN runs this bf16 attention call (logs the choice once per reason).
  bool use_cudnn(const AttentionShape& shape, bool backward);
  // The Hopper forward (hopper_attention.h) runs this bf16 problem: ULYSSES_ATTENTION=hopper, or =auto
  // where backend/attention_choice.h's measured table has it ahead of the alternative (cuDNN; with a
  // sliding window our FA2 kernels); and it takes the problem. *variant gets the variant to run.
  bool use_hopper_forward(const AttentionShape& shape, int* variant = nullptr);
  // The same for the Hopper backward (=hopper with ULYSSES_HOPPER_BWD=2..7 or 9, or the table under
  // =auto); *variant gets the variant to run. It then uses our kernels' workspace
  // (attention_backward_workspace_bytes).
  bool use_hopper_backward(const AttentionShape& shape, int* variant = nullptr);
  AttentionProblem cudnn_problem(const AttentionShape& shape, double scale) const;

  int device_index_;
  DType act_dtype_;
  // The pools' memory: pass-through until reserve_memory(), then one block each.
  std::unique_ptr<ArenaAllocator> device_arena_, host_arena_;
  std::unique_ptr<CachingAllocator> staging_;  // pinned host blocks for staged collectives
  cudaStream_t stream_ = nullptr;
  cudaStream_t transfer_stream_ = nullptr;  // checkpoint offload copies
  std::vector<cudaEvent_t> spare_events_;
  std::unordered_map<uint64_t, cudaEvent_t> transfers_;  // id -> recorded when the copy is done
  uint64_t next_transfer_ = 1;
  std::unique_ptr<CublasLtGemm> gemm_;
  Tensor scalar_;     // one float64 on the device, for reductions
  enum class AttentionKernels { Auto, Cudnn, Own, Hopper } attention_kernels_ = AttentionKernels::Auto;
  // ULYSSES_HOPPER_BWD=2 to 7 or 9: with =hopper, the backward too, on that variant of the Hopper backward
  // (0: off).
  int hopper_backward_ = 0;
  bool hopper_deterministic_ = false;  // ULYSSES_HOPPER_DETERMINISTIC=1 (with ULYSSES_HOPPER_BWD=3)
  int hopper_forward_ = 3;  // with =hopper: ULYSSES_HOPPER_VARIANT (default 3), read when the backend is made
  std::unique_ptr<CudnnAttention> cudnn_;  // made on the first bf16 attention call
  std::set<std::string> attention_choices_logged_;

  struct ProfileMark {
    cudaEvent_t event;  // recorded on the compute stream, with timing
    const char* family;
    bool absorb_nested;
  };
  StepProfile* profile_ = nullptr;
  std::vector<ProfileMark> profile_marks_;     // recorded, not yet fed to profile_
  cudaEvent_t profile_last_ = nullptr;         // the last mark fed: where the next interval starts
  double profile_clock_ = 0;                   // seconds of stream time fed so far
  std::vector<cudaEvent_t> spare_timing_events_;
};

}  // namespace ulysses::cuda
