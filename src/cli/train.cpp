// ulysses train [CONFIG.yaml] [key=value | --key value ...]
#include <iostream>

#include "cli/commands.h"
#include "train/trainer.h"

namespace ulysses {

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
  return run_training(config, world);
}

}  // namespace ulysses
