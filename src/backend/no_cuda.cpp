// Built when nvcc is absent: the CUDA backend reports itself unavailable.
#include "backend/backend.h"

namespace ulysses {

bool cuda_backend_compiled_in() { return false; }

int cuda_device_for_local_rank(int local_rank, bool, const std::string&) { return local_rank; }

bool cuda_device_pointer(const void* /*p*/) { return false; }

std::string cuda_device_bus_id(int /*device_index*/) { return ""; }

std::unique_ptr<Backend> make_cuda_backend(int /*device_index*/, DType /*act_dtype*/) {
  ULY_FAIL("this build has no CUDA backend (nvcc was not found when it was configured); "
           "rebuild on a machine with the CUDA toolkit, or use --backend cpu");
}

}  // namespace ulysses
