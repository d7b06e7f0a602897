#include "model/rope.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace ulysses {
namespace {

// YaRN (transformers' _compute_yarn_parameters): frequencies that turn fewer than beta_slow
// times over the pretrained context are interpolated (divided by factor), those that turn
// more than beta_fast times kept, with a linear ramp over the dimensions in between.
std::vector<float> yarn_inv_freq(const RopeConfig& rope, int64_t dim, const std::vector<float>& extrapolated) {
  const double base = rope.theta, ctx = static_cast<double>(rope.original_max_position_embeddings);
  const double pi = 3.14159265358979323846;
  // The dimension at which a frequency turns `rotations` times over the pretrained context.
  const auto correction_dim = [&](double rotations) {
    return static_cast<double>(dim) * std::log(ctx / (rotations * 2.0 * pi)) / (2.0 * std::log(base));
  };
  double low = correction_dim(rope.beta_fast), high = correction_dim(rope.beta_slow);
  if (rope.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // as transformers: no zero-width ramp
  const float factor = static_cast<float>(rope.factor);
  std::vector<float> inv(extrapolated.size());
  for (size_t i = 0; i < inv.size(); ++i) {
    // transformers computes the ramp in float32.
    float ramp = (static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low);
    ramp = std::min(1.0f, std::max(0.0f, ramp));
    const float keep = 1.0f - ramp;  // the share of the extrapolated (unscaled) frequency
    const float pos_freq = std::pow(static_cast<float>(rope.theta), static_cast<float>(2 * i) / static_cast<float>(dim));
    const float interpolated = 1.0f / (factor * pos_freq);
    inv[i] = interpolated * (1.0f - keep) + extrapolated[i] * keep;
  }
  return inv;
}

}  // namespace

std::vector<float> rope_inv_freq(const RopeConfig& rope, int64_t head_dim, int64_t length) {
  ULY_CHECK(head_dim > 0 && head_dim % 2 == 0, "rope: head_dim must be even, got " << head_dim);
  const int64_t half = head_dim / 2;
  float base = static_cast<float>(rope.theta);
  if (rope.type == "dynamic" && length > rope.original_max_position_embeddings) {
    ULY_CHECK(head_dim > 2, "rope: dynamic scaling needs head_dim > 2 (its exponent is dim / (dim - 2)), got "
                                << head_dim);
    // transformers' _compute_dynamic_ntk_parameters, in its float32 tensor arithmetic:
    // base * (factor * length / max_positions - (factor - 1)) ** (dim / (dim - 2)).
    const float factor = static_cast<float>(rope.factor);
    const float stretch = factor * static_cast<float>(length) /
                              static_cast<float>(rope.original_max_position_embeddings) -
                          static_cast<float>(rope.factor - 1.0);
    const double expo = static_cast<double>(head_dim) / static_cast<double>(head_dim - 2);
    base = base * std::pow(stretch, static_cast<float>(expo));
  }
  // transformers: 1 / base ** (arange(0, dim, 2).float() / dim), in float32.
  std::vector<float> inv(half);
  for (int64_t i = 0; i < half; ++i) {
    const float expo = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    inv[i] = 1.0f / std::pow(base, expo);
  }
  if (rope.type == "default" || rope.type == "dynamic") return inv;
  if (rope.type == "linear") {  // positions divided by factor, i.e. every frequency
    for (float& f : inv) f /= static_cast<float>(rope.factor);
    return inv;
  }
  if (rope.type == "yarn") return yarn_inv_freq(rope, head_dim, inv);
  ULY_CHECK(rope.type == "llama3", "rope: unsupported rope type '" << rope.type << "' (supported: "
                                                                   << kSupportedRopeTypes << ")");
  // llama3: long wavelengths are divided by `factor`, short ones kept, and the
  // band in between interpolated smoothly.
  const float factor = static_cast<float>(rope.factor);
  const float low = static_cast<float>(rope.low_freq_factor), high = static_cast<float>(rope.high_freq_factor);
  const float old_ctx = static_cast<float>(rope.original_max_position_embeddings);
  const float low_wavelen = old_ctx / low, high_wavelen = old_ctx / high;
  const float pi = 3.14159265358979323846f;
  for (int64_t i = 0; i < half; ++i) {
    const float wavelen = 2.0f * pi / inv[i];
    float f = wavelen > low_wavelen ? inv[i] / factor : inv[i];
    const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    if (medium) {
      const float smooth = (old_ctx / wavelen - low) / (high - low);
      f = (1.0f - smooth) * f / factor + smooth * f;
    }
    inv[i] = f;
  }
  return inv;
}

}  // namespace ulysses
