// The Llama forward and backward pass over one sequence shard, written against
// the Backend ops and a SequenceAttention (local or sequence-parallel).
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/documents.h"
#include "model/attention_inputs.h"
#include "model/batch.h"
#include "model/gradient_accumulator.h"
#include "model/llama_weights.h"
#include "model/lora_weights.h"
#include "model/parameter_store.h"
#include "parallel/sequence_attention.h"

namespace ulysses {

// Memory techniques (ALST). Defaults are the plain path.
struct StepOptions {
  int64_t mlp_tiles = 1;          // gated MLP over this many sequence tiles (0 = ceil(tokens / hidden));
                                  // more than one tile recomputes the MLP in backward
  int64_t loss_tile_tokens = 0;   // tokens per lm_head + cross-entropy tile; 0 = all local tokens at once
  bool checkpoint = false;        // keep only each layer's input; recompute the layer in backward
  int64_t offload_layers = 0;     // with checkpoint: the first K layers' checkpoints go to host memory; -1 = all
  bool keep_attention = false;    // with checkpoint: keep each layer's attention output and lse on the device, so
                                  // that the recompute skips the attention kernel
  int64_t checkpoint_segment = 1; // with checkpoint: keep one input per segment of this many layers (two-level
                                  // checkpointing); the backward recomputes a segment's forward once, keeping its
                                  // layer inputs on the device (Checkpoints pool), then each layer as usual
  int64_t head_chunks = 1;        // q/k/v projections, all-to-alls and attention one chunk of H/N heads at a time
                                  // (UPipe's idea at every degree); the backward recomputes each chunk's q/k/v
  bool overlap_communication = true;  // ZeRO stages 2 and 3: each group's gradient reduce-scatter runs during the
                                      // next group's backward, and the next layer's weights are gathered during
                                      // this one's compute; false waits for each at once (for comparison)
  DType grad_dtype = DType::F32;  // the gradient buffers' dtype (LlamaWeights is made with it): float32, or
                                  // bfloat16, summed per layer in a float32 scratch (model/gradient_accumulator.h)

  bool operator==(const StepOptions&) const = default;
};

class LlamaModel {
 public:
  LlamaModel(LlamaWeights& weights, Backend& backend, Communicator& sp_group, StepOptions options = {});
  // Over a mesh's sequence-parallel groups: Ulysses, ring attention or the hybrid (parallel/mesh.h).
  LlamaModel(LlamaWeights& weights, Backend& backend, const ProcessMesh& mesh, StepOptions options = {});
  // With the sequence attention made by the caller (make_sequence_attention over a mesh: ring, hybrid).
  LlamaModel(LlamaWeights& weights, Backend& backend, std::unique_ptr<SequenceAttention> attention,
             StepOptions options = {});
  ~LlamaModel();

  // Forward and backward over one shard: adds grad_scale * d(sum of this rank's
  // token losses)/d(params) into the weights' gradients (the sequence-parallel
  // peers' contributions arrive through the attention's collectives) and returns
  // the sum of this rank's token losses. layer_grads_done(l), if set, runs as soon as
  // layer l's backward has added its last contribution to the layer's gradients (layers
  // in reverse order), so the caller can start reducing them while the backward goes on.
  double forward_backward(const SequenceShard& shard, double grad_scale,
                          const std::function<void(int64_t layer)>& layer_grads_done = {});

  // Forward only (evaluation): the sum of this rank's token losses; no gradients.
  double forward_loss(const SequenceShard& shard);
  // Forward only, without the head: the last layer's output [S_local, D], before the final norm
  // (the decoder's step, with a KV-cache attention: model/decoder.h).
  Tensor forward_hidden(const SequenceShard& shard);

  const StepOptions& options() const { return options_; }
  const LlamaWeights& weights() const { return w_; }

