// Built instead of cudnn_attention.cpp when the cuDNN frontend's headers could not
// be fetched: cuDNN takes no attention problem, so our own kernels run every call.
#include <cudnn.h>

#include "backend/cuda/cudnn_attention.h"
#include "core/error.h"

namespace ulysses::cuda {

struct CudnnAttention::Impl {};

CudnnAttention::CudnnAttention(cudaStream_t stream) : CudnnAttention(stream, Options{}) {}
CudnnAttention::CudnnAttention(cudaStream_t, Options) : impl_(std::make_unique<Impl>()) {}
CudnnAttention::~CudnnAttention() = default;

std::string CudnnAttention::runtime_version() {
  const size_t v = cudnnGetVersion();
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

bool CudnnAttention::supports(const AttentionProblem&, bool, std::string* why) {
  if (why) *why = "this build has no cuDNN frontend (scripts/fetch-cudnn-frontend.sh could not fetch it)";
  return false;
}

size_t CudnnAttention::workspace_bytes(const AttentionProblem&, bool) {
  ULY_FAIL("cuDNN attention: this build has no cuDNN frontend");
}

void CudnnAttention::forward(__nv_bfloat16*, float*, const __nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*,
                             const int32_t*, const AttentionProblem&, void*) {
  ULY_FAIL("cuDNN attention: this build has no cuDNN frontend");
}

void CudnnAttention::backward(__nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*, const __nv_bfloat16*,
                              const __nv_bfloat16*, const float*, const __nv_bfloat16*, const __nv_bfloat16*,
                              const __nv_bfloat16*, const int32_t*, const AttentionProblem&, void*) {
  ULY_FAIL("cuDNN attention: this build has no cuDNN frontend");
}

std::string CudnnAttention::form(const AttentionProblem&, bool) {
  ULY_FAIL("cuDNN attention: this build has no cuDNN frontend");
}

std::string CudnnAttention::describe(const AttentionProblem&, bool) {
  ULY_FAIL("cuDNN attention: this build has no cuDNN frontend");
}

size_t CudnnAttention::cached_graphs() const { return 0; }
size_t CudnnAttention::candidate_plans(const AttentionProblem&, bool) { return 0; }
int64_t CudnnAttention::chosen_plan(const AttentionProblem&, bool) { return -1; }

}  // namespace ulysses::cuda
