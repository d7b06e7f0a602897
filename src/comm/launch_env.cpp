#include "comm/launch_env.h"

#include <cstdlib>
#include <cstring>

#include "core/error.h"

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

TorchrunEnv detect_torchrun_env() {
  TorchrunEnv t;
  if (detect_launch_env().launched) return t;  // an MPI launcher's variables win
  const int world = env_int("WORLD_SIZE"), local = env_int("LOCAL_RANK");
  if (world <= 1 && local <= 0) return t;
  t.present = true;
  std::string missing;
  for (const char* var : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) {
    const char* v = std::getenv(var);
    if (v == nullptr || *v == '\0') missing += std::string(missing.empty() ? "" : ", ") + var;
  }
  ULY_CHECK(missing.empty(),
            "started by torchrun or a similar launcher (" << show(world > 1 ? "WORLD_SIZE" : "LOCAL_RANK")
                << ") but " << missing << " " << (missing.find(',') == std::string::npos ? "is" : "are")
                << " not set: a TCP world needs RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (torchrun "
                   "--no-python exports them all), or launch with mpirun / srun");
  t.world_size = world;
  t.rank = env_int("RANK");
  ULY_CHECK(t.world_size >= 1, "WORLD_SIZE must be a positive integer, got " << show("WORLD_SIZE"));
  ULY_CHECK(t.rank >= 0 && t.rank < t.world_size,
            show("RANK") << " is outside [0, " << t.world_size << ") (" << show("WORLD_SIZE") << ")");
  t.local_rank = local;
  t.local_world_size = env_int("LOCAL_WORLD_SIZE");
  t.master_addr = std::getenv("MASTER_ADDR");
  t.master_port = env_int("MASTER_PORT");
  ULY_CHECK(t.master_port >= 1 && t.master_port <= 65535,
            show("MASTER_PORT") << " is not a TCP port (1-65535)");
  t.rendezvous_port = t.master_port;
  t.port_source = show("MASTER_PORT");
  const char* agent_store = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  if (agent_store != nullptr && (std::strcmp(agent_store, "True") == 0 || std::strcmp(agent_store, "1") == 0) &&
      t.master_port < 65535) {
    t.rendezvous_port = t.master_port + 1;  // torchrun's agent serves its own store on MASTER_PORT
    t.port_source = show("MASTER_PORT") + " + 1 (" + show("TORCHELASTIC_USE_AGENT_STORE") + ")";
  }
  if (std::getenv("ULYSSES_MASTER_PORT") != nullptr) {
    t.rendezvous_port = env_int("ULYSSES_MASTER_PORT");
    ULY_CHECK(t.rendezvous_port >= 1 && t.rendezvous_port <= 65535,
              show("ULYSSES_MASTER_PORT") << " is not a TCP port (1-65535)");
    t.port_source = show("ULYSSES_MASTER_PORT");
  }
  if (const char* v = std::getenv("ULYSSES_RENDEZVOUS_TIMEOUT"); v != nullptr && *v != '\0') {
    char* end = nullptr;
    t.timeout_s = std::strtod(v, &end);
    ULY_CHECK(*end == '\0' && t.timeout_s > 0 && t.timeout_s <= 1e6,
              show("ULYSSES_RENDEZVOUS_TIMEOUT") << " is not a number of seconds in (0, 1e6]");
  }
  return t;
}

namespace {
constexpr const char* kLocalRankVars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID",
                                          "LOCAL_RANK"};
}  // namespace

int node_local_rank(int world_rank) {
  for (const char* var : kLocalRankVars)
    if (const char* v = std::getenv(var)) return std::atoi(v);
  return world_rank;
}

std::string node_local_rank_source() {
  for (const char* var : kLocalRankVars)
    if (std::getenv(var) != nullptr) return show(var);
  return "";
}

}  // namespace ulysses
