#include "backend/cuda/gemm.h"

#include <cublasLt.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/check.h"
#include "backend/cuda/elementwise.h"
#include "core/error.h"
#include "core/log.h"

namespace ulysses::cuda {
namespace {

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::F32: return CUDA_R_32F;
    case DType::BF16: return CUDA_R_16BF;
    default: ULY_FAIL("matmul: unsupported dtype " << dtype_name(t) << " (float32 or bfloat16 only)");
  }
}

// Largest power of two (capped at 256) that divides the address: the plan's
// algorithm must not assume more alignment than the operands have.
uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && (a % al) != 0) al /= 2;
  return al;
}

// The tuning cache's context: its choices hold for the same GPU, library and workspace only.
std::string tuning_context(size_t workspace_bytes) {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return std::string(prop.name) + " sm_" + std::to_string(prop.major * 10 + prop.minor) + " cublasLt " +
         std::to_string(cublasLtGetVersion()) + " workspace " + std::to_string(workspace_bytes);
}

std::string key_string(int64_t M, int64_t N, int64_t K, bool ta, bool tb, DType ab, DType c, uint32_t al_a,
                       uint32_t al_b, uint32_t al_c) {
  return std::to_string(M) + "," + std::to_string(N) + "," + std::to_string(K) + "," + (ta ? "T" : "N") +
         (tb ? "T" : "N") + "," + dtype_name(ab) + "," + dtype_name(c) + "," + std::to_string(al_a) + "/" +
         std::to_string(al_b) + "/" + std::to_string(al_c);
}

// An algorithm as hex: the cache compares it with the heuristic's candidates, so a stale
// entry (another library build) matches none and is timed again.
std::string algo_hex(const cublasLtMatmulAlgo_t& algo) {
  static const char* digits = "0123456789abcdef";
  const auto* bytes = reinterpret_cast<const unsigned char*>(&algo);
  std::string hex;
  for (size_t i = 0; i < sizeof(algo); ++i) {
    hex += digits[bytes[i] >> 4];
    hex += digits[bytes[i] & 15];
  }
  return hex;
}

}  // namespace

// Candidates timed on a plan's first call, and the margin another must win by over the heuristic's
// first (run-to-run noise of a few percent would otherwise flip choices between runs).
constexpr int kCandidates = 8;
constexpr double kTuneMargin = 0.03;
// A call whose C must survive is timed into a temporary output; above this size it is not tuned.
constexpr size_t kMaxTuneScratch = size_t{256} << 20;

struct CublasLtGemm::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  std::vector<cublasLtMatmulAlgo_t> candidates;  // the heuristic's order; algo is one of them
  bool tuned = false;
  bool retuned = false;  // tuning chose another than candidates[0]
  bool cached = false;   // the choice came from the tuning cache
  ~Plan() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

CublasLtGemm::CublasLtGemm(Allocator& alloc, size_t workspace_bytes, bool tune)
    : alloc_(alloc), tune_(tune), workspace_bytes_(workspace_bytes) {
  if (const char* e = std::getenv("ULYSSES_GEMM_TUNING")) tune_ = tune_ && std::string(e) != "0";
  ULY_CHECK(alloc.device() == Device::CUDA, "CublasLtGemm: the workspace allocator must be a device allocator");
  cublasLtHandle_t h = nullptr;
  CUBLAS_CHECK(cublasLtCreate(&h));
  handle_ = h;
  try {
    if (tune_) cache_ = std::make_unique<GemmTuningCache>(GemmTuningCache::default_path(), tuning_context(workspace_bytes_));
    workspace_ = workspace_bytes_ > 0 ? alloc_.allocate(workspace_bytes_) : nullptr;
  } catch (...) {
    cublasLtDestroy(h);
    throw;
  }
}

CublasLtGemm::~CublasLtGemm() {
  plans_.clear();
  if (workspace_ != nullptr) alloc_.deallocate(workspace_, workspace_bytes_);
  if (handle_ != nullptr) cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_));
}

size_t CublasLtGemm::cached_plans() const {
  std::lock_guard<std::mutex> lock(mu_);
  return plans_.size();
}

size_t CublasLtGemm::cached_choices() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [key, plan] : plans_) n += plan->cached ? 1 : 0;
  return n;
}

