// ulysses train [CONFIG.yaml] [key=value | --key value ...]
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "cli/commands.h"
#include "core/error.h"
#include "model/llama_weights.h"
#include "train/trainer.h"

namespace ulysses {
namespace {

// The faults the tests inject, read from the environment once, before the run:
// ULYSSES_TEST_NONFINITE_AT_STEP=N puts a NaN into the first gradient element at step N (as a
// diverging step would leave); ULYSSES_TEST_KILL_AT_STEP=N raises SIGKILL after step N, on every
// rank or only on ULYSSES_TEST_KILL_RANK (the others then block in the next collective);
// ULYSSES_TEST_KILL_DURING_SAVE=N raises SIGKILL while step N's checkpoint is being saved, its files
// written but not yet marked complete.
TrainerHooks test_hooks_from_environment(int rank) {
  TrainerHooks hooks;
  if (const char* at = std::getenv("ULYSSES_TEST_NONFINITE_AT_STEP")) {
    const long long poison_step = std::atoll(at);
    hooks.after_backward = [poison_step](int64_t step, LlamaWeights& weights, Backend& backend) {
      if (step != poison_step) return;
      Parameter& p = weights.params().front();
      float nan = std::numeric_limits<float>::quiet_NaN();
      Tensor first = p.grad.reshape({p.grad.numel()}).slice(0, 1);
      backend.copy(first, Tensor::borrow(&nan, {1}, DType::F32));
    };
  }
  if (const char* kill_at = std::getenv("ULYSSES_TEST_KILL_AT_STEP")) {
    const char* kill_rank = std::getenv("ULYSSES_TEST_KILL_RANK");
    const long long kill_step = std::atoll(kill_at);
    const bool this_rank = kill_rank == nullptr || std::atoi(kill_rank) == rank;
    hooks.after_step = [kill_step, this_rank](int64_t step) {
      if (step == kill_step && this_rank) std::raise(SIGKILL);
    };
  }
  if (const char* kill_save = std::getenv("ULYSSES_TEST_KILL_DURING_SAVE")) {
    const long long kill_step = std::atoll(kill_save);
    hooks.before_checkpoint_commit = [kill_step](int64_t step) {
      if (step == kill_step) std::raise(SIGKILL);
    };
  }
  return hooks;
}

}  // namespace

int run_train(int argc, char** argv, Communicator& world) {
  std::string config_path;
  std::vector<std::string> overrides;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::cout << "usage: ulysses train [CONFIG.yaml] [key=value | --key value ...]\n\n"
                   "Every key of the config can be overridden on the command line, nested keys\n"
                   "dotted (--optimizer.lr 1e-4, memory.checkpoint=true). The keys and defaults:\n\n"
                << train_config_defaults_yaml();
      return 0;
    }
    if (a == "--print-defaults") {
      std::cout << train_config_defaults_yaml();
      return 0;
    }
    if (config_path.empty() && overrides.empty() && a.rfind("--", 0) != 0 && a.find('=') == std::string::npos)
      config_path = a;
    else
      overrides.push_back(a);
  }
  const TrainConfig config = load_train_config(config_path, overrides);
  install_stop_signal_handlers();
  const int code = run_training(config, world, test_hooks_from_environment(world.rank()));
  // The loss curve beside metrics.jsonl, as `ulysses plot` draws it (rank 0; a failure only warns).
  if (world.rank() == 0) {
    const std::string metrics = config.out_dir + "/metrics.jsonl", png = config.out_dir + "/loss.png";
    std::vector<std::string> a = {"ulysses", "plot", metrics, "-o", png, "--title", "ulysses train: " + config.out_dir};
    std::vector<char*> argv_plot;
    for (std::string& s : a) argv_plot.push_back(s.data());
    try {
      std::ostringstream quiet;
      int rc = 1;
      {
        struct Restore {
          std::streambuf* old;
          ~Restore() { std::cout.rdbuf(old); }
        } restore{std::cout.rdbuf(quiet.rdbuf())};
        rc = run_plot(static_cast<int>(argv_plot.size()), argv_plot.data());
      }
      if (rc == 0) std::cout << "loss curve: " << png << std::endl;
    } catch (const Error& e) {
      std::cerr << "ulysses train: warning: no loss.png: " << e.message() << std::endl;
    }
  }
  return code;
}

}  // namespace ulysses
