// `ulysses train`: the training loop. Model from a Hugging Face folder or a
// random init, batches from token shards, AdamW with warmup + cosine and
// clipping, evaluation, checkpoints (every N steps, at the end, and on
// SIGINT/SIGTERM) and exact resume on the same mesh, a progress line per step
// and metrics as JSON Lines.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>

#include "comm/communicator.h"
#include "train/train_config.h"

namespace ulysses {

class Backend;
class LlamaWeights;

// Where the tests inject faults into a run (cli/train.cpp sets them from its environment once,
// before the run; the loop reads no environment).
struct TrainerHooks {
  // After the backward of `step`, before the update: e.g. a NaN in a gradient.
  std::function<void(int64_t step, LlamaWeights& weights, Backend& backend)> after_backward;
  // After `step` is complete and saved if due: e.g. a SIGKILL.
  std::function<void(int64_t step)> after_step;
  // While saving `step`, its files written but the checkpoint not yet marked complete.
  std::function<void(int64_t step)> before_checkpoint_commit;
};

// One run: set up (engine, plan, run folder, weights, optimizer, data), then resume, step,
// evaluate and save.
class Trainer {
 public:
  Trainer(const TrainConfig& config, Communicator& world, TrainerHooks hooks = {});
  ~Trainer();
  // From the latest checkpoint when config.resume, else a fresh start; returns the step to go on from.
  int64_t resume();
  // One optimizer step (loss, gradients, update or a skipped non-finite step), logged.
  void step(int64_t step);
  // The held-out loss over config.eval_batches batches, logged.
  void evaluate(int64_t step);
  // A checkpoint of `step` (collective).
  void save(int64_t step);
  // resume, then the steps to config.steps with evaluation and checkpoints; the exit code (0, or
  // 130 after a signal-triggered checkpoint).
  int run();

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// Runs the configured training; returns the exit code.
int run_training(const TrainConfig& config, Communicator& world, TrainerHooks hooks = {});

// Set by SIGINT/SIGTERM; the loop checkpoints and stops at the next step boundary.
void install_stop_signal_handlers();

}  // namespace ulysses