size_t CublasLtGemm::retuned_plans() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [key, plan] : plans_) n += plan->retuned ? 1 : 0;
  return n;
}

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, and a
// row-major [r, c] buffer is a column-major [c, r] one with the same leading
// dimension. So cuBLASLt's "A" is our B and its "B" is our A, each with the
// caller's transpose flag, and the output is column-major [N, M], ld = N.
CublasLtGemm::Plan& CublasLtGemm::plan_for(const Key& key) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return *it->second;
  const auto [M, N, K, trans_a, trans_b, ab_type, c_type, align_a, align_b, align_c] = key;
  auto plan = std::make_unique<Plan>();
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_first = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;   // our B
  const cublasOperation_t op_second = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;  // our A
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof(op_second)));
  // Our B buffer as column-major: [N, K] ld N (not transposed) or [K, N] ld K (transposed).
  const uint64_t b_rows = trans_b ? K : N, b_cols = trans_b ? N : K;
  // Our A buffer as column-major: [K, M] ld K (not transposed) or [M, K] ld M (transposed).
  const uint64_t a_rows = trans_a ? M : K, a_cols = trans_a ? K : M;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, cuda_type(ab_type), b_rows, b_cols, static_cast<int64_t>(b_rows)));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, cuda_type(ab_type), a_rows, a_cols, static_cast<int64_t>(a_rows)));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->c, cuda_type(c_type), N, M, N));

  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  struct PrefGuard {
    cublasLtMatmulPreference_t p;
    ~PrefGuard() { cublasLtMatmulPreferenceDestroy(p); }
  } guard{pref};
  const uint64_t ws = workspace_bytes_;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  // cuBLASLt's A is our B and vice versa.
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_b,
                                                    sizeof(align_b)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_a,
                                                    sizeof(align_a)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c,
                                                    sizeof(align_c)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c,
                                                    sizeof(align_c)));
  cublasLtMatmulHeuristicResult_t results[kCandidates] = {};
  int returned = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(handle_), plan->op, plan->a, plan->b, plan->c,
                                     plan->c, pref, tune_ ? kCandidates : 1, results, &returned);
  ULY_CHECK(st == CUBLAS_STATUS_SUCCESS && returned > 0,
            "matmul: cuBLASLt has no algorithm for M=" << M << " N=" << N << " K=" << K << " trans_a=" << trans_a
                << " trans_b=" << trans_b << " A/B " << dtype_name(ab_type) << " C " << dtype_name(c_type)
                << " alignments A/B/C " << align_a << "/" << align_b << "/" << align_c << " bytes ("
                << cublasLtGetStatusString(st) << ", " << returned << " results)");
  for (int i = 0; i < returned; ++i)
    if (results[i].state == CUBLAS_STATUS_SUCCESS) plan->candidates.push_back(results[i].algo);
  ULY_CHECK(!plan->candidates.empty(), "matmul: cuBLASLt returned no usable algorithm for M=" << M << " N=" << N
                                                                                              << " K=" << K);
  plan->algo = plan->candidates.front();
  plan->tuned = plan->candidates.size() < 2;
  if (!plan->tuned && cache_ && cache_->enabled()) {
    if (const auto hit = cache_->find(key_string(M, N, K, trans_a, trans_b, ab_type, c_type, align_a, align_b, align_c)))
      for (size_t i = 0; i < plan->candidates.size(); ++i)
        if (algo_hex(plan->candidates[i]) == *hit) {
          plan->algo = plan->candidates[i];
          plan->tuned = plan->cached = true;
          plan->retuned = i != 0;
          break;
        }
  }
  auto& ref = *plan;
  plans_.emplace(key, std::move(plan));
  return ref;
}

void CublasLtGemm::matmul(void* C, DType c_type, const void* A, const void* B, DType ab_type, int64_t M, int64_t N,
                          int64_t K, bool trans_a, bool trans_b, double alpha, double beta, cudaStream_t stream,
                          const void* C_in) {
  ULY_CHECK(M >= 0 && N >= 0 && K >= 0, "matmul: negative size M=" << M << " N=" << N << " K=" << K);
  ULY_CHECK(ab_type == DType::F32 || ab_type == DType::BF16,
            "matmul: A and B must be float32 or bfloat16, got " << dtype_name(ab_type));
  ULY_CHECK(c_type == DType::F32 || (c_type == DType::BF16 && ab_type == DType::BF16),
            "matmul: C must be float32, or bfloat16 with bfloat16 A/B; got C " << dtype_name(c_type) << " with A/B "
                                                                              << dtype_name(ab_type));
  if (M == 0 || N == 0) return;
  if (C_in == nullptr) C_in = C;
  if (K == 0 && C_in != C) {  // empty sum with a separate input: C = C_in, then beta C
    CUDA_CHECK(cudaMemcpyAsync(C, C_in, static_cast<size_t>(M * N) * dtype_size(c_type), cudaMemcpyDeviceToDevice,
                               stream));
    C_in = C;
  }
  if (K == 0) {  // empty sum: C = beta C
    if (beta == 0.0) {
      CUDA_CHECK(cudaMemsetAsync(C, 0, static_cast<size_t>(M * N) * dtype_size(c_type), stream));
    } else if (beta != 1.0) {
      if (c_type == DType::F32) scale(static_cast<float*>(C), beta, M * N, stream);
      else scale(static_cast<__nv_bfloat16*>(C), beta, M * N, stream);
    }
    return;
  }
  // cuBLASLt reads C_in through C's layout: the plan holds for the less aligned of the two.
  const Key key{M, N, K, trans_a, trans_b, ab_type, c_type, alignment_of(A), alignment_of(B),
                std::min(alignment_of(C), alignment_of(C_in))};
  std::lock_guard<std::mutex> lock(mu_);
  Plan& plan = plan_for(key);
  const float alpha_f = static_cast<float>(alpha), beta_f = static_cast<float>(beta);
  if (!plan.tuned) tune(plan, key, C, C_in, A, B, alpha_f, beta_f, stream);
  CUBLAS_CHECK(cublasLtMatmul(static_cast<cublasLtHandle_t>(handle_), plan.op, &alpha_f, B, plan.a, A, plan.b, &beta_f,
                              C_in, plan.c, C, plan.c, &plan.algo, workspace_, workspace_bytes_, stream));
}

