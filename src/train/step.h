// Loss and gradients of one global batch over the process mesh. Each rank
// holds only its shards (its DP group's rows, its SP slice of each); the loss
// is Σ token losses / Σ valid targets over the whole global batch, across SP
// and DP ranks alike (a rank with no valid target contributes exactly zero),
// and gradients are summed over the whole dp × sp world, so every rank ends
// with the same gradients, equal to a single rank's.
#pragma once
#include <cstdint>
#include <vector>

#include "model/batch.h"
#include "model/llama.h"
#include "parallel/mesh.h"

namespace ulysses {

struct StepResult {
  double loss = 0;              // mean over the global batch's valid targets (0 when none)
  double loss_sum = 0;          // Σ token losses over the global batch
  int64_t valid_targets = 0;    // Σ valid targets over the global batch
  int64_t tokens = 0;           // tokens in the global batch (padding included)
};

// Adds the gradients of this rank's shards into `weights`, or with LoRA (model.lora()) into the
// adapters' (zero them first for a fresh step); collective over the mesh's world.
StepResult compute_loss_and_grads(LlamaModel& model, LlamaWeights& weights, Backend& backend, ProcessMesh& mesh,
                                  const std::vector<SequenceShard>& shards);
// Forward only (evaluation): the global mean loss.
StepResult compute_loss(LlamaModel& model, Backend& backend, ProcessMesh& mesh,
                        const std::vector<SequenceShard>& shards);

// This rank's shards of a whole batch that every rank holds: rows dealt
// round-robin to the DP groups, each row sliced over the SP group.
std::vector<SequenceShard> local_shards(const TokenBatch& batch, ProcessMesh& mesh);

// Convenience: the same on a whole batch (loss-grad, tests).
StepResult compute_loss_and_grads(LlamaModel& model, LlamaWeights& weights, Backend& backend, ProcessMesh& mesh,
                                  const TokenBatch& batch);
StepResult compute_loss(LlamaModel& model, Backend& backend, ProcessMesh& mesh, const TokenBatch& batch);

}  // namespace ulysses
