#include "train/flops.h"

namespace ulysses {

double dense_matmul_params(const ModelConfig& c) {
  const double D = static_cast<double>(c.hidden_size);
  const double per_layer = D * c.q_dim() * 2 + D * c.kv_dim() * 2 + 3.0 * D * c.intermediate_size;
  return per_layer * c.num_hidden_layers + D * c.vocab_size;
}

StepFlops step_flops(const ModelConfig& c, const std::vector<int64_t>& seq_lens, bool recompute,
                     double lora_params) {
  const double n = dense_matmul_params(c);
  const double hdl = static_cast<double>(c.num_attention_heads) * c.head_dim * c.num_hidden_layers;
  double tokens = 0, s2 = 0;
  const double W = static_cast<double>(c.sliding_window);
  for (int64_t s : seq_lens) {
    const double S = static_cast<double>(s);
    tokens += S;
    // A sliding window shorter than the sequence: the query-key pairs it sees, W S - W (W - 1) / 2,
    // as a causal sequence's S^2 / 2 are counted (S^2).
    s2 += W > 0 && W < S ? 2.0 * (W * S - W * (W - 1.0) / 2.0) : S * S;
  }
  StepFlops f;
  const double m_d = recompute ? 8.0 : 6.0;
  const double matmuls = lora_params > 0 ? (m_d - 2.0) * n + m_d * lora_params : m_d * n;
  f.alst = matmuls * tokens + (recompute ? 16.0 : 12.0) * s2 * hdl;
  f.useful = (lora_params > 0 ? 4.0 * n + 6.0 * lora_params : 6.0 * n) * tokens + 7.0 * s2 * hdl;
  return f;
}

}  // namespace ulysses
