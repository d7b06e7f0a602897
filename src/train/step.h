// Loss and gradients of one global batch over the process mesh: batch rows
// are dealt to the DP groups, each row's tokens split over the SP group; the
// loss is Σ token losses / Σ valid targets over the whole global batch, and
// gradients are summed over the whole dp × sp world, so every rank ends with
// the same gradients, equal to a single rank's.
#pragma once
#include <cstdint>

#include "model/batch.h"
#include "model/llama.h"
#include "parallel/mesh.h"

namespace ulysses {

struct StepResult {
  double loss = 0;              // mean over the global batch's valid targets (0 when none)
  double loss_sum = 0;          // Σ token losses over the global batch
  int64_t valid_targets = 0;    // Σ valid targets over the global batch
  int64_t tokens = 0;           // tokens in the global batch (without padding)
};

// Adds the batch's gradients into `weights` (zero them first for a fresh step).
// `batch` is the whole global batch (every rank sees the same one); each rank
// uses only its rows and its slice of them.
// Forward only over the batch (evaluation): the global mean loss.
StepResult compute_loss(LlamaModel& model, Backend& backend, ProcessMesh& mesh, const TokenBatch& batch);

StepResult compute_loss_and_grads(LlamaModel& model, LlamaWeights& weights, Backend& backend, ProcessMesh& mesh,
                                  const TokenBatch& batch);

}  // namespace ulysses
