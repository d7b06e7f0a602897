#include "train/flops.h"

namespace ulysses {

double dense_matmul_params(const ModelConfig& c) {
  const double D = static_cast<double>(c.hidden_size);
  const double per_layer = D * c.q_dim() * 2 + D * c.kv_dim() * 2 + 3.0 * D * c.intermediate_size;
  return per_layer * c.num_hidden_layers + D * c.vocab_size;
}

StepFlops step_flops(const ModelConfig& c, const std::vector<int64_t>& seq_lens, bool recompute) {
  const double n = dense_matmul_params(c);
  const double hdl = static_cast<double>(c.num_attention_heads) * c.head_dim * c.num_hidden_layers;
  double tokens = 0, s2 = 0;
  for (int64_t s : seq_lens) {
    tokens += static_cast<double>(s);
    s2 += static_cast<double>(s) * static_cast<double>(s);
  }
  StepFlops f;
  f.alst = (recompute ? 8.0 : 6.0) * n * tokens + (recompute ? 16.0 : 12.0) * s2 * hdl;
  f.useful = 6.0 * n * tokens + 7.0 * s2 * hdl;
  return f;
}

}  // namespace ulysses
