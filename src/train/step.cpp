#include "train/step.h"

#include "backend/profile_scope.h"
#include "parallel/collectives.h"

namespace ulysses {
namespace {

// Global (valid targets, tokens): each token lives on exactly one rank.
void count_global(const std::vector<SequenceShard>& shards, ProcessMesh& mesh, StepResult& r) {
  int64_t local[2] = {0, 0}, global[2] = {0, 0};
  for (const SequenceShard& s : shards) {
    for (int32_t t : s.targets) local[0] += t != kIgnoreIndex;
    local[1] += s.S_local();
  }
  mesh.world().all_reduce(local, global, 2, DType::I64, ReduceOp::Sum);
  r.valid_targets = global[0];
  r.tokens = global[1];
}

void finish_loss(double local_sum, ProcessMesh& mesh, StepResult& r) {
  mesh.world().all_reduce(&local_sum, &r.loss_sum, 1, DType::F64, ReduceOp::Sum);
  r.loss = r.valid_targets > 0 ? r.loss_sum / static_cast<double>(r.valid_targets) : 0.0;
}

}  // namespace

std::vector<SequenceShard> local_shards(const TokenBatch& batch, ProcessMesh& mesh) {
  std::vector<SequenceShard> out;
  for (int64_t row = mesh.dp_rank(); row < batch.B; row += mesh.dp_size())
    out.push_back(shard_sequence(batch, row, mesh.sp(), mesh.layout()));
  return out;
}

StepResult compute_loss_and_grads(LlamaModel& model, LlamaWeights& weights, Backend& backend, ProcessMesh& mesh,
                                  const std::vector<SequenceShard>& shards) {
  StepResult r;
  count_global(shards, mesh, r);
  // Every rank knows the global count, so each token's gradient is scaled by
  // 1/N up front and a rank with no valid target contributes exactly zero.
  const double grad_scale = r.valid_targets > 0 ? 1.0 / static_cast<double>(r.valid_targets) : 0.0;
  double local_sum = 0;
  for (const SequenceShard& s : shards) local_sum += model.forward_backward(s, grad_scale);
  backend.synchronize();
  finish_loss(local_sum, mesh, r);
  ProfileScope prof(backend, "grad all-reduce");
  for (Parameter& p : weights.params()) all_reduce_sum(mesh.world(), backend, p.grad);
  return r;
}

StepResult compute_loss(LlamaModel& model, Backend& backend, ProcessMesh& mesh,
                        const std::vector<SequenceShard>& shards) {
  StepResult r;
  count_global(shards, mesh, r);
  double local_sum = 0;
  for (const SequenceShard& s : shards) local_sum += model.forward_loss(s);
  backend.synchronize();
  finish_loss(local_sum, mesh, r);
  return r;
}

StepResult compute_loss_and_grads(LlamaModel& model, LlamaWeights& weights, Backend& backend, ProcessMesh& mesh,
                                  const TokenBatch& batch) {
  return compute_loss_and_grads(model, weights, backend, mesh, local_shards(batch, mesh));
}

StepResult compute_loss(LlamaModel& model, Backend& backend, ProcessMesh& mesh, const TokenBatch& batch) {
  return compute_loss(model, backend, mesh, local_shards(batch, mesh));
}

}  // namespace ulysses
