// Rotary embedding frequencies, as transformers computes them: default, and the linear,
// dynamic, yarn and llama3 scalings (yarn's attention factor is ModelConfig::attention_scale's).
#pragma once
#include <vector>

#include "io/hf_config.h"

namespace ulysses {

// inv_freq[i] for i < head_dim/2, rounded to float32 like transformers' buffer. `length` is the
// sequence the frequencies serve (1 + its largest position id): only dynamic scaling reads it, and
// only past max_position_embeddings (below, its frequencies are the default ones).
std::vector<float> rope_inv_freq(const RopeConfig& rope, int64_t head_dim, int64_t length = 0);

// Whether rope_inv_freq depends on the sequence's length (the dynamic scaling).
inline bool rope_depends_on_length(const RopeConfig& rope) { return rope.type == "dynamic"; }

}  // namespace ulysses
