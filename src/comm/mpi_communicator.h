// The MPI communicator's construction and its one test hook. Included only by
// src/comm/mpi_*.cpp and the MPI tests (it needs <mpi.h>).
#pragma once
#include <mpi.h>

#include <cstddef>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "core/error.h"

namespace ulysses {

// Wraps `comm`; when `owned`, MPI_Comm_free runs in the destructor (skipped after
// MPI_Finalize). Sets MPI_ERRORS_RETURN on it so failures become ulysses::Error.
std::unique_ptr<Communicator> wrap_mpi_communicator(MPI_Comm comm, bool owned);

// A communicator over all processes reserved for failing together: abort()
// first waits (a bounded time) on a non-blocking barrier over it, so that when
// every rank hits the same error each prints its message before MPI_Abort ends
// the job. Kept apart from the world that carries the step's collectives, so
// the barrier never matches a collective a healthy rank is blocked in.
void set_mpi_failure_channel(MPI_Comm comm);

// MPI counts are int: a call moving more elements than this per count argument
// is split into several MPI calls. Defaults to INT_MAX; tests lower it to run
// the split paths on small buffers. Not thread-safe; set it on every rank alike.
size_t mpi_max_count();
void set_mpi_max_count_for_testing(size_t max_count);  // 0 restores the default

}  // namespace ulysses

namespace ulysses {

// MPI_Error_string for a return code.
std::string mpi_error_string(int rc);

}  // namespace ulysses

// ULY_MPI_CHECK(MPI_Barrier(c), "MPI_Barrier on " << n << " ranks"): throws ulysses::Error
// naming the call and MPI's own message when the call does not return MPI_SUCCESS.
#define ULY_MPI_CHECK(call, stream_expr)                                                    \
  do {                                                                                      \
    const int uly_mpi_rc_ = (call);                                                         \
    if (uly_mpi_rc_ != MPI_SUCCESS) ULY_FAIL(stream_expr << " failed: " << ::ulysses::mpi_error_string(uly_mpi_rc_)); \
  } while (0)
