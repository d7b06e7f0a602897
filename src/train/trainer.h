// `ulysses train`: the training loop. Model from a Hugging Face folder or a
// random init, batches from token shards, AdamW with warmup + cosine and
// clipping, evaluation, checkpoints (every N steps, at the end, and on
// SIGINT/SIGTERM) and exact resume on the same mesh, a progress line per step
// and metrics as JSON Lines.
#pragma once
#include "comm/communicator.h"
#include "train/train_config.h"

namespace ulysses {

// Runs the configured training; returns the exit code (0, or 130 after a
// signal-triggered checkpoint).
int run_training(const TrainConfig& config, Communicator& world);

// Set by SIGINT/SIGTERM; the loop checkpoints and stops at the next step boundary.
void install_stop_signal_handlers();

}  // namespace ulysses
