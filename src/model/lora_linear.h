// A LoRA adapter's share of a projection, written against the Backend ops alone (the CUDA
// backend runs it as it is): forward y += s (x A^T) B^T, backward dx += s (dy B) A and the
// adapter's gradients dB += s dy^T (x A^T), dA += s (dy B)^T x. rows [r0, r1) of the output
// (B's rows) for a chunk of heads; the whole output by default. x A^T ([N, r], small) is
// recomputed in the backward rather than kept.
#pragma once
#include <cstdint>

#include "backend/backend.h"
#include "model/lora_weights.h"

namespace ulysses {

struct OutputRows {
  int64_t r0 = 0, r1 = -1;  // -1: to the end
};

// y: [N, r1 - r0] (+)= s (x A^T) B[r0:r1]^T; x: [N, in].
void lora_forward(Backend& be, Tensor& y, const Tensor& x, const LoraAdapter& ad, double s, OutputRows rows = {});

// dy: [N, r1 - r0] the gradient of those outputs; dx: [N, in] += its share; the adapter's
// gradients added into (whole float32 buffers, replicated).
void lora_backward(Backend& be, Tensor& dx, const LoraAdapter& ad, const Tensor& dy, const Tensor& x, double s,
                   OutputRows rows = {});

}  // namespace ulysses
