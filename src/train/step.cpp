#include "train/step.h"

#include "parallel/collectives.h"

namespace ulysses {

StepResult compute_loss(LlamaModel& model, Backend& backend, ProcessMesh& mesh, const TokenBatch& batch) {
  StepResult r;
  r.tokens = batch.B * batch.S;
  r.valid_targets = batch.valid_targets();
  double local_sum = 0;
  for (int64_t row = mesh.dp_rank(); row < batch.B; row += mesh.dp_size()) {
    SequenceShard shard = shard_sequence(batch, row, mesh.sp());
    local_sum += model.forward_loss(shard);
  }
  backend.synchronize();
  mesh.world().all_reduce(&local_sum, &r.loss_sum, 1, DType::F64, ReduceOp::Sum);
  r.loss = r.valid_targets > 0 ? r.loss_sum / static_cast<double>(r.valid_targets) : 0.0;
  return r;
}

StepResult compute_loss_and_grads(LlamaModel& model, LlamaWeights& weights, Backend& backend, ProcessMesh& mesh,
                                  const TokenBatch& batch) {
  StepResult r;
  r.tokens = batch.B * batch.S;
  r.valid_targets = batch.valid_targets();
  // Every rank knows the global count, so each token's gradient is scaled by
  // 1/N up front and a rank with no valid target contributes exactly zero.
  const double grad_scale = r.valid_targets > 0 ? 1.0 / static_cast<double>(r.valid_targets) : 0.0;

  double local_sum = 0;
  for (int64_t row = mesh.dp_rank(); row < batch.B; row += mesh.dp_size()) {
    SequenceShard shard = shard_sequence(batch, row, mesh.sp());
    local_sum += model.forward_backward(shard, grad_scale);
  }
  backend.synchronize();

  mesh.world().all_reduce(&local_sum, &r.loss_sum, 1, DType::F64, ReduceOp::Sum);
  r.loss = r.valid_targets > 0 ? r.loss_sum / static_cast<double>(r.valid_targets) : 0.0;
  for (Parameter& p : weights.params()) all_reduce_sum(mesh.world(), backend, p.grad);
  return r;
}

}  // namespace ulysses
