// What the environment says about how this process was started: by an MPI
// launcher (mpirun, srun, hydra) or as a plain single process. Read before MPI
// is initialised, so it can only look at the variables the launchers export.
#pragma once
#include <string>

namespace ulysses {

struct LaunchEnv {
  bool launched = false;   // a launcher variable was found
  bool forced = false;     // ULYSSES_FORCE_MPI=1
  int world_size = 0;      // from the launcher, 0 when it does not say
  std::string source;      // the variable that decided, for messages ("OMPI_COMM_WORLD_SIZE=4")
};

LaunchEnv detect_launch_env();

// Non-empty when the process looks started by torchrun (or another launcher that sets
// WORLD_SIZE > 1 or LOCAL_RANK > 0) without MPI: each process would run alone, all writing
// to the same place. The text says so and gives the mpirun command line for `args`.
std::string foreign_launcher_message(int argc, char** argv);

// The rank within this node, from the launcher (OMPI_COMM_WORLD_LOCAL_RANK,
// SLURM_LOCALID, MPI_LOCALRANKID, LOCAL_RANK), else `world_rank`: picks the GPU.
int node_local_rank(int world_rank);

}  // namespace ulysses
