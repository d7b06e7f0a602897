// The parameters of a Llama model, named as in Hugging Face's named_parameters(),
// with a gradient buffer for each.
#pragma once
#include <array>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "io/hf_config.h"
#include "io/model_folder.h"

namespace ulysses {

struct Parameter {
  std::string name;  // e.g. "model.layers.0.self_attn.q_proj.weight"
  Shape shape;
  Tensor value;  // compute copy on the backend's device, in its act_dtype()
  Tensor grad;   // on the backend's device: float32, or bfloat16 (LlamaWeights' grad_dtype)
};

class LlamaWeights {
 public:
  struct Layer {
    Parameter* input_norm;  // [D]
    Parameter* wq;          // [H*d, D]
    Parameter* wk;          // [Hkv*d, D]
    Parameter* wv;          // [Hkv*d, D]
    Parameter* wo;          // [D, H*d]
    Parameter* post_norm;   // [D]
    Parameter* w_gate;      // [F, D]
    Parameter* w_up;        // [F, D]
    Parameter* w_down;      // [D, F]
    std::array<Parameter*, 9> all() const {
      return {input_norm, wq, wk, wv, wo, post_norm, w_gate, w_up, w_down};
    }
  };

  // Names and shapes from the config; no memory yet. grad_dtype: the gradient buffers' dtype,
  // float32, or bfloat16 for half their memory (the backward sums each group of parameters in
  // a float32 scratch and adds it into these buffers once: model/gradient_accumulator.h).
  explicit LlamaWeights(const ModelConfig& config, DType grad_dtype = DType::F32);
  LlamaWeights(const LlamaWeights&) = delete;
  LlamaWeights& operator=(const LlamaWeights&) = delete;

  // Allocates values and gradients on the backend and loads the values from a
  // model folder, checking every tensor's presence, dtype and shape against config.json.
  void load(const ModelFolder& folder, Backend& backend);
  // Allocates and fills with a deterministic random init (uniform, std 0.02; norms 1).
  void init_random(Backend& backend, uint64_t seed);
  void zero_grads(Backend& backend);
  // Values and gradients allocated (values uninitialised), gradients zeroed.
  void allocate(Backend& backend);

  const ModelConfig& config() const { return config_; }
  DType grad_dtype() const { return grad_dtype_; }
  std::vector<Parameter>& params() { return params_; }
  const std::vector<Parameter>& params() const { return params_; }
  Parameter& embed() { return params_[embed_]; }
  Parameter& final_norm() { return params_[final_norm_]; }
  // The output projection: lm_head.weight, or the embedding when tied.
  Parameter& lm_head() { return params_[lm_head_]; }
  Layer& layer(int64_t i) { return layers_[i]; }
  size_t num_elements() const;

 private:
  ModelConfig config_;
  DType grad_dtype_;
  std::vector<Parameter> params_;
  std::vector<Layer> layers_;
  size_t embed_ = 0, final_norm_ = 0, lm_head_ = 0;
};

}  // namespace ulysses
