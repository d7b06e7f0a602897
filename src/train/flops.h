// FLOP counts of a training step, as ../shared/DESIGN.md §5 defines them.
#pragma once
#include <cstdint>
#include <vector>

#include "io/hf_config.h"

namespace ulysses {

// Non-embedding matmul parameters: q, k, v, o, gate, up, down of every layer, and lm_head.
double dense_matmul_params(const ModelConfig& c);

struct StepFlops {
  double alst = 0;    // (m_d N_dense T + m_a S² H d L), m_d = 8 / m_a = 16 with recompute, 6 / 12 without
  double useful = 0;  // 6 N_dense T + 7 S² H d L (causal attention, no recompute): the MFU numerator
};
// seq_lens: the length of every sequence in the step (tokens T = their sum). With a sliding
// window the S^2 terms count the pairs the window leaves (2 (W S - W (W - 1) / 2) for W < S).
// lora_params > 0 (LoRA, the base frozen): the base's weight-gradient GEMMs are not run, so its
// matmuls count m_d - 2 (4, or 6 with recompute) and the adapters' N_lora parameters m_d (6 or 8);
// useful: 4 N_dense T + 6 N_lora T + 7 S² H d L.
StepFlops step_flops(const ModelConfig& c, const std::vector<int64_t>& seq_lens, bool recompute,
                     double lora_params = 0);

constexpr double kH100PeakBf16Flops = 989e12;  // dense bf16, H100/H200 SXM

}  // namespace ulysses
