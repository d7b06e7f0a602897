// NCCL communicator, bootstrapped over an existing host communicator (MPI, or TCP
// under torchrun: comm/tcp_communicator.h) by
// broadcasting an ncclUniqueId. Buffers are device pointers.
#pragma once
#include <memory>

#include "comm/communicator.h"

namespace ulysses {

// compute_stream: the cudaStream_t the ops run on (Backend::native_stream()). Each collective
// waits for the work already queued there and makes later work there wait for its result, so
// calls return once enqueued; the *_async calls return before the compute stream waits, which
// happens at the request's wait(). With nullptr, each collective waits for the whole device first
// and returns when its result is complete (slow; for tests and tools). The bootstrap must
// outlive the returned communicator (abort() goes through it to end every process).
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, int device_index,
                                                     void* compute_stream = nullptr);

}  // namespace ulysses
