// What the environment says about how this process was started: by an MPI
// launcher (mpirun, srun, hydra), by torchrun (or any launcher with its
// RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT contract), or as a plain single
// process. Read before MPI is initialised, so it can only look at the variables
// the launchers export.
#pragma once
#include <string>

namespace ulysses {

struct LaunchEnv {
  bool launched = false;   // an MPI launcher's variable was found
  bool forced = false;     // ULYSSES_FORCE_MPI=1
  int world_size = 0;      // from the launcher, 0 when it does not say
  std::string source;      // the variable that decided, for messages ("OMPI_COMM_WORLD_SIZE=4")
};

LaunchEnv detect_launch_env();

// torchrun's contract: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (and LOCAL_RANK,
// LOCAL_WORLD_SIZE), with no MPI launcher's variables. Such a world talks over TCP
// sockets (comm/tcp_communicator.h), rendezvousing at MASTER_ADDR:MASTER_PORT.
struct TorchrunEnv {
  bool present = false;  // WORLD_SIZE > 1 (or LOCAL_RANK > 0) and no MPI launcher
  int rank = -1, world_size = 0, local_rank = -1, local_world_size = 0;
  std::string master_addr;
  int master_port = -1;
  // The port rank 0 listens on: MASTER_PORT, or ULYSSES_MASTER_PORT when set, or MASTER_PORT + 1
  // when torchrun's agent hosts its own store on MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True).
  int rendezvous_port = -1;
  std::string port_source;  // "MASTER_PORT=29500" or the variable that chose rendezvous_port
  double timeout_s = 300;   // ULYSSES_RENDEZVOUS_TIMEOUT
};

// Reads torchrun's variables; throws a clear Error when they are present but incomplete or
// invalid (RANK outside [0, WORLD_SIZE), no MASTER_ADDR, a MASTER_PORT that is not a port).
TorchrunEnv detect_torchrun_env();

// The rank within this node, from the launcher (OMPI_COMM_WORLD_LOCAL_RANK,
// SLURM_LOCALID, MPI_LOCALRANKID, LOCAL_RANK), else `world_rank`: picks the GPU.
int node_local_rank(int world_rank);
// The variable node_local_rank read ("LOCAL_RANK=3"), or "" when none was set.
std::string node_local_rank_source();

}  // namespace ulysses
