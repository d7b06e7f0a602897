// The subcommands of the `ulysses` binary. Each returns the process exit code
// and throws ulysses::Error on failure (main prints it and aborts the job).
#pragma once
#include "comm/communicator.h"

namespace ulysses {

int run_loss_grad(int argc, char** argv, Communicator& world);
int run_plan(int argc, char** argv);
int run_bench(int argc, char** argv, Communicator& world);
int run_comm_bench(int argc, char** argv, Communicator& world);
int run_train(int argc, char** argv, Communicator& world);
int run_prepare(int argc, char** argv);
int run_tokenize(int argc, char** argv);
int run_plot(int argc, char** argv);
int run_generate(int argc, char** argv);
int run_merge_lora(int argc, char** argv);

}  // namespace ulysses
