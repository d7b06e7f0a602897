// Built when MPI is not found: the world is one process, or a TCP world under torchrun
// (comm/tcp_communicator.h). Being started by an MPI
// launcher with several ranks would silently run P independent copies, so that
// is an error instead.
#include "comm/communicator.h"
#include "comm/launch_env.h"
#include "comm/tcp_communicator.h"
#include "core/error.h"

namespace ulysses {

bool mpi_compiled_in() { return false; }

std::unique_ptr<Communicator> make_world_communicator(int* /*argc*/, char*** /*argv*/) {
  // torchrun's contract without an MPI launcher: the ranks meet over TCP at MASTER_ADDR:MASTER_PORT.
  if (detect_torchrun_env().present) return make_tcp_world_from_env();
  const LaunchEnv env = detect_launch_env();
  ULY_CHECK(!env.forced, "ULYSSES_FORCE_MPI=1 but this build has no MPI support: install libopenmpi-dev and "
                         "rebuild (or unset ULYSSES_FORCE_MPI)");
  ULY_CHECK(!env.launched || env.world_size <= 1,
            "this build has no MPI support but was launched with " << env.world_size << " ranks (" << env.source
                                                                   << "): install libopenmpi-dev and rebuild, or launch with torchrun --no-python "
                                                                      "(a TCP world, no MPI needed)");
  set_process_identity(0, 1);
  return make_self_communicator();
}

void finalize_world_communicator() {}

}  // namespace ulysses
