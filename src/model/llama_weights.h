// The parameters of a decoder model (ModelConfig says which a layer has), named as in
// Hugging Face's named_parameters(),
// with a gradient buffer for each.
#pragma once
#include <array>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "io/hf_config.h"
#include "io/model_folder.h"
#include "model/parameter_set.h"

namespace ulysses {

class LlamaWeights : public ParameterSet {
 public:
  // One decoder layer's parameters; those the architecture lacks (ModelConfig: biases, q/k
  // norms) are null.
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
    Parameter* q_bias = nullptr;  // [H*d]    (qkv_bias)
    Parameter* k_bias = nullptr;  // [Hkv*d]
    Parameter* v_bias = nullptr;  // [Hkv*d]
    Parameter* o_bias = nullptr;  // [D]      (o_bias)
    Parameter* q_norm = nullptr;  // [d]      (qk_norm)
    Parameter* k_norm = nullptr;  // [d]
    // Every parameter the layer has, in the order of the safetensors names.
    std::vector<Parameter*> all() const {
      std::vector<Parameter*> v{input_norm, wq, wk, wv, wo, post_norm, w_gate, w_up, w_down};
      for (Parameter* p : {q_bias, k_bias, v_bias, o_bias, q_norm, k_norm})
        if (p) v.push_back(p);
      return v;
    }
  };

  // Names and shapes from the config; no memory yet. grad_dtype: the gradient buffers' dtype,
  // float32, or bfloat16 for half their memory (the backward sums each group of parameters in
  // a float32 scratch and adds it into these buffers once: model/gradient_accumulator.h).
  explicit LlamaWeights(const ModelConfig& config, DType grad_dtype = DType::F32, ParameterSharding sharding = {});
  LlamaWeights(const LlamaWeights&) = delete;
  LlamaWeights& operator=(const LlamaWeights&) = delete;

  // Allocates values (or shards) and gradients on the backend and loads the values from a
  // model folder, checking every tensor's presence, dtype and shape against config.json.
  void load(const ModelFolder& folder, Backend& backend);
  // Allocates and fills with a deterministic random init (uniform, std 0.02; norms 1; biases 0).
  void init_random(Backend& backend, uint64_t seed);

  const ModelConfig& config() const { return config_; }
  Parameter& embed() { return params()[embed_]; }
  Parameter& final_norm() { return params()[final_norm_]; }
  // The output projection: lm_head.weight, or the embedding when tied.
  Parameter& lm_head() { return params()[lm_head_]; }
  Layer& layer(int64_t i) { return layers_[i]; }

 private:
  ModelConfig config_;
  std::vector<Layer> layers_;
  size_t embed_ = 0, final_norm_ = 0, lm_head_ = 0;
};

}  // namespace ulysses
