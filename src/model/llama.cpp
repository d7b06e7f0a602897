#include "model/llama.h"

#include <algorithm>
#include <cmath>

#include "backend/profile_scope.h"
#include "model/attention_inputs.h"
#include "model/checkpoint_store.h"
#include "model/lora_linear.h"
#include "model/rope.h"

namespace ulysses {

// Everything a layer's backward needs. With checkpointing only x_in survives
// the forward pass; the rest is recomputed layer by layer in backward.
struct LlamaModel::LayerActs {
  Tensor x_in, xn1, rstd1, q, k, v, attn, x_mid, xn2, rstd2;
  QkNormSaved qk;  // q/k before their per-head norms (qk_norm only)
  Tensor gate, up, h;  // [N, F], kept only when the MLP is not tiled
  AttentionSaved saved;
  std::vector<AttentionSaved> chunks;  // --head-chunks: per chunk, lse (and out where it is kept)
};

namespace {

// The sequence attention for one chunk of heads (all heads without --head-chunks), after
// checking the chunking against the Ulysses degree: make(H / chunks, Hkv / chunks).
template <class Make>
std::unique_ptr<SequenceAttention> chunked_attention(Backend&, const ModelConfig& c, const StepOptions& o,
                                                     int64_t ulysses_degree, Make make) {
  check_head_chunks(c.num_attention_heads, c.num_key_value_heads, ulysses_degree, o.head_chunks);
  return make(c.num_attention_heads / o.head_chunks, c.num_key_value_heads / o.head_chunks);
}

}  // namespace

// With --keep-attention, each layer's attention output and log-sum-exp outlive the
// forward pass (in the attention's own layout), so that the recompute before the
// backward skips the attention kernel (2 of its 9 FLOP units with recompute).
struct LlamaModel::KeptAttention {
  std::vector<Tensor> out, lse;  // one per head chunk
};

LlamaModel::LlamaModel(LlamaWeights& weights, Backend& backend, Communicator& sp_group, StepOptions options)
    : LlamaModel(weights, backend,
                 chunked_attention(backend, weights.config(), options, sp_group.size(),
                                   [&](int64_t h, int64_t hkv) {
                                     return make_sequence_attention(backend, sp_group, h, hkv,
                                                                    weights.config().head_dim,
                                                                    weights.config().attention_scale());
                                   }),
                 options) {}

LlamaModel::LlamaModel(LlamaWeights& weights, Backend& backend, const ProcessMesh& mesh, StepOptions options)
    : LlamaModel(weights, backend,
                 chunked_attention(backend, weights.config(), options, mesh.ulysses_size(),
                                   [&](int64_t h, int64_t hkv) {
                                     return make_sequence_attention(backend, mesh, h, hkv, weights.config().head_dim,
                                                                    weights.config().attention_scale());
                                   }),
                 options) {}

// `attention` must be built for H / head_chunks query and Hkv / head_chunks kv heads.
LlamaModel::LlamaModel(LlamaWeights& weights, Backend& backend, std::unique_ptr<SequenceAttention> attention,
                       StepOptions options)
    : w_(weights), be_(backend), options_(options), c_(weights.config()), grads_(weights, backend, options.overlap_communication),
      params_(weights, backend, options.overlap_communication), attention_(std::move(attention)) {
  ULY_CHECK(options_.grad_dtype == w_.grad_dtype(),
            "the step options ask for " << dtype_name(options_.grad_dtype) << " gradients but the weights hold "
                                        << dtype_name(w_.grad_dtype()) << " ones (make LlamaWeights with the "
                                        << "options' grad_dtype)");
  check_head_chunks(c_.num_attention_heads, c_.num_key_value_heads, 1, options_.head_chunks);
  ULY_CHECK(options_.mlp_tiles >= 0, "--tiled-mlp must be >= 1 (or given without a value), got " << options_.mlp_tiles);
  ULY_CHECK(options_.loss_tile_tokens >= 0, "--tiled-loss must be >= 0, got " << options_.loss_tile_tokens);
  inv_freq_ = be_.empty({c_.head_dim / 2}, DType::F32);
  set_rope_length(0);
}

// Dynamic RoPE's frequencies follow the sequence (1 + its largest position id); the others are
// made once. Rebuilt only when the length changes, so fixed-length rows upload them once.
void LlamaModel::set_rope_length(int64_t length) {
  if (inv_freq_length_ != 0 && (!rope_depends_on_length(c_.rope) || length == inv_freq_length_)) return;
  const std::vector<float> inv = rope_inv_freq(c_.rope, c_.head_dim, length);
  be_.copy(inv_freq_, Tensor::borrow(const_cast<float*>(inv.data()), {static_cast<int64_t>(inv.size())}, DType::F32));
  inv_freq_length_ = std::max<int64_t>(length, 1);
}

LlamaModel::~LlamaModel() = default;

int64_t LlamaModel::next_forward_group(int64_t l) const {
  return l + 1 < c_.num_hidden_layers ? l + 1 : ParameterStore::kHead;
}

void LlamaModel::embed(const Tensor& ids, Tensor& x) {
  ParameterStore::Held held(params_, ParameterStore::kEmbedding);
  params_.prefetch(next_forward_group(-1));
  ProfileScope prof(be_, "embedding");
  be_.embedding_forward(x, ids, w_.embed().value);
}

int64_t LlamaModel::first_backward_group(int64_t l, int64_t segment) const {
  if (l < 0) return ParameterStore::kNone;
  const int64_t K = std::max<int64_t>(1, options_.checkpoint_segment);
  return options_.checkpoint && l < segment ? l / K * K : l;
}

int64_t LlamaModel::mlp_tile_tokens(int64_t N) const {
  // 0 = ALST's default: ceil(N / hidden) tiles, so a tile's [T, F] intermediates
  // are about the size of the [N, D] hidden state.
  const int64_t tiles = options_.mlp_tiles > 0 ? options_.mlp_tiles : (N + c_.hidden_size - 1) / c_.hidden_size;
  const int64_t t = std::max<int64_t>(1, std::min(tiles, N));
  return (N + t - 1) / t;
}

void LlamaModel::attach_lora(LoraWeights& lora) {
  ULY_CHECK(w_.frozen(), "LoRA trains the adapters only: the base weights must be frozen (ParameterSet::freeze "
                         "before they are allocated)");
  ULY_CHECK(!w_.weights_sharded() && !w_.grads_sharded(),
            "LoRA with ZeRO stage 2 or 3 is not supported yet (the adapters are replicated): use zero 0");
  lora_ = &lora;
}

void LlamaModel::linear(Tensor& y, const Tensor& x, const Parameter& w, const LoraAdapter* ad) {
  be_.matmul(y, x, w.value, false, true);
  if (ad) lora_forward(be_, y, x, *ad, lora_->scaling());
}

// dx (=|+=) dy W; dW += dy^T x unless the weights are frozen; the adapter's share and gradients.
void LlamaModel::linear_backward(Tensor& dx, Parameter& w, const Tensor& dy, const Tensor& x, bool accumulate_dx,
                                 const LoraAdapter* ad) {
  be_.matmul(dx, dy, w.value, false, false, 1.0, accumulate_dx ? 1.0 : 0.0);
  if (!grads_.frozen()) {
    double beta = 1.0;
    Tensor& dw = grads_.first_write(w, beta);  // beta 0: the step's first contribution, nothing to add to
    be_.matmul(dw, dy, x, true, false, 1.0, beta);
  }
  if (ad) lora_backward(be_, dx, *ad, dy, x, lora_->scaling());
}

// x_out undefined: the recompute before a backward, which needs the layer's activations
// but not its output (so the MLP's down projection, and with a tiled MLP the MLP itself,
// which the tiled backward recomputes tile by tile, are skipped). kept: the attention's
// output saved in the forward pass, used instead of running the attention again.
void LlamaModel::layer_forward(int64_t l, const Tensor& x_in, LayerActs& a, Tensor& x_out,
                               const KeptAttention* kept) {
  LlamaWeights::Layer& L = w_.layer(l);
  const int64_t N = x_in.dim(0), D = c_.hidden_size, H = c_.num_attention_heads, d = c_.head_dim;
  const DType t = be_.act_dtype();
  a.x_in = x_in;
  ProfileScope prof(be_, "rmsnorm");
  a.xn1 = be_.empty({N, D}, t);
  a.rstd1 = be_.empty({N}, DType::F32);
  be_.rmsnorm_forward(a.xn1, a.rstd1, x_in, L.input_norm->value, c_.rms_norm_eps);
  if (options_.head_chunks > 1) {
    prof.end();
    attention_forward_chunked(l, a, kept);
  } else {
    prof.end();
    qkv_forward(be_, c_, L, HeadRange::all(c_), a.xn1, positions_, inv_freq_, a.q, a.k, a.v, &a.qk, lora_, l);
    prof.next("attention");
    a.attn = be_.empty({N, H, d}, t);
    if (kept) attention_->restore(a.attn, a.saved, a.q, a.k, a.v, docs_, kept->out[0], kept->lse[0]);
    else attention_->forward(a.attn, a.saved, a.q, a.k, a.v, docs_);
    a.attn = a.attn.reshape({N, H * d});
  }
  prof.next("o-projection");
  a.x_mid = be_.empty({N, D}, t);
  be_.matmul_add(a.x_mid, a.attn, L.wo->value, false, true, x_in);  // x_mid = x_in + attn Wo^T
  if (const LoraAdapter* ad = adapter(l, LoraTarget::O)) lora_forward(be_, a.x_mid, a.attn, *ad, lora_->scaling());
  if (L.o_bias) be_.bias_add(a.x_mid, L.o_bias->value);
  prof.end();
  mlp_forward(l, a.x_mid, a, x_out);
}

HeadRange LlamaModel::chunk_heads(int64_t c) const {
  const int64_t C = options_.head_chunks, h = c_.num_attention_heads / C, hkv = c_.num_key_value_heads / C;
  return {c * h, h, c * hkv, hkv};
}

void LlamaModel::attention_forward_chunked(int64_t l, LayerActs& a, const KeptAttention* kept) {
  const int64_t N = a.xn1.dim(0), H = c_.num_attention_heads, d = c_.head_dim, C = options_.head_chunks, h = H / C;
  const DType t = be_.act_dtype();
  const bool keep_out = options_.checkpoint && options_.keep_attention;
  a.attn = be_.empty({N, H, d}, t);
  a.chunks.assign(static_cast<size_t>(C), AttentionSaved{});
  for (int64_t c = 0; c < C; ++c) {
    Tensor q, k, v;
    qkv_forward(be_, c_, w_.layer(l), chunk_heads(c), a.xn1, positions_, inv_freq_, q, k, v, nullptr, lora_, l);
    ProfileScope prof(be_, "attention");
    Tensor out = be_.empty({N, h, d}, t);
    AttentionSaved s;
    if (kept) attention_->restore(out, s, q, k, v, docs_, kept->out[c], kept->lse[c]);
    else attention_->forward(out, s, q, k, v, docs_);
    // Only the chunk's lse outlives it (and its output in the attention's layout, when kept): the
    // backward recomputes q, k, v and takes the output from a.attn.
    a.chunks[c].lse = s.lse;
    if (keep_out) a.chunks[c].out = s.out;
    s = AttentionSaved{};
    q = k = v = Tensor{};
    be_.copy_heads(a.attn, c * h, out, 0, h, false);
  }
  a.attn = a.attn.reshape({N, H * d});
}

// dxn1 (write): dL/d(normed input) from every chunk's q, k, v; the chunks' weight gradients added.
void LlamaModel::attention_backward_chunked(int64_t l, LayerActs& a, const Tensor& dattn, Tensor& dxn1,
                                            const Tensor& xn1) {
  LlamaWeights::Layer& L = w_.layer(l);
  const int64_t N = dattn.dim(0), H = c_.num_attention_heads, d = c_.head_dim, C = options_.head_chunks, h = H / C,
                hkv = c_.num_key_value_heads / C;
  const DType t = be_.act_dtype();
  const Tensor attn = a.attn.reshape({N, H, d}), dout_all = dattn.reshape({N, H, d});
  for (int64_t c = 0; c < C; ++c) {
    const HeadRange r = chunk_heads(c);
    Tensor q, k, v;
    QkNormSaved qk;
    qkv_forward(be_, c_, L, r, xn1, positions_, inv_freq_, q, k, v, &qk, lora_, l);
    ProfileScope prof(be_, "attention");
    AttentionSaved& s = a.chunks[c];
    Tensor out;
    if (!s.out.defined()) {
      out = be_.empty({N, h, d}, t);
      be_.copy_heads(out, 0, attn, c * h, h, false);
    }
    attention_->prepare_backward(s, q, k, v, out);
    q = k = v = out = Tensor{};
    Tensor dout = be_.empty({N, h, d}, t);
    be_.copy_heads(dout, 0, dout_all, c * h, h, false);
    Tensor dq = be_.empty({N, h, d}, t), dk = be_.empty({N, hkv, d}, t), dv = be_.empty({N, hkv, d}, t);
    attention_->backward(dq, dk, dv, dout, s, docs_);
    s = AttentionSaved{};
    dout = Tensor{};
    prof.end();
    qkv_backward(be_, grads_, c_, L, r, positions_, inv_freq_, dq, dk, dv, qk);
    qk = QkNormSaved{};
    prof.end();
    qkv_projections_backward(be_, grads_, c_, L, r, xn1, dq, dk, dv, dxn1, c > 0, lora_, l);
  }
  a.chunks.clear();
}

void LlamaModel::mlp_forward(int64_t l, const Tensor& x_mid, LayerActs& a, Tensor& x_out) {
  LlamaWeights::Layer& L = w_.layer(l);
  const int64_t N = x_mid.dim(0), D = c_.hidden_size, F = c_.intermediate_size;
  const DType t = be_.act_dtype();
  ProfileScope prof(be_, "rmsnorm");
  a.xn2 = be_.empty({N, D}, t);
  a.rstd2 = be_.empty({N}, DType::F32);
  be_.rmsnorm_forward(a.xn2, a.rstd2, x_mid, L.post_norm->value, c_.rms_norm_eps);
  prof.next("mlp");
  const int64_t T = mlp_tile_tokens(N);
  const bool tiled = T < N;
  const bool recompute = !x_out.defined();
  if (recompute && tiled) return;  // mlp_backward recomputes each tile from xn2
  for (int64_t b = 0; b < N; b += T) {
    const int64_t e = std::min(N, b + T);
    MemTagScope tag(be_.pools(), MemTag::MlpIntermediate);
    Tensor gate = be_.empty({e - b, F}, t), up = be_.empty({e - b, F}, t), h = be_.empty({e - b, F}, t);
    const Tensor xn = a.xn2.slice(b, e);
    linear(gate, xn, *L.w_gate, adapter(l, LoraTarget::Gate));
    linear(up, xn, *L.w_up, adapter(l, LoraTarget::Up));
    be_.gated_activation_forward(h, gate, up, c_.hidden_act);
    if (!recompute) {
      Tensor out = x_out.slice(b, e);
      be_.matmul_add(out, h, L.w_down->value, false, true, x_mid.slice(b, e));  // x_out = x_mid + h Wdown^T
      if (const LoraAdapter* ad = adapter(l, LoraTarget::Down)) lora_forward(be_, out, h, *ad, lora_->scaling());
    }
    if (!tiled) {
      a.gate = gate;
      a.up = up;
      a.h = h;
    }
  }
}

// d_mid holds dL/dx_out on entry and dL/dx_mid on exit.
void LlamaModel::mlp_backward(int64_t l, LayerActs& a, Tensor& d_mid) {
  LlamaWeights::Layer& L = w_.layer(l);
  const int64_t N = d_mid.dim(0), D = c_.hidden_size, F = c_.intermediate_size;
  const DType t = be_.act_dtype();
  ProfileScope prof(be_, "mlp");
  Tensor dxn2 = be_.empty({N, D}, t);
  const int64_t T = mlp_tile_tokens(N);
  for (int64_t b = 0; b < N; b += T) {
    const int64_t e = std::min(N, b + T);
    const Tensor xn = a.xn2.slice(b, e);
    MemTagScope tag(be_.pools(), MemTag::MlpIntermediate);
    Tensor gate = a.gate, up = a.up, h = a.h;
    if (!gate.defined()) {  // tiled: recompute this tile
      gate = be_.empty({e - b, F}, t);
      up = be_.empty({e - b, F}, t);
      h = be_.empty({e - b, F}, t);
      linear(gate, xn, *L.w_gate, adapter(l, LoraTarget::Gate));
      linear(up, xn, *L.w_up, adapter(l, LoraTarget::Up));
      be_.gated_activation_forward(h, gate, up, c_.hidden_act);
    }
    const Tensor dy = d_mid.slice(b, e);
    Tensor dh = be_.empty({e - b, F}, t);
    linear_backward(dh, *L.w_down, dy, h, false, adapter(l, LoraTarget::Down));
    Tensor dgate = be_.empty({e - b, F}, t), dup = be_.empty({e - b, F}, t);
    be_.gated_activation_backward(dgate, dup, dh, gate, up, c_.hidden_act);
    Tensor dxn = dxn2.slice(b, e);
    linear_backward(dxn, *L.w_gate, dgate, xn, false, adapter(l, LoraTarget::Gate));
    linear_backward(dxn, *L.w_up, dup, xn, true, adapter(l, LoraTarget::Up));
  }
  prof.next("rmsnorm");
  // The residual branch's gradient is already in d_mid: the norm's gradient is added to it in one pass.
  be_.rmsnorm_backward(d_mid, grads_.target(*L.post_norm), dxn2, a.x_mid, L.post_norm->value, a.rstd2, true);
  // The MLP half's activations are spent: gone before the attention's backward (the layer's peak).
  a.x_mid = a.xn2 = a.rstd2 = a.gate = a.up = a.h = Tensor{};
}

void LlamaModel::layer_backward(int64_t l, LayerActs& a, Tensor& grad,
                                const std::function<void()>& after_attention) {
  LlamaWeights::Layer& L = w_.layer(l);
  const int64_t N = grad.dim(0), D = c_.hidden_size, H = c_.num_attention_heads, Hkv = c_.num_key_value_heads,
                d = c_.head_dim;
  const DType t = be_.act_dtype();
  // The normed input is rebuilt from x_in after the attention's backward (one cheap pass)
  // instead of being held through it: one [N, D] less at the layer's peak.
  a.xn1 = Tensor{};
  ProfileScope prof(be_, "mlp");
  Tensor d_mid = std::move(grad);  // becomes dL/dx_mid in place
  grad = Tensor{};
  mlp_backward(l, a, d_mid);
  prof.next("o-projection");
  Tensor dattn = be_.empty({N, H * d}, t);
  linear_backward(dattn, *L.wo, d_mid, a.attn, false, adapter(l, LoraTarget::O));
  if (L.o_bias) be_.bias_backward(grads_.target(*L.o_bias), d_mid);
  if (options_.head_chunks > 1) {
    prof.next("rmsnorm");
    Tensor xn1 = be_.empty({N, D}, t);
    be_.rmsnorm_forward(xn1, a.rstd1, a.x_in, L.input_norm->value, c_.rms_norm_eps);
    prof.end();
    Tensor dxn1 = be_.empty({N, D}, t);
    attention_backward_chunked(l, a, dattn, dxn1, xn1);
    a.attn = dattn = xn1 = Tensor{};
    if (after_attention) after_attention();
    prof.next("rmsnorm");
    be_.rmsnorm_backward(d_mid, grads_.target(*L.input_norm), dxn1, a.x_in, L.input_norm->value, a.rstd1, true);
    grad = std::move(d_mid);
    return;
  }
  a.attn = Tensor{};
  prof.next("attention");
  Tensor dq = be_.empty({N, H, d}, t), dk = be_.empty({N, Hkv, d}, t), dv = be_.empty({N, Hkv, d}, t);
  attention_->backward(dq, dk, dv, dattn.reshape({N, H, d}), a.saved, docs_);
  dattn = Tensor{};
  a.saved = AttentionSaved{};
  a.q = a.k = a.v = Tensor{};
  if (after_attention) after_attention();
  prof.next("rmsnorm");
  Tensor xn1 = be_.empty({N, D}, t);
  be_.rmsnorm_forward(xn1, a.rstd1, a.x_in, L.input_norm->value, c_.rms_norm_eps);
  prof.end();
  qkv_backward(be_, grads_, c_, L, HeadRange::all(c_), positions_, inv_freq_, dq, dk, dv, a.qk);
  a.qk = QkNormSaved{};
  prof.end();
  Tensor dxn1 = be_.empty({N, D}, t);
  qkv_projections_backward(be_, grads_, c_, L, HeadRange::all(c_), xn1, dq, dk, dv, dxn1, false, lora_, l);
  dq = dk = dv = Tensor{};
  prof.next("rmsnorm");
  be_.rmsnorm_backward(d_mid, grads_.target(*L.input_norm), dxn1, a.x_in, L.input_norm->value, a.rstd1, true);
  grad = std::move(d_mid);
}

// Final norm, lm_head and cross-entropy in tiles of tokens; the backward of
// each tile runs right after its forward, so [N, vocab] logits never exist whole.
double LlamaModel::head_forward_backward(const Tensor& x, const Tensor& targets, double grad_scale, Tensor& dx) {
  Parameter& norm = w_.final_norm();
  Parameter& head = w_.lm_head();
  const int64_t N = x.dim(0), D = c_.hidden_size, V = c_.vocab_size;
  const DType t = be_.act_dtype();
  ProfileScope prof(be_, "rmsnorm");
  Tensor xn = be_.empty({N, D}, t), rstd = be_.empty({N}, DType::F32);
  be_.rmsnorm_forward(xn, rstd, x, norm.value, c_.rms_norm_eps);
  prof.next("lm_head + loss");
  const bool backward = dx.defined();
  if (backward) grads_.open({&norm, &head});
  Tensor dxn = backward ? be_.empty({N, D}, t) : Tensor{};
  const int64_t T = options_.loss_tile_tokens > 0 ? std::min(options_.loss_tile_tokens, N) : N;
  // Every tile's token losses land in one buffer, summed once at the end: one read-back per
  // sequence, not one per tile.
  Tensor losses = be_.empty({N}, DType::F32, Pool::Working);
  for (int64_t b = 0; b < N; b += T) {
    const int64_t e = std::min(N, b + T);
    const Tensor xt = xn.slice(b, e);
    MemTagScope tag(be_.pools(), MemTag::Logits);
    Tensor logits = be_.empty({e - b, V}, t);
    linear(logits, xt, head);
    Tensor tile_losses = losses.slice(b, e);
    be_.cross_entropy_forward_backward(logits, tile_losses, logits, targets.slice(b, e), grad_scale);
    if (!backward) continue;
    Tensor dxt = dxn.slice(b, e);
    linear_backward(dxt, head, logits, xt, false);
  }
  prof.next("rmsnorm");
  if (backward) {
    be_.rmsnorm_backward(dx, grads_.target(norm), dxn, x, norm.value, rstd);
    grads_.close();
  }
  return be_.sum(losses);
}

// The shard's ids and targets are checked here, on the host, once per sequence: the
// device ops then read nothing back during the step.
void LlamaModel::begin_sequence(const SequenceShard& shard, Tensor& ids, Tensor& targets) {
  const int64_t V = c_.vocab_size;
  for (size_t i = 0; i < shard.ids.size(); ++i)
    ULY_CHECK(shard.ids[i] >= 0 && shard.ids[i] < V, "token id " << shard.ids[i] << " at local position " << i
                                                                  << " is outside the vocabulary [0, " << V
                                                                  << "); the tokenizer and the model's vocab_size disagree");
  for (size_t i = 0; i < shard.targets.size(); ++i)
    ULY_CHECK(shard.targets[i] == -100 || (shard.targets[i] >= 0 && shard.targets[i] < V),
              "target " << shard.targets[i] << " at local position " << i << " is outside the vocabulary [0, " << V
                        << ") and is not -100 (ignored)");
  auto upload = [&](const std::vector<int32_t>& v) {
    Tensor dev = be_.empty({static_cast<int64_t>(v.size())}, DType::I32);
    be_.copy(dev, Tensor::borrow(const_cast<int32_t*>(v.data()), {static_cast<int64_t>(v.size())}, DType::I32));
    return dev;
  };
  ids = upload(shard.ids);
  targets = upload(shard.targets);
  positions_ = upload(shard.positions);
  docs_ = make_documents(be_, shard.doc_start, c_.sliding_window);
  if (rope_depends_on_length(c_.rope)) {
    ULY_CHECK(shard.rope_length > 0, "dynamic RoPE: the sequence carries no length (1 + its largest position id)");
    set_rope_length(shard.rope_length);
  }
}

Tensor LlamaModel::run_layers(const Tensor& ids) {
  const int64_t N = ids.dim(0), D = c_.hidden_size;
  const DType t = be_.act_dtype();
  Tensor x = be_.empty({N, D}, t);
  embed(ids, x);
  for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
    ParameterStore::Held held(params_, l);
    params_.prefetch(next_forward_group(l));
    LayerActs acts;
    Tensor y = be_.empty({N, D}, t);
    layer_forward(l, x, acts, y);
    x = y;
  }
  return x;
}

