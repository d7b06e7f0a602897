// Rotary embedding frequencies, as transformers computes them: default, and the linear,
// yarn and llama3 scalings (yarn's attention factor is ModelConfig::attention_scale's).
#pragma once
#include <vector>

#include "io/hf_config.h"

namespace ulysses {

// inv_freq[i] for i < head_dim/2, rounded to float32 like transformers' buffer.
std::vector<float> rope_inv_freq(const RopeConfig& rope, int64_t head_dim);

}  // namespace ulysses