  // LoRA: the adapters join the projections they wrap, and the backward computes their gradients
  // only (the base must be frozen: ParameterSet::freeze before its allocation). Before the first
  // step; the adapters must outlive the model.
  void attach_lora(LoraWeights& lora);
  LoraWeights* lora() const { return lora_; }

 private:
  struct LayerActs;
  struct KeptAttention;
  void layer_forward(int64_t l, const Tensor& x_in, LayerActs& a, Tensor& x_out, const KeptAttention* kept = nullptr);
  // grad: dL/d(layer output) on entry, dL/d(layer input) on exit (its buffer is reused). Each
  // activation is released as soon as the backward has used it; after_attention (if set) runs
  // once the attention's backward is done (the checkpoint prefetch goes there: past the peak).
  void layer_backward(int64_t l, LayerActs& a, Tensor& grad, const std::function<void()>& after_attention);
  // --head-chunks: the attention side of a layer one chunk of heads at a time (forward writes a.attn,
  // keeps each chunk's lse; backward recomputes each chunk's q/k/v from the rebuilt normed input).
  void attention_forward_chunked(int64_t l, LayerActs& a, const KeptAttention* kept);
  void attention_backward_chunked(int64_t l, LayerActs& a, const Tensor& dattn, Tensor& dxn1, const Tensor& xn1);
  // The heads of chunk c (--head-chunks): H/C query heads and their Hkv/C kv heads.
  HeadRange chunk_heads(int64_t c) const;
  void mlp_forward(int64_t l, const Tensor& x_mid, LayerActs& a, Tensor& x_out);
  void mlp_backward(int64_t l, LayerActs& a, Tensor& d_mid);
  int64_t mlp_tile_tokens(int64_t N) const;
  // The weight group the forward uses after layer l (-1: after the embedding): l + 1, or the head.
  int64_t next_forward_group(int64_t l) const;
  // x = the embedding of ids, its weights held meanwhile (the first layer's gathered beside it).
  void embed(const Tensor& ids, Tensor& x);
  // The weight group the backward uses first for layer l (segment: the first layer whose input is
  // on the device, Lyr before the backward starts): its segment's first layer when the segment's
  // forward is recomputed, else l itself; kNone below layer 0.
  int64_t first_backward_group(int64_t l, int64_t segment) const;
  // With dx undefined, forward only (no gradients).
  double head_forward_backward(const Tensor& x, const Tensor& targets, double grad_scale, Tensor& dx);
  void begin_sequence(const SequenceShard& shard, Tensor& ids, Tensor& targets);
  void end_sequence();  // drops the per-sequence state and any gathered weights
  Tensor run_layers(const Tensor& ids);  // embedding and every layer's forward, no activations kept
  // y = x W^T (+ the adapter's share, where one wraps W).
  void linear(Tensor& y, const Tensor& x, const Parameter& w, const LoraAdapter* ad = nullptr);
  void linear_backward(Tensor& dx, Parameter& w, const Tensor& dy, const Tensor& x, bool accumulate_dx,
                       const LoraAdapter* ad = nullptr);
  // Layer l's adapter on projection t, or null (no LoRA, or t not wrapped).
  const LoraAdapter* adapter(int64_t l, LoraTarget t) const { return lora_ ? lora_->adapter(l, t) : nullptr; }

  LlamaWeights& w_;
  Backend& be_;
  StepOptions options_;
  const ModelConfig& c_;
  GradientAccumulator grads_;
  ParameterStore params_;  // the layers' weights, gathered a group at a time with ZeRO stage 3
  std::unique_ptr<SequenceAttention> attention_;
  LoraWeights* lora_ = nullptr;
  Tensor inv_freq_;  // [d/2] float32 on the device
  int64_t inv_freq_length_ = 0;  // the sequence length inv_freq_ was made for (dynamic RoPE)
  void set_rope_length(int64_t length);
  // Per-sequence state, valid during forward_backward.
  Tensor positions_;
  Documents docs_;
};

}  // namespace ulysses
