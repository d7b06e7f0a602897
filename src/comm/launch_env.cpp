#include "comm/launch_env.h"

#include <cstdlib>
#include <cstring>

namespace ulysses {
namespace {

// The variable's integer value, or -1 when unset or not a number.
int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return -1;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < 0 || x > 1 << 30) return -1;
  return static_cast<int>(x);
}

std::string show(const char* name) {
  const char* v = std::getenv(name);
  return std::string(name) + "=" + (v ? v : "");
}

}  // namespace

LaunchEnv detect_launch_env() {
  LaunchEnv env;
  const char* force = std::getenv("ULYSSES_FORCE_MPI");
  env.forced = force != nullptr && std::strcmp(force, "1") == 0;
  // Open MPI's mpirun, then the PMI/PMIx launchers (MPICH hydra, srun --mpi=pmi2/pmix).
  for (const char* size_var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"}) {
    const int n = env_int(size_var);
    if (n >= 0) {
      env.launched = true;
      env.world_size = n;
      env.source = show(size_var);
      return env;
    }
  }
  if (env_int("PMIX_RANK") >= 0) {  // PMIx exports the rank but not always the size
    env.launched = true;
    env.source = show("PMIX_RANK");
    return env;
  }
  // srun exports SLURM_STEP_NUM_TASKS for a job step; a batch script (not a step)
  // also has SLURM_PROCID and SLURM_NTASKS but is one process, so those alone do not count.
  const int step_tasks = env_int("SLURM_STEP_NUM_TASKS");
  if (env_int("SLURM_PROCID") >= 0 && step_tasks >= 0) {
    env.launched = true;
    env.world_size = step_tasks;
    env.source = show("SLURM_STEP_NUM_TASKS");
    return env;
  }
  if (env.forced) env.source = "ULYSSES_FORCE_MPI=1";
  return env;
}

std::string foreign_launcher_message(int argc, char** argv) {
  if (detect_launch_env().launched) return "";
  const int world = env_int("WORLD_SIZE"), local = env_int("LOCAL_RANK");
  if (world <= 1 && local <= 0) return "";
  std::string cmd = "mpirun --allow-run-as-root -np " + std::to_string(world > 1 ? world : local + 1);
  for (int i = 0; i < argc; ++i) cmd += std::string(" ") + argv[i];
  return "started by torchrun or a similar launcher (" + show(world > 1 ? "WORLD_SIZE" : "LOCAL_RANK") +
         ") without MPI: every process would run alone, all into the same output. Ulysses ranks talk "
         "over MPI; launch with: " + cmd;
}

int node_local_rank(int world_rank) {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID", "LOCAL_RANK"})
    if (const char* v = std::getenv(var)) return std::atoi(v);
  return world_rank;
}

}  // namespace ulysses
