// Rotary embedding parameters as config.json states them: the 4.x `rope_scaling` block
// (theta at the top level) or the 5.x `rope_parameters` block (theta inside), for the
// scalings transformers computes: default, linear, dynamic, yarn, llama3.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace ulysses {

struct RopeConfig {
  std::string type = "default";  // "default", "linear", "dynamic", "yarn" or "llama3"
  double theta = 10000.0;
  double factor = 1.0;  // linear, dynamic, yarn, llama3: how far the context is stretched
  // llama3: the band of wavelengths between original/low and original/high is interpolated.
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  // llama3 and yarn: the context the model was pretrained with. dynamic: max_position_embeddings,
  // the length past which transformers raises the base (it reads no original_... field for it).
  int64_t original_max_position_embeddings = 8192;
  // yarn: the ramp between extrapolated and interpolated frequencies (beta_fast/slow rotations),
  // whether its ends are rounded to whole dimensions, and the factor applied to cos and sin
  // (stated, or from mscale / mscale_all_dim, or 0.1 ln(factor) + 1).
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  bool truncate = true;
  double attention_factor = 1.0;

  // The parameters that change the maths, for the run fingerprint and the write-back
  // (default type: {}).
  nlohmann::json scaling_fields() const;
};

// The supported types, for messages.
constexpr const char* kSupportedRopeTypes = "default, linear, dynamic, yarn, llama3";

// Reads config.json's RoPE fields (either layout) into a RopeConfig; errors name the source and
// the field. max_position_embeddings and a top-level original_max_position_embeddings supply
// yarn's defaults as transformers takes them.
RopeConfig parse_rope(const nlohmann::json& config, const std::string& source, int64_t max_position_embeddings);
// Writes rope into the config JSON j in the layout j already uses (5.x when it has
// rope_parameters, else 4.x), keeping the key spellings and unknown fields of the block.
void write_rope(const RopeConfig& rope, nlohmann::json& j);

}  // namespace ulysses