void CublasLtGemm::tune(Plan& plan, const Key& key, void* C, const void* C_in, const void* A, const void* B,
                        float alpha, float beta, cudaStream_t stream) {
  plan.tuned = true;
  const auto [M, N, K, trans_a, trans_b, ab_type, c_type, align_a, align_b, align_c] = key;
  // The real output may take the candidates' results when the call overwrites it anyway.
  void* out = C;
  void* scratch = nullptr;
  if (beta != 0.0f && C_in == C) {
    const size_t bytes = static_cast<size_t>(M * N) * dtype_size(c_type);
    if (bytes > kMaxTuneScratch || cudaMalloc(&scratch, bytes) != cudaSuccess) {
      cudaGetLastError();
      return;  // not tuned: the heuristic's first choice
    }
    out = scratch;
  }
  cudaEvent_t t0 = nullptr, t1 = nullptr;
  CUDA_CHECK(cudaEventCreate(&t0));
  CUDA_CHECK(cudaEventCreate(&t1));
  std::vector<float> ms(plan.candidates.size(), -1.0f);
  const auto handle = static_cast<cublasLtHandle_t>(handle_);
  for (size_t i = 0; i < plan.candidates.size(); ++i) {
    const cublasLtMatmulAlgo_t* algo = &plan.candidates[i];
    auto run = [&] {
      return cublasLtMatmul(handle, plan.op, &alpha, B, plan.a, A, plan.b, &beta, C_in, plan.c, out, plan.c, algo,
                            workspace_, workspace_bytes_, stream);
    };
    if (run() != CUBLAS_STATUS_SUCCESS) continue;  // warm-up; a candidate that fails is skipped
    float best = -1.0f;
    for (int r = 0; r < 3; ++r) {
      CUDA_CHECK(cudaEventRecord(t0, stream));
      const cublasStatus_t st = run();
      CUDA_CHECK(cudaEventRecord(t1, stream));
      CUDA_CHECK(cudaEventSynchronize(t1));
      float e = 0;
      CUDA_CHECK(cudaEventElapsedTime(&e, t0, t1));
      if (st == CUBLAS_STATUS_SUCCESS && (best < 0 || e < best)) best = e;
    }
    ms[i] = best;
  }
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  if (scratch != nullptr) {
    CUDA_CHECK(cudaStreamSynchronize(stream));
    cudaFree(scratch);
  }
  size_t pick = 0;
  for (size_t i = 1; i < ms.size(); ++i)
    if (ms[i] > 0 && (ms[pick] <= 0 || ms[i] < ms[pick])) pick = i;
  if (pick != 0 && ms[0] > 0 && ms[pick] > ms[0] * (1.0 - kTuneMargin)) pick = 0;
  plan.algo = plan.candidates[pick];
  plan.retuned = pick != 0;
  if (cache_ && ms[pick] > 0)
    cache_->store(key_string(M, N, K, trans_a, trans_b, ab_type, c_type, align_a, align_b, align_c),
                  algo_hex(plan.algo));
  ULY_DEBUG("cuBLASLt M=" << M << " N=" << N << " K=" << K << " trans_a=" << trans_a << " trans_b=" << trans_b
                          << ": candidate " << pick << " of " << ms.size() << " (" << ms[pick] << " ms; first "
                          << ms[0] << " ms)");
}

}  // namespace ulysses::cuda
