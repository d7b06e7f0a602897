// Row-major GEMM through cuBLASLt: C[M, N] = alpha op(A) op(B) + beta C, fp32
// compute. One object owns the cuBLASLt handle, a workspace, and a cache of
// plans (descriptors + an algorithm) per shape/transpose/dtype/pointer alignment,
// so the heuristic runs once per distinct call. With tuning (the default), a plan's
// first call also times the heuristic's first few candidates on that call's own
// operands and keeps the fastest when it beats the first by more than the timing's
// noise: the heuristic's first choice ran up to 15% slower than another candidate
// on some of a Llama step's shapes (bench/device/gemm_bench.cu, docs/benchmarks.md).
// The choices are kept across runs in backend/gemm_tuning_cache.h's file, so that only
// the first run on a GPU pays the timing.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "backend/gemm_tuning_cache.h"
#include "core/allocator.h"
#include "core/dtype.h"

namespace ulysses::cuda {

class CublasLtGemm {
 public:
  // The workspace (default 32 MiB) comes from `alloc` (a device allocator) and is held for the object's life.
  // tune: time the candidates on a plan's first call (see above); the environment's ULYSSES_GEMM_TUNING=0
  // turns it off for every object.
  explicit CublasLtGemm(Allocator& alloc, size_t workspace_bytes = size_t{32} << 20, bool tune = true);
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  // A: [M, K] row-major, or [K, M] when trans_a; B: [K, N], or [N, K] when trans_b; C: [M, N] (read when beta != 0).
  // ab_type: F32 or BF16 (A and B alike); c_type: F32, or BF16 when ab_type is BF16. fp32 inputs use full fp32
  // math (no TF32). C may not overlap A or B. Device pointers; enqueued on `stream`.
  // C_in: where beta's C is read from when it is not the output C ([M, N], c_type; may be C itself); null: C.
  void matmul(void* C, DType c_type, const void* A, const void* B, DType ab_type, int64_t M, int64_t N, int64_t K,
              bool trans_a, bool trans_b, double alpha, double beta, cudaStream_t stream, const void* C_in = nullptr);

  size_t cached_plans() const;
  size_t workspace_bytes() const { return workspace_bytes_; }
  // Plans whose first call chose another candidate than the heuristic's first (for tests and logs).
  size_t retuned_plans() const;
  // Plans whose choice came from the tuning cache instead of timing (for tests and logs).
  size_t cached_choices() const;

 private:
  struct Plan;
  using Key = std::tuple<int64_t, int64_t, int64_t, bool, bool, DType, DType, uint32_t, uint32_t, uint32_t>;
  Plan& plan_for(const Key& key);
  // Times the plan's candidates on this call's operands (output to C when the call overwrites it or
  // reads its C from C_in, else to a temporary buffer) and keeps the fastest.
  void tune(Plan& plan, const Key& key, void* C, const void* C_in, const void* A, const void* B, float alpha,
            float beta, cudaStream_t stream);

  Allocator& alloc_;
  bool tune_;
  std::unique_ptr<GemmTuningCache> cache_;  // null without tuning
  void* handle_ = nullptr;                  // cublasLtHandle_t
  void* workspace_ = nullptr;
  size_t workspace_bytes_;
  mutable std::mutex mu_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace ulysses::cuda