void LlamaModel::end_sequence() {
  params_.drop_unused();
  positions_ = Tensor{};
  docs_ = Documents{};
}

double LlamaModel::forward_loss(const SequenceShard& shard) {
  Tensor ids, targets;
  begin_sequence(shard, ids, targets);
  const Tensor x = run_layers(ids);
  Tensor no_grad;
  double loss_sum = 0;
  {
    ParameterStore::Held held(params_, ParameterStore::kHead);
    loss_sum = head_forward_backward(x, targets, 0.0, no_grad);
  }
  end_sequence();
  return loss_sum;
}

Tensor LlamaModel::forward_hidden(const SequenceShard& shard) {
  Tensor ids, targets;
  begin_sequence(shard, ids, targets);
  Tensor x = run_layers(ids);
  end_sequence();
  return x;
}

double LlamaModel::forward_backward(const SequenceShard& shard, double grad_scale,
                                    const std::function<void(int64_t layer)>& layer_grads_done) {
  const int64_t N = shard.S_local(), D = c_.hidden_size, Lyr = c_.num_hidden_layers;
  const DType t = be_.act_dtype();
  Tensor ids, targets;
  begin_sequence(shard, ids, targets);

  Tensor x = be_.empty({N, D}, t);
  embed(ids, x);

  std::vector<LayerActs> acts(Lyr);
  std::vector<KeptAttention> kept(Lyr);
  const bool keep = options_.checkpoint && options_.keep_attention;
  CheckpointStore store(be_, Lyr, options_.offload_layers);
  // Segments of K layers; K = 1 keeps every layer's input (one-level checkpointing).
  const int64_t K = options_.checkpoint ? std::max<int64_t>(1, options_.checkpoint_segment) : 1;
  for (int64_t l = 0; l < Lyr; ++l) {
    ParameterStore::Held held(params_, l);
    params_.prefetch(next_forward_group(l));
    Tensor y = be_.empty({N, D}, t);
    if (options_.checkpoint && l % K == 0) store.put(l, x);
    layer_forward(l, x, acts[l], y);
    if (keep) {  // into the checkpoint pool, so that the working set stays what it was
      const std::vector<AttentionSaved> one{acts[l].saved};
      for (const AttentionSaved& sv : options_.head_chunks > 1 ? acts[l].chunks : one) {
        kept[l].out.push_back(be_.empty(sv.out.shape(), sv.out.dtype(), Pool::Checkpoints));
        kept[l].lse.push_back(be_.empty(sv.lse.shape(), sv.lse.dtype(), Pool::Checkpoints));
        be_.copy(kept[l].out.back(), sv.out);
        be_.copy(kept[l].lse.back(), sv.lse);
      }
    }
    if (options_.checkpoint) acts[l] = LayerActs{};
    x = y;
  }
  store.finish_put();

  // The segment [s, s + K) whose layer inputs are on the device (checkpoints only).
  int64_t segment = Lyr;
  Tensor dx = be_.empty({N, D}, t);
  double loss_sum = 0;
  {
    ParameterStore::Held held(params_, ParameterStore::kHead);
    params_.prefetch(first_backward_group(Lyr - 1, segment));
    loss_sum = head_forward_backward(x, targets, grad_scale, dx);
  }
  x = Tensor{};

  std::vector<Tensor> inputs;
  for (int64_t l = Lyr - 1; l >= 0; --l) {
    if (options_.checkpoint) {
      if (l < segment) {  // the segment's input, then its forward once for the inputs of its other layers
        segment = l / K * K;
        inputs.assign(static_cast<size_t>(l - segment + 1), Tensor{});
        inputs[0] = store.take(segment);
        ProfileScope recompute(be_, "recompute", ProfileScope::AbsorbNested);
        for (int64_t j = segment; j < l; ++j) {
          ParameterStore::Held held(params_, j);
          params_.prefetch(j + 1);
          LayerActs scratch;
          inputs[j - segment + 1] = be_.empty({N, D}, t, Pool::Checkpoints);
          layer_forward(j, inputs[j - segment], scratch, inputs[j - segment + 1], keep ? &kept[j] : nullptr);
        }
      }
    }
    ParameterStore::Held held(params_, l);
    params_.prefetch(first_backward_group(l - 1, segment));
    if (options_.checkpoint) {
      // This layer's activations from its input.
      const Tensor x_in = inputs[l - segment];
      inputs[l - segment] = Tensor{};
      ProfileScope recompute(be_, "recompute", ProfileScope::AbsorbNested);
      Tensor no_output;
      layer_forward(l, x_in, acts[l], no_output, keep ? &kept[l] : nullptr);
      kept[l] = KeptAttention{};
    }
    // The next segment's checkpoint comes in during the segment's first layer's backward, after
    // its attention (the step's peak), overlapped with the rest of that layer.
    const bool first_of_segment = options_.checkpoint && l == segment;
    grads_.open(w_.layer(l).all());
    layer_backward(l, acts[l], dx, first_of_segment ? std::function<void()>([&] { store.prefetch(segment - K); })
                                                    : std::function<void()>());
    grads_.close();
    acts[l] = LayerActs{};
    if (layer_grads_done) layer_grads_done(l);
  }
  ProfileScope prof(be_, "embedding");
  if (!grads_.frozen()) {
    grads_.open({&w_.embed()});
    be_.embedding_backward(grads_.target(w_.embed()), dx, ids);
    grads_.close();
  }
  grads_.flush();
  w_.settle_grads(be_);
  end_sequence();
  return loss_sum;
}

}  // namespace ulysses
