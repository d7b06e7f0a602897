// Built when the CUDA backend is not: no NCCL communicator.
#include "comm/nccl_communicator.h"

#include "core/error.h"

namespace ulysses {

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& /*bootstrap*/, int /*device_index*/,
                                                     void* /*compute_stream*/) {
  ULY_FAIL("this build has no NCCL communicator (built without CUDA); use --comm mpi");
}

}  // namespace ulysses
