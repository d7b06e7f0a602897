// CPU reference ops: plain, multithreaded (OpenMP), templated on the element
// type so that tests can run them in float64 against finite differences.
// Every op has a CUDA twin in backend/cuda/ with the same name and argument
// order (device pointers, plus a trailing stream).
//
// Conventions: row-major, outputs first, shapes in the comments; "accumulate"
// means the op adds into its output (gradients of shared weights), "write"
// means it overwrites it.
#pragma once
#include <cstdint>

#include "core/activation.h"

namespace ulysses::cpu {

// ---- embedding ----------------------------------------------------------------
// out: [N, D] (write); ids: [N]; table: [V, D]. Ids must be in [0, V) (checked by the caller).
template <class T>
void embedding_forward(T* out, const int32_t* ids, const T* table, int64_t N, int64_t D);
// dtable: [V, D] (accumulate); dout: [N, D]; ids: [N].
template <class T>
void embedding_backward(T* dtable, const T* dout, const int32_t* ids, int64_t N, int64_t D);

// ---- RMSNorm: y = w * x / sqrt(mean(x^2) + eps) ----------------------------------
// y: [N, D] (write); rstd: [N] (write, 1/sqrt(mean(x^2)+eps)); x: [N, D]; w: [D].
template <class T>
void rmsnorm_forward(T* y, T* rstd, const T* x, const T* w, int64_t N, int64_t D, double eps);
// dx: [N, D] (write, or add to it with accumulate_dx); dw: [D] (accumulate); dy, x: [N, D]; w: [D];
// rstd: [N] from forward.
template <class T>
void rmsnorm_backward(T* dx, T* dw, const T* dy, const T* x, const T* w, const T* rstd, int64_t N, int64_t D,
                      bool accumulate_dx = false);

// ---- bias of a linear layer ---------------------------------------------------------
// y: [N, n] += b: [n] on every row; db: [n] += the sum of dy: [N, n] over the rows.
template <class T>
void bias_add(T* y, const T* b, int64_t N, int64_t n);
template <class T>
void bias_backward(T* db, const T* dy, int64_t N, int64_t n);

// ---- rotary embedding (Hugging Face "rotate_half" layout) --------------------------
// For i < d/2 with angle a = float(pos) * inv_freq[i] evaluated in float32 (as
// transformers does): out[i] = x[i] cos a - x[i + d/2] sin a,
// out[i + d/2] = x[i + d/2] cos a + x[i] sin a.
// out, x: [N, H, d] (out may alias x); pos: [N] global positions; inv_freq: [d/2].
template <class T>
void rope_forward(T* out, const T* x, const int32_t* pos, const float* inv_freq, int64_t N, int64_t H, int64_t d);
// The transpose (rotation by -a). dx, dout: [N, H, d] (dx may alias dout).
template <class T>
void rope_backward(T* dx, const T* dout, const int32_t* pos, const float* inv_freq, int64_t N, int64_t H, int64_t d);

// ---- causal attention with GQA and packed documents -----------------------------
// Query i sees keys j with doc_start[i] <= j <= i, where doc_start[i] is the index
// of the first token of i's document (so documents never attend to each other).
// q, out: [S, H, d]; k, v: [S, Hkv, d], H % Hkv == 0 (query head h uses kv head
// h / (H / Hkv)); doc_start: [S]; lse: [H, S] (write) the natural-log
// log-sum-exp of each row's scaled scores, for backward and for merging partial results.
template <class T>
void attention_forward(T* out, T* lse, const T* q, const T* k, const T* v, const int32_t* doc_start,
                       int64_t S, int64_t H, int64_t Hkv, int64_t d, double scale);
// dq: [S, H, d] (write); dk, dv: [S, Hkv, d] (write); dout, out: [S, H, d]; lse: [H, S].
template <class T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* out, const T* lse, const T* q, const T* k,
                        const T* v, const int32_t* doc_start, int64_t S, int64_t H, int64_t Hkv, int64_t d,
                        double scale);

// Block-offset form (ring attention): q rows are global tokens q0 .. q0 + Sq - 1, k/v rows
// global tokens k0 .. k0 + Sk - 1, and doc_start: [S_global] is the whole row's. Query q0 + i
// sees key k0 + j when doc_start[q0 + i] <= k0 + j <= q0 + i. q, out: [Sq, H, d];
// k, v: [Sk, Hkv, d]; lse: [H, Sq] (write); a row that sees no key of the block gets
// out = 0 and lse = -inf. attention_forward is the block with Sq = Sk = S, q0 = k0 = 0.
template <class T>
void attention_forward_block(T* out, T* lse, const T* q, const T* k, const T* v, const int32_t* doc_start,
                             int64_t Sq, int64_t Sk, int64_t q0, int64_t k0, int64_t H, int64_t Hkv, int64_t d,
                             double scale);
