// The world communicator of an MPI build: MPI when a launcher started us (or
// ULYSSES_FORCE_MPI=1), the self communicator for a plain single process, so
// that `ulysses train ...` works without mpirun and without MPI's start-up cost.
#include <mpi.h>

#include "comm/communicator.h"
#include "comm/launch_env.h"
#include "comm/tcp_communicator.h"
#include "comm/mpi_communicator.h"
#include "core/error.h"
#include "core/log.h"

namespace ulysses {

bool mpi_compiled_in() { return true; }

std::unique_ptr<Communicator> make_world_communicator(int* argc, char*** argv) {
  // torchrun's contract without an MPI launcher: the ranks meet over TCP at MASTER_ADDR:MASTER_PORT.
  if (detect_torchrun_env().present) return make_tcp_world_from_env();
  const LaunchEnv env = detect_launch_env();
  if (!env.launched && !env.forced) {
    set_process_identity(0, 1);
    return make_self_communicator();
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  ULY_CHECK(!finalized, "make_world_communicator after finalize_world_communicator: MPI cannot be restarted");
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    const int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    ULY_CHECK(rc == MPI_SUCCESS, "MPI_Init_thread failed (launched with " << env.source << "): "
                                                                          << mpi_error_string(rc));
    ULY_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler(world)");
    // Only the main thread calls MPI (OpenMP workers never do), which FUNNELED covers.
    if (provided < MPI_THREAD_FUNNELED)
      ULY_WARN("MPI provides thread level " << provided << " < MPI_THREAD_FUNNELED; continuing (only the main "
                                                           "thread calls MPI)");
  }
  // A private duplicate keeps our traffic apart from any other MPI user in the process.
  MPI_Comm dup = MPI_COMM_NULL;
  ULY_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &dup), "MPI_Comm_dup(MPI_COMM_WORLD)");
  auto world = wrap_mpi_communicator(dup, /*owned=*/true);
  MPI_Comm failure_channel = MPI_COMM_NULL;  // freed by MPI_Finalize
  ULY_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &failure_channel), "MPI_Comm_dup(MPI_COMM_WORLD)");
  MPI_Comm_set_errhandler(failure_channel, MPI_ERRORS_RETURN);
  set_mpi_failure_channel(failure_channel);
  set_process_identity(world->rank(), world->size());
  // Each process alone in its own world means the launcher and the MPI library we
  // linked do not speak the same protocol (e.g. MPICH's mpiexec starting an Open MPI binary).
  ULY_CHECK(env.world_size <= 0 || world->size() == env.world_size,
            "the launcher started " << env.world_size << " ranks (" << env.source << ") but MPI sees a world of "
                                    << world->size() << ": the launcher belongs to a different MPI than the one "
                                                        "this binary links; use that MPI's mpirun (check `which "
                                                        "mpirun` and `ldd` on the binary)");
  return world;
}

void finalize_world_communicator() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return;
  set_mpi_failure_channel(MPI_COMM_NULL);
  ULY_MPI_CHECK(MPI_Finalize(), "MPI_Finalize");
}

}  // namespace ulysses
