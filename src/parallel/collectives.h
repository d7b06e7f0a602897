// Collectives on tensors. A communicator that takes only host buffers (MPI
// here, which is not built CUDA-aware) gets device tensors staged through
// pinned host memory; NCCL takes them directly. Staging buffers are outside the
// memory pools (they exist only when several ranks share a GPU through MPI) and
// come from the backend's staging allocator, which keeps them for the next call.
#pragma once
#include "backend/backend.h"
#include "comm/communicator.h"

namespace ulysses {

// send, recv: same shape; block r of send goes to rank r (see Communicator::all_to_all).
void all_to_all(Communicator& comm, Backend& backend, const Tensor& send, Tensor& recv);
// send to rank dest and recv from rank source at once (every rank of a ring passing a block on).
void sendrecv(Communicator& comm, Backend& backend, const Tensor& send, int dest, Tensor& recv, int source);
// In place: t = sum over ranks of t. A bfloat16 t is summed in float32 and rounded once, or, where
// the communicator reduces bfloat16 natively (NCCL on device memory), as it is, with no copy and
// one rounding per step of the collective (Communicator::reduces_bf16).
void all_reduce_sum(Communicator& comm, Backend& backend, Tensor& t);
// recv: size × send's elements, rank r's send at block r (see Communicator::all_gather).
void all_gather(Communicator& comm, Backend& backend, const Tensor& send, Tensor& recv);
// send: size × recv's elements; recv = sum over ranks of their block rank() (Communicator::reduce_scatter;
// bfloat16 as all_reduce_sum).
void reduce_scatter_sum(Communicator& comm, Backend& backend, const Tensor& send, Tensor& recv);

// Asynchronous forms (Communicator::sendrecv_async): the returned request keeps the tensors
// (and any host staging) alive until its wait(), after which recv / t holds the result for
// work queued from then on. Device tensors that need staging are copied to the host now
// and the result is copied back in wait().
CommHandle sendrecv_async(Communicator& comm, Backend& backend, const Tensor& send, int dest, Tensor& recv,
                          int source, int tag);
CommHandle all_reduce_sum_async(Communicator& comm, Backend& backend, Tensor& t);
CommHandle all_gather_async(Communicator& comm, Backend& backend, const Tensor& send, Tensor& recv);
CommHandle reduce_scatter_sum_async(Communicator& comm, Backend& backend, const Tensor& send, Tensor& recv);

}  // namespace ulysses