// The block's share of the gradients: out, lse: [Sq, H, d], [H, Sq] are the rows' merged
// results over all their keys (so that P = exp(s - lse) is the full softmax).
// dq: [Sq, H, d]; dk, dv: [Sk, Hkv, d] (write).
template <class T>
void attention_backward_block(T* dq, T* dk, T* dv, const T* dout, const T* out, const T* lse, const T* q,
                              const T* k, const T* v, const int32_t* doc_start, int64_t Sq, int64_t Sk, int64_t q0,
                              int64_t k0, int64_t H, int64_t Hkv, int64_t d, double scale);
// Log-sum-exp merge of a block's result into a running one over the same S query rows:
// acc: [S, H, d], acc_lse: [H, S] (read and write; acc_lse = -inf means empty so far);
// out: [S, H, d], lse: [H, S] the block's.
template <class A, class T>
void attention_merge(A* acc, A* acc_lse, const T* out, const T* lse, int64_t S, int64_t H, int64_t d);

// ---- gated activation: h = act(gate) * up (core/activation.h) ----------------------
// h, gate, up: [n] (h write).
template <class T>
void gated_activation_forward(T* h, const T* gate, const T* up, int64_t n, Activation act);
// dgate, dup: [n] (write); dh, gate, up: [n].
template <class T>
void gated_activation_backward(T* dgate, T* dup, const T* dh, const T* gate, const T* up, int64_t n, Activation act);

// ---- cross-entropy over a tile of logits ------------------------------------------
// logits, dlogits: [N, V] (dlogits write, may alias logits); targets: [N], -100 = ignored;
// losses: [N] (write) -log softmax(logits)[target], 0 for ignored rows;
// dlogits = (softmax - onehot(target)) * grad_scale, all-zero rows for ignored targets.
// Targets outside [0, V) other than -100 are rejected by the caller.
template <class T>
void cross_entropy_forward_backward(T* dlogits, T* losses, const T* logits, const int32_t* targets, int64_t N,
                                    int64_t V, double grad_scale);

// ---- dense algebra ----------------------------------------------------------------
// C[M, N] = alpha * op(A) · op(B) + beta * C, op(X) = X or X^T; A is [M, K] or [K, M]
// (trans_a), B is [K, N] or [N, K] (trans_b). BLAS underneath.
template <class T>
void matmul(T* C, const T* A, const T* B, int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b, double alpha,
            double beta);
// y = a + b (y may alias either); n elements.
template <class T>
void add(T* y, const T* a, const T* b, int64_t n);
// y += alpha * x; n elements.
template <class T>
void axpy(T* y, const T* x, double alpha, int64_t n);

// ---- optimizer ----------------------------------------------------------------
// AdamW (torch.optim.AdamW) on master weights; g = grad * grad_scale:
//   master *= 1 - lr wd; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
//   master -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps); weight = master.
// master, m, v, weight: [n] (weight may alias master); grad: [n] G = T, or Bf16 (a bfloat16 gradient
// buffer, read into T).
template <class T, class G = T>
void adamw_step(T* master, T* m, T* v, T* weight, const G* grad, int64_t n, double lr, double beta1, double beta2,
                double eps, double weight_decay, int64_t step, double grad_scale);
// Sum of squares in double; T = float, double or Bf16 (a bfloat16 gradient buffer).
template <class T>
double sum_squares(const T* x, int64_t n);

// ---- bfloat16 gradient buffers --------------------------------------------------
// The raw bits of a bfloat16 (core/dtype.h's bf16_to_float / float_to_bf16).
struct Bf16 {
  uint16_t bits;
};
// y += alpha * x summed in float32, rounded to bfloat16 once (the CUDA kernel's arithmetic).
void axpy_bf16(Bf16* y, const float* x, double alpha, int64_t n);

// dst: [N, Hd, d], src: [N, Hs, d]: dst[:, dst_head0 + i] = (or +=) src[:, src_head0 + i], i < n_heads.
template <class T>
void copy_heads(T* dst, int64_t Hd, int64_t dst_head0, const T* src, int64_t Hs, int64_t src_head0, int64_t n_heads,
                int64_t N, int64_t d, bool accumulate);

}  // namespace ulysses::cpu
