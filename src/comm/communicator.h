// The communicator interface: every collective the engine uses, independent of
// the transport (MPI now, NCCL behind the same interface in the CUDA backend).
// Counts are in elements of `dtype`; buffers hold `count` elements per the
// comment on each call. A call is collective: every rank of the group makes it.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace ulysses {

class WorkLedger;

enum class ReduceOp { Sum, Max };

// A communication in flight, returned by a *_async call. Until wait() returns, the
// call's send buffer must not change and its receive buffer must not be read. What
// wait() means depends on the communicator (see Communicator::all_reduce_async).
// wait() may be called more than once; a request destroyed unwaited waits first.
class CommRequest {
 public:
  virtual ~CommRequest() = default;
  virtual void wait() = 0;
};
using CommHandle = std::unique_ptr<CommRequest>;

// A request that is already complete (what a blocking call returns as a handle).
CommHandle completed_request();
// Waits for every handle in order and clears the list.
void wait_all(std::vector<CommHandle>& handles);

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;  // "self", "mpi", "nccl"
  // True when buffers may be device memory (NCCL); otherwise callers stage
  // device tensors through host memory (parallel/collectives.h).
  virtual bool device_buffers() const { return false; }
  // True when sums of bfloat16 buffers at `buffer` run natively (NCCL: every step of its
  // algorithm adds in float32 and rounds to bfloat16); otherwise parallel/collectives.h sums a
  // float32 copy. MPI and TCP have no bfloat16 arithmetic.
  virtual bool reduces_bf16(const void* buffer) const {
    (void)buffer;
    return false;
  }

  // send: [size * count] (block r goes to rank r); recv: [size * count] (block r came from rank r).
  virtual void all_to_all(const void* send, void* recv, size_t count, DType dtype) = 0;
  // Uneven splits: send_counts[r] elements at send_displs[r] go to rank r; recv likewise.
  virtual void all_to_all_v(const void* send, const size_t* send_counts, const size_t* send_displs, void* recv,
                            const size_t* recv_counts, const size_t* recv_displs, DType dtype) = 0;
  // send: [count]; recv: [size * count], rank r's block at r * count.
  virtual void all_gather(const void* send, void* recv, size_t count, DType dtype) = 0;
  // send: [size * count]; recv: [count] = op over ranks of their block `rank()`.
  virtual void reduce_scatter(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) = 0;
  // send, recv: [count]; send == recv means in place.
  virtual void all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) = 0;
  virtual void broadcast(void* buf, size_t count, DType dtype, int root) = 0;
  virtual void send(const void* buf, size_t count, DType dtype, int peer, int tag) = 0;
  virtual void recv(void* buf, size_t count, DType dtype, int peer, int tag) = 0;
  // send: [send_count] to rank dest and recv: [recv_count] from rank source in one call, so that
  // every rank of a ring may send to its successor at once without deadlock (ring attention).
  // send and recv must not overlap; dest or source may be this rank.
  virtual void sendrecv(const void* send, size_t send_count, int dest, void* recv, size_t recv_count, int source,
                        DType dtype, int tag) = 0;

  // Asynchronous forms of all_reduce, all_gather, reduce_scatter and sendrecv, with the same
  // arguments (and in-place forms). Every rank issues the calls of one group in the same
  // order, blocking and asynchronous alike; several may be in flight at once.
  //  - Host buffers (MPI): the call starts the transfer; wait() returns once it is complete.
  //    An all_gather or reduce_scatter too large for one MPI call runs blocking, split, and
  //    returns a completed request (mpi_communicator.cpp).
  //  - Device buffers (NCCL with a compute stream): the transfer is queued after the work
  //    already on the compute stream and runs beside later work there; the call and wait()
  //    return at once, and work queued on the compute stream after wait() sees the result.
  // The defaults run the blocking call and return a completed request.
  virtual CommHandle all_reduce_async(const void* send, void* recv, size_t count, DType dtype, ReduceOp op);
  virtual CommHandle all_gather_async(const void* send, void* recv, size_t count, DType dtype);
  virtual CommHandle reduce_scatter_async(const void* send, void* recv, size_t count, DType dtype, ReduceOp op);
  virtual CommHandle sendrecv_async(const void* send, size_t send_count, int dest, void* recv, size_t recv_count,
                                    int source, DType dtype, int tag);
  // Moves transfers in flight along without waiting (MPI progresses nonblocking collectives only
  // inside MPI calls; NCCL needs nothing). Called while the host waits for the device.
  virtual void progress() {}
  virtual void barrier() = 0;
  // Ranks with the same color form a new group, ordered by key (then by old rank).
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
  // Ends every process of the job (used after an error on one rank, so none hangs).
  [[noreturn]] virtual void abort(int exit_code) = 0;
};

// A group of one process: collectives are copies.
std::unique_ptr<Communicator> make_self_communicator();

// A stand-in for rank `rank` of a group of `size` that moves no data: every
// collective returns at once, leaving outputs untouched. Used by the memory
// planner to run the step code for a degree without launching the ranks.
// work: where each collective's kind, size and group go (the step-time model; core/step_work.h).
std::unique_ptr<Communicator> make_simulated_communicator(int size, int rank, WorkLedger* work = nullptr);

// The world: MPI when the process was launched by mpirun/srun (or MPI is forced),
// a self communicator otherwise. Initialises MPI on first use; sets the process
// identity used in error messages. Safe to call once per process.
std::unique_ptr<Communicator> make_world_communicator(int* argc, char*** argv);
// Finalises MPI if it was initialised (call at normal exit).
void finalize_world_communicator();
// True when this build has MPI support.
bool mpi_compiled_in();

}  // namespace ulysses
