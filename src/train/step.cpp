#include "train/step.h"

#include <functional>
#include <vector>

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

// True on every rank when every rank of the world has as many shards as this one: only
// then may a layer's gradient reduction start inside the backward, because the world's
// collectives (and the sequence groups' inside the model) are then issued in the same
// order on every rank.
bool same_shard_count(const std::vector<SequenceShard>& shards, ProcessMesh& mesh) {
  if (mesh.world().size() == 1) return true;
  const auto n = static_cast<int64_t>(shards.size());
  int64_t local[2] = {n, -n}, extremes[2] = {0, 0};
  mesh.world().all_reduce(local, extremes, 2, DType::I64, ReduceOp::Max);
  return extremes[0] == -extremes[1];
}

// Sums every trained gradient over the world: the weights', or with LoRA the adapters'. Each
// layer's gradients start their all-reduce as soon as the backward is past the layer
// (overlapped with the layers below), when the ranks allow it; the rest (embedding, final
// norm, lm_head) and the waits come at finish().
// bfloat16 buffers are summed through float32 copies (parallel/collectives.h): then one
// layer's reduction is in flight at a time, so that the copies never hold more than a layer.
class GradientReduction {
 public:
  GradientReduction(ParameterSet& trained, std::function<std::vector<Parameter*>(int64_t)> layer_params,
                    Backend& backend, Communicator& world, bool per_layer)
      : weights_(trained), layer_params_(std::move(layer_params)), backend_(backend), world_(world),
        per_layer_(per_layer && world.size() > 1), started_(trained.params().size(), false) {}
  // Sharded gradients (ZeRO stage 2) were reduce-scattered by the backward itself.
  bool needed() const { return !weights_.grads_sharded(); }

  std::function<void(int64_t)> layer_hook() {
    if (!per_layer_ || !needed()) return {};
    return [this](int64_t l) {
      ProfileScope prof(backend_, "grad all-reduce");
      if (weights_.grad_dtype() != DType::F32) wait_all(pending_);
      for (Parameter* p : layer_params_(l)) start(*p);
    };
  }

  void finish() {
    if (!needed()) return;
    ProfileScope prof(backend_, "grad all-reduce");
    const bool one_at_a_time = weights_.grad_dtype() != DType::F32;
    for (Parameter& p : weights_.params()) {
      start(p);
      if (one_at_a_time) wait_all(pending_);
    }
    wait_all(pending_);
  }

 private:
  void start(Parameter& p) {
    const size_t i = static_cast<size_t>(&p - weights_.params().data());
    if (started_[i]) return;
    started_[i] = true;
    pending_.push_back(all_reduce_sum_async(world_, backend_, p.grad));
  }

  ParameterSet& weights_;
  std::function<std::vector<Parameter*>(int64_t)> layer_params_;
  Backend& backend_;
  Communicator& world_;
  bool per_layer_;
  std::vector<bool> started_;
  std::vector<CommHandle> pending_;
};

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
  const bool same_count = same_shard_count(shards, mesh);
  if (weights.grads_sharded()) {
    const ParameterSharding& sh = weights.sharding();
    ULY_CHECK(sh.group != nullptr && sh.group->size() == mesh.world().size() && sh.rank == mesh.world().rank(),
              "sharded gradients (ZeRO stages 2 and 3) must be sharded over the whole world of " << mesh.world().size()
                                                                                           << " ranks");
    ULY_CHECK(same_count, "ZeRO stages 2 and 3 reduce-scatter each layer's gradients during the backward, so every rank "
                          "must hold as many rows of the batch: give a number of rows that is a multiple of dp = "
                              << mesh.dp_size() << " (bench: --batch)");
  }
  // LoRA trains the adapters alone: theirs are the gradients to reduce (the base has none).
  LoraWeights* lora = model.lora();
  ParameterSet& trained = lora ? static_cast<ParameterSet&>(*lora) : weights;
  GradientReduction reduction(
      trained,
      [&](int64_t l) { return lora ? lora->layer_params(l) : weights.layer(l).all(); }, backend, mesh.world(),
      same_count);
  double local_sum = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    // A layer's gradients are final after the last shard's backward of that layer.
    const bool last = i + 1 == shards.size();
    local_sum += model.forward_backward(shards[i], grad_scale,
                                        last ? reduction.layer_hook() : std::function<void(int64_t)>());
  }
  trained.settle_grads(backend);  // a rank with no rows of the batch contributes zeros
  backend.synchronize();
  finish_loss(local_sum, mesh, r);
  reduction.finish();
  return r;
}

StepResult compute_loss(LlamaModel& model, Backend& backend, ProcessMesh& mesh,
                        const std::vector<SequenceShard>& shards) {
  StepResult r;
  count_global(shards, mesh, r);
  ULY_CHECK(!model.weights().weights_sharded() || same_shard_count(shards, mesh),
            "ZeRO stage 3 gathers each layer's weights over all ranks, so every rank must evaluate as many rows: "
            "give a number of rows that is a multiple of dp = "
                << mesh.dp_size());
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
