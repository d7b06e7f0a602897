#include "model/rope.h"

#include <cmath>

#include "core/error.h"

namespace ulysses {

std::vector<float> rope_inv_freq(const RopeConfig& rope, int64_t head_dim) {
  ULY_CHECK(head_dim > 0 && head_dim % 2 == 0, "rope: head_dim must be even, got " << head_dim);
  const int64_t half = head_dim / 2;
  // transformers: 1 / base ** (arange(0, dim, 2).float() / dim), in float32.
  std::vector<float> inv(half);
  for (int64_t i = 0; i < half; ++i) {
    const float expo = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    inv[i] = 1.0f / std::pow(static_cast<float>(rope.theta), expo);
  }
  if (rope.type == "default") return inv;
  ULY_CHECK(rope.type == "llama3", "rope: unsupported rope type '" << rope.type << "' (supported: default, llama3)");
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
