// Backend's op entries: each checks its arguments with OpCheck (the shape
// relations and dtype rules both backends held before, now written once) and
// calls the backend's *_impl. What needs the data (ids in range, document
// starts) stays in the implementations; nothing here reads tensor memory.
#include "backend/op_checks.h"

#include <utility>

#include "backend/backend.h"

namespace ulysses {
namespace {

// "float32 or bfloat16": the data dtypes of a backend.
std::string data_dtypes(const Backend& be) {
  std::string s;
  for (DType dt : {DType::F32, DType::F64, DType::BF16, DType::F16})
    if (be.takes_data_dtype(dt)) s += (s.empty() ? "" : " or ") + std::string(dtype_name(dt));
  return s;
}

// Where the backend's tensors live, in words.
const char* where(const Backend& be) { return be.device() == Device::CPU ? "host" : "device"; }

}  // namespace

// ---- the rules ----

bool Backend::takes_data_dtype(DType dt) const {
  if (device() == Device::CPU) return dt == DType::F32 || dt == DType::F64;
  return dt == DType::F32 || dt == DType::BF16;
}

DType Backend::accumulator_dtype(DType dt) const { return device() == Device::CPU ? dt : DType::F32; }

// ---- OpCheck ----

void OpCheck::defined(const Tensor& t, const char* arg) const {
  ULY_CHECK(t.defined(), op_ << ": " << arg << " is an undefined tensor");
}

void OpCheck::held(const Tensor& t, const char* arg) const {
  defined(t, arg);
  ULY_CHECK(be_.holds(t), op_ << ": " << arg << " is " << t.describe() << "; the " << be_.name() << " backend takes "
                              << where(be_)
                              << " tensors (make them with backend.empty, fill them with backend.copy)");
}

void OpCheck::reached(const Tensor& t, const char* arg) const {
  defined(t, arg);
  ULY_CHECK(be_.holds(t) || t.device() == Device::CPU,
            op_ << ": " << arg << " is " << t.describe() << "; the " << be_.name() << " backend takes "
                << (be_.device() == Device::CPU ? "host" : "device or host") << " tensors");
}

DType OpCheck::data(const Tensor& t, const char* arg) const {
  held(t, arg);
  ULY_CHECK(be_.takes_data_dtype(t.dtype()), op_ << ": " << arg << " is " << t.describe() << ", expected "
                                                 << data_dtypes(be_) << " (the " << be_.name()
                                                 << " backend's data dtypes)");
  return t.dtype();
}

void OpCheck::dtype(const Tensor& t, DType want, const char* arg, const std::string& why) const {
  held(t, arg);
  ULY_CHECK(t.dtype() == want, op_ << ": " << arg << " is " << t.describe() << ", expected " << dtype_name(want)
                                   << (why.empty() ? "" : " (" + why + ")"));
}

void OpCheck::same_dtype(const Tensor& t, const Tensor& ref, const char* arg, const char* ref_arg) const {
  dtype(t, ref.dtype(), arg, std::string("the dtype of ") + ref_arg);
}

void OpCheck::accumulator(const Tensor& t, DType dt, const char* arg) const {
  dtype(t, be_.accumulator_dtype(dt), arg, std::string("the accumulator dtype for ") + dtype_name(dt) + " data");
}

void OpCheck::gradient(const Tensor& t, DType dt, const char* arg) const {
  held(t, arg);
  const DType acc = be_.accumulator_dtype(dt);
  ULY_CHECK(t.dtype() == acc || t.dtype() == DType::BF16,
            op_ << ": " << arg << " is " << t.describe() << ", expected a gradient buffer: " << dtype_name(acc)
                << " (the accumulator dtype for " << dtype_name(dt) << " data) or bfloat16");
}

void OpCheck::index(const Tensor& t, DType want, const char* arg) const {
  reached(t, arg);
  ULY_CHECK(t.dtype() == want, op_ << ": " << arg << " is " << t.describe() << ", expected " << dtype_name(want));
}

void OpCheck::like(const Tensor& t, const Tensor& ref, const char* arg, const char* ref_arg) const {
  held(t, arg);
  ULY_CHECK(t.dtype() == ref.dtype() && t.shape() == ref.shape(),
            op_ << ": " << arg << " is " << t.describe() << " but " << ref_arg << " is " << ref.describe()
                << "; they must match in shape and dtype");
}

void OpCheck::shape(const Tensor& t, const Shape& want, const char* arg) const {
  ULY_CHECK(t.shape() == want, op_ << ": " << arg << " is " << t.describe() << ", expected shape " << shape_str(want));
}

void OpCheck::ndim(const Tensor& t, int n, const char* arg, const char* layout) const {
  ULY_CHECK(t.ndim() == n, op_ << ": " << arg << " is " << t.describe() << ", expected " << n << "-D " << layout);
}

// ---- the entries ----

namespace {

// op(A) op(B) of 2-D A and B with equal inner dimensions: the product's [M, N].
Shape product_shape(const OpCheck& c, const Tensor& A, const Tensor& B, bool trans_a, bool trans_b) {
  c.ndim(A, 2, "A", trans_a ? "[K, M] (trans_a)" : "[M, K]");
  c.ndim(B, 2, "B", trans_b ? "[N, K] (trans_b)" : "[K, N]");
  const int64_t M = trans_a ? A.dim(1) : A.dim(0), K = trans_a ? A.dim(0) : A.dim(1);
  const int64_t Kb = trans_b ? B.dim(1) : B.dim(0), N = trans_b ? B.dim(0) : B.dim(1);
  ULY_CHECK(K == Kb, c.op() << ": inner dimensions differ: op(A) is [" << M << ", " << K << "] from A "
                            << A.describe() << (trans_a ? " (transposed)" : "") << ", op(B) is [" << Kb << ", " << N
                            << "] from B " << B.describe() << (trans_b ? " (transposed)" : ""));
  return {M, N};
}

// Rows and width of x [..., D]: N rows of D.
std::pair<int64_t, int64_t> rows_of(const OpCheck& c, const Tensor& x, const char* arg) {
  ULY_CHECK(x.ndim() >= 1, c.op() << ": " << arg << " is " << x.describe() << ", expected [..., D] (at least 1-D)");
  const int64_t D = x.dim(-1);
  return {D == 0 ? 0 : x.numel() / D, D};
}

// q [Sq, H, d], k and v [Sk, Hkv, d] of one data dtype, H a multiple of Hkv; the documents set.
AttentionShape attention_tensors(const OpCheck& c, const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Documents& docs) {
  c.data(q, "q");
  c.same_dtype(k, q, "k", "q");
  c.same_dtype(v, q, "v", "q");
  c.ndim(q, 3, "q", "[S, H, d]");
  c.ndim(k, 3, "k", "[S, Hkv, d]");
  AttentionShape a{q.dim(0), q.dim(1), k.dim(1), q.dim(2), docs.count, docs.longest, docs.window};
  c.shape(v, k.shape(), "v");
  ULY_CHECK(k.dim(2) == a.d, c.op() << ": k " << k.describe() << " and q " << q.describe() << " must have one head_dim");
  ULY_CHECK(a.Hkv > 0 && a.H % a.Hkv == 0, c.op() << ": query heads H=" << a.H << " (q " << q.describe()
                                                  << ") must be a multiple of key/value heads Hkv=" << a.Hkv << " (k "
                                                  << k.describe() << ")");
  ULY_CHECK(docs.doc_start.defined() && docs.bounds.defined(),
            c.op() << ": the documents are not set (no doc_start or bounds; make them with make_documents)");
  c.dtype(docs.doc_start, DType::I32, "doc_start");
  c.dtype(docs.bounds, DType::I32, "document bounds");
  c.shape(docs.bounds, {docs.count + 1}, "document bounds");
  return a;
}

// The full form: q [S, H, d], k and v [S, Hkv, d]; the documents of the S tokens.
AttentionShape attention_shape(const OpCheck& c, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Documents& docs) {
  const AttentionShape a = attention_tensors(c, q, k, v, docs);
  c.shape(k, {a.S, a.Hkv, a.d}, "k");
  c.shape(docs.doc_start, {a.S}, "doc_start");
  ULY_CHECK(docs.count >= (a.S > 0 ? 1 : 0) && docs.longest <= a.S,
            c.op() << ": " << docs.count << " documents, the longest of " << docs.longest << " tokens, in " << a.S);
  return a;
}

// The block form: q [Sq, H, d] at row offset q0, k and v [Sk, Hkv, d] at k0, inside the documents' row.
AttentionShape attention_block_shape(const OpCheck& c, const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Documents& docs, int64_t q0, int64_t k0) {
  const AttentionShape a = attention_tensors(c, q, k, v, docs);
  const int64_t Sq = q.dim(0), Sk = k.dim(0), S = docs.tokens();
  ULY_CHECK(q0 >= 0 && k0 >= 0 && q0 + Sq <= S && k0 + Sk <= S,
            c.op() << ": query rows [" << q0 << ", " << q0 + Sq << ") and key rows [" << k0 << ", " << k0 + Sk
                   << ") must lie in the documents' row of " << S << " tokens");
  return a;
}

void attention_lse(const OpCheck& c, const Tensor& lse, const Tensor& q, const AttentionShape& a) {
  c.accumulator(lse, q.dtype(), "lse");
  c.shape(lse, {a.H, a.S}, "lse");
}

// The backward's outputs and inputs beside q, k, v: shaped like them, lse [H, S] as the forward's.
void attention_gradients(const OpCheck& c, const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                         const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                         const AttentionShape& a) {
  c.like(out, q, "out", "q");
  c.like(dout, q, "dout", "q");
  c.like(dq, q, "dq", "q");
  c.like(dk, k, "dk", "k");
  c.like(dv, v, "dv", "v");
  attention_lse(c, lse, q, a);
}

// x, out: [N, H, d] (d even); pos: [N] int32; inv_freq: [d/2] float32.
void rope_args(const OpCheck& c, const Tensor& out, const Tensor& x, const Tensor& pos, const Tensor& inv_freq,
               const char* x_arg, const char* out_arg) {
  c.data(x, x_arg);
  c.like(out, x, out_arg, x_arg);
  c.ndim(x, 3, x_arg, "[N, H, d]");
  const int64_t N = x.dim(0), d = x.dim(2);
  ULY_CHECK(d % 2 == 0, c.op() << ": head dim d of " << x_arg << " " << x.describe() << " must be even");
  c.index(pos, DType::I32, "pos");
  c.shape(pos, {N}, "pos");
  c.index(inv_freq, DType::F32, "inv_freq");
  c.shape(inv_freq, {d / 2}, "inv_freq");
}

}  // namespace

void Backend::zero(Tensor& t) {
  OpCheck(*this, "zero").reached(t, "t");
  zero_impl(t);
}

void Backend::copy(Tensor& dst, const Tensor& src) {
  const OpCheck c(*this, "copy");
  c.reached(dst, "dst");
  c.reached(src, "src");
  ULY_CHECK(dst.numel() == src.numel(),
            "copy: dst " << dst.describe() << " and src " << src.describe() << " differ in element count");
  ULY_CHECK(dst.dtype() == src.dtype() || (is_float(dst.dtype()) && is_float(src.dtype())),
            "copy: cannot convert src " << src.describe() << " to dst " << dst.describe()
                                        << "; only float dtypes (float32, float64, bfloat16, float16) convert");
  copy_impl(dst, src);
}

void Backend::embedding_forward(Tensor& out, const Tensor& ids, const Tensor& table) {
  const OpCheck c(*this, "embedding_forward");
  c.data(table, "table");
  c.ndim(table, 2, "table", "[V, D]");
  c.index(ids, DType::I32, "ids");
  c.ndim(ids, 1, "ids", "[N]");
  c.same_dtype(out, table, "out", "table");
  c.shape(out, {ids.dim(0), table.dim(1)}, "out");
  embedding_forward_impl(out, ids, table);
}

void Backend::embedding_backward(Tensor& dtable, const Tensor& dout, const Tensor& ids) {
  const OpCheck c(*this, "embedding_backward");
  c.data(dout, "dout");
  c.accumulator(dtable, dout.dtype(), "dtable");
  c.ndim(dtable, 2, "dtable", "[V, D]");
  c.index(ids, DType::I32, "ids");
  c.ndim(ids, 1, "ids", "[N]");
  c.shape(dout, {ids.dim(0), dtable.dim(1)}, "dout");
  embedding_backward_impl(dtable, dout, ids);
}

// x: [..., D] (N rows); w: [D]; rstd: N elements.
void Backend::rmsnorm_forward(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w, double eps) {
  const OpCheck c(*this, "rmsnorm_forward");
  ULY_CHECK(eps >= 0, c.op() << ": eps must be >= 0, got " << eps);
  c.data(x, "x");
  const auto [N, D] = rows_of(c, x, "x");
  c.like(y, x, "y", "x");
  c.same_dtype(w, x, "w", "x");
  c.shape(w, {D}, "w");
  c.accumulator(rstd, x.dtype(), "rstd");
  ULY_CHECK(rstd.numel() == N, c.op() << ": rstd is " << rstd.describe() << ", expected " << N
                                      << " elements (one per row of x " << x.describe() << ")");
  rmsnorm_forward_impl(y, rstd, x, w, eps);
}

void Backend::rmsnorm_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w,
                               const Tensor& rstd, bool accumulate_dx) {
  const OpCheck c(*this, "rmsnorm_backward");
  c.data(x, "x");
  const auto [N, D] = rows_of(c, x, "x");
  c.like(dx, x, "dx", "x");
  c.like(dy, x, "dy", "x");
  c.same_dtype(w, x, "w", "x");
  c.shape(w, {D}, "w");
  c.accumulator(dw, x.dtype(), "dw");
  c.shape(dw, {D}, "dw");
  c.accumulator(rstd, x.dtype(), "rstd");
  ULY_CHECK(rstd.numel() == N, c.op() << ": rstd is " << rstd.describe() << ", expected " << N
                                      << " elements (one per row of x " << x.describe() << ")");
  rmsnorm_backward_impl(dx, dw, dy, x, w, rstd, accumulate_dx);
}

void Backend::rope_forward(Tensor& out, const Tensor& x, const Tensor& pos, const Tensor& inv_freq) {
  rope_args(OpCheck(*this, "rope_forward"), out, x, pos, inv_freq, "x", "out");
  rope_forward_impl(out, x, pos, inv_freq);
}

void Backend::rope_backward(Tensor& dx, const Tensor& dout, const Tensor& pos, const Tensor& inv_freq) {
  rope_args(OpCheck(*this, "rope_backward"), dx, dout, pos, inv_freq, "dout", "dx");
  rope_backward_impl(dx, dout, pos, inv_freq);
}

void Backend::attention_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                                const Documents& docs, double scale) {
  const OpCheck c(*this, "attention_forward");
  const AttentionShape a = attention_shape(c, q, k, v, docs);
  c.like(out, q, "out", "q");
  attention_lse(c, lse, q, a);
  attention_forward_impl(out, lse, q, k, v, docs, scale);
}

void Backend::attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& out,
                                 const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Documents& docs, double scale) {
  const OpCheck c(*this, "attention_backward");
  const AttentionShape a = attention_shape(c, q, k, v, docs);
  attention_gradients(c, dq, dk, dv, dout, out, lse, q, k, v, a);
  attention_backward_impl(dq, dk, dv, dout, out, lse, q, k, v, docs, scale);
}

void Backend::attention_forward_block(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                                      const Documents& docs, int64_t q0, int64_t k0, double scale) {
  const OpCheck c(*this, "attention_forward_block");
  const AttentionShape a = attention_block_shape(c, q, k, v, docs, q0, k0);
  c.like(out, q, "out", "q");
  attention_lse(c, lse, q, a);
  attention_forward_block_impl(out, lse, q, k, v, docs, q0, k0, scale);
}

void Backend::attention_backward_block(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& out,
                                       const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                                       const Documents& docs, int64_t q0, int64_t k0, double scale) {
  const OpCheck c(*this, "attention_backward_block");
  const AttentionShape a = attention_block_shape(c, q, k, v, docs, q0, k0);
  attention_gradients(c, dq, dk, dv, dout, out, lse, q, k, v, a);
  attention_backward_block_impl(dq, dk, dv, dout, out, lse, q, k, v, docs, q0, k0, scale);
}

void Backend::attention_merge(Tensor& acc, Tensor& acc_lse, const Tensor& out, const Tensor& lse) {
  const OpCheck c(*this, "attention_merge");
  const DType dt = c.data(out, "out");
  c.ndim(out, 3, "out", "[S, H, d]");
  c.accumulator(acc, dt, "acc");
  c.shape(acc, out.shape(), "acc");
  c.accumulator(lse, dt, "lse");
  c.shape(lse, {out.dim(1), out.dim(0)}, "lse");
  c.like(acc_lse, lse, "acc_lse", "lse");
  attention_merge_impl(acc, acc_lse, out, lse);
}

void Backend::bias_add(Tensor& y, const Tensor& b) {
  const OpCheck c(*this, "bias_add");
  c.data(y, "y");
  const auto [N, n] = rows_of(c, y, "y");
  (void)N;
  c.same_dtype(b, y, "b", "y");
  c.shape(b, {n}, "b");
  bias_add_impl(y, b);
}

void Backend::bias_backward(Tensor& db, const Tensor& dy) {
  const OpCheck c(*this, "bias_backward");
  c.data(dy, "dy");
  const auto [N, n] = rows_of(c, dy, "dy");
  (void)N;
  c.accumulator(db, dy.dtype(), "db");
  c.shape(db, {n}, "db");
  bias_backward_impl(db, dy);
}

void Backend::gated_activation_forward(Tensor& h, const Tensor& gate, const Tensor& up, Activation act) {
  const OpCheck c(*this, "gated_activation_forward");
  c.data(gate, "gate");
  c.like(up, gate, "up", "gate");
  c.like(h, gate, "h", "gate");
  gated_activation_forward_impl(h, gate, up, act);
}

void Backend::gated_activation_backward(Tensor& dgate, Tensor& dup, const Tensor& dh, const Tensor& gate,
                                        const Tensor& up, Activation act) {
  const OpCheck c(*this, "gated_activation_backward");
  c.data(gate, "gate");
  c.like(up, gate, "up", "gate");
  c.like(dh, gate, "dh", "gate");
  c.like(dgate, gate, "dgate", "gate");
  c.like(dup, gate, "dup", "gate");
  gated_activation_backward_impl(dgate, dup, dh, gate, up, act);
}

// losses: float32, or the accumulator dtype of the logits (float64 on the CPU).
void Backend::cross_entropy_forward_backward(Tensor& dlogits, Tensor& losses, const Tensor& logits,
                                             const Tensor& targets, double grad_scale) {
  const OpCheck c(*this, "cross_entropy_forward_backward");
  const DType dt = c.data(logits, "logits");
  c.ndim(logits, 2, "logits", "[N, V]");
  const int64_t N = logits.dim(0), V = logits.dim(1);
  c.like(dlogits, logits, "dlogits", "logits");
  c.index(targets, DType::I32, "targets");
  c.shape(targets, {N}, "targets");
  c.held(losses, "losses");
  ULY_CHECK(losses.dtype() == DType::F32 || losses.dtype() == accumulator_dtype(dt),
            c.op() << ": losses is " << losses.describe() << ", expected float32"
                   << (accumulator_dtype(dt) == DType::F32 ? "" : " or " + std::string(dtype_name(accumulator_dtype(dt)))));
  c.shape(losses, {N}, "losses");
  ULY_CHECK(V > 0 || N == 0, c.op() << ": logits " << logits.describe() << " has an empty vocabulary");
  cross_entropy_forward_backward_impl(dlogits, losses, logits, targets, grad_scale);
}

void Backend::matmul(Tensor& C, const Tensor& A, const Tensor& B, bool trans_a, bool trans_b, double alpha,
                     double beta) {
  const OpCheck c(*this, "matmul");
  const DType dt = c.data(A, "A");
  c.same_dtype(B, A, "B", "A");
  c.held(C, "C");
  const DType acc = accumulator_dtype(dt);
  ULY_CHECK(C.dtype() == dt || C.dtype() == acc,
            "matmul: C is " << C.describe() << ", expected " << dtype_name(dt) << " (the dtype of A)"
                            << (acc == dt ? "" : " or " + std::string(dtype_name(acc)) + " (the accumulator dtype)"));
  const Shape mn = product_shape(c, A, B, trans_a, trans_b);
  c.ndim(C, 2, "C", "[M, N]");
  c.shape(C, mn, "C");
  matmul_impl(C, A, B, trans_a, trans_b, alpha, beta);
}

void Backend::matmul_add(Tensor& D, const Tensor& A, const Tensor& B, bool trans_a, bool trans_b, const Tensor& R) {
  const OpCheck c(*this, "matmul_add");
  c.data(A, "A");
  c.same_dtype(B, A, "B", "A");
  c.same_dtype(D, A, "D", "A");
  c.same_dtype(R, A, "R", "A");
  c.held(D, "D");
  c.held(R, "R");
  const Shape mn = product_shape(c, A, B, trans_a, trans_b);
  c.shape(D, mn, "D");
  c.shape(R, mn, "R");
  matmul_add_impl(D, A, B, trans_a, trans_b, R);
}

void Backend::add(Tensor& y, const Tensor& a, const Tensor& b) {
  const OpCheck c(*this, "add");
  c.data(a, "a");
  c.same_dtype(b, a, "b", "a");
  c.same_dtype(y, a, "y", "a");
  ULY_CHECK(a.numel() == y.numel() && b.numel() == y.numel(),
            "add: y " << y.describe() << ", a " << a.describe() << " and b " << b.describe()
                      << " must have the same number of elements");
  add_impl(y, a, b);
}

// y and x: one dtype, or one of them the other's accumulator dtype (y float32 += x bfloat16 on CUDA),
// or y a bfloat16 gradient buffer taking a float32 contribution (on every backend).
void Backend::init_uniform(Tensor& x, uint64_t seed, uint64_t stream, int64_t first, float bound) {
  const OpCheck c(*this, "init_uniform");
  c.data(x, "x");
  ULY_CHECK(first >= 0, "init_uniform: the first element's index must be >= 0, got " << first);
  ULY_CHECK(stream < (uint64_t{1} << 24), "init_uniform: stream " << stream << " does not fit the generator's 24 bits");
  init_uniform_impl(x, seed, stream, first, bound);
}

void Backend::axpy(Tensor& y, const Tensor& x, double alpha) {
  const OpCheck c(*this, "axpy");
  if (y.dtype() == DType::BF16 && x.dtype() == DType::F32) {
    c.held(y, "y");
    c.held(x, "x");
  } else {
    const DType yt = c.data(y, "y"), xt = c.data(x, "x");
    ULY_CHECK(yt == xt || yt == accumulator_dtype(xt) || xt == accumulator_dtype(yt),
              "axpy: y " << y.describe() << " and x " << x.describe()
                         << " must share a dtype (or one be the other's accumulator dtype)");
  }
  ULY_CHECK(x.numel() == y.numel(),
            "axpy: y " << y.describe() << " and x " << x.describe() << " must have the same number of elements");
  axpy_impl(y, x, alpha);
}

double Backend::sum(const Tensor& x) {
  OpCheck(*this, "sum").reached(x, "x");
  return sum_impl(x);
}

// x: on this backend's device in a data dtype or a gradient buffer's (bfloat16 included), or
// (device backends) any float host tensor.
double Backend::sum_squares(const Tensor& x) {
  const OpCheck c(*this, "sum_squares");
  c.reached(x, "x");
  if (holds(x) && x.dtype() != DType::BF16) c.data(x, "x");
  else ULY_CHECK(is_float(x.dtype()), "sum_squares: x is " << x.describe() << ", expected a float tensor");
  return sum_squares_impl(x);
}

double Backend::sum_squares_all(const std::vector<const Tensor*>& xs) {
  const OpCheck c(*this, "sum_squares_all");
  for (const Tensor* t : xs) {
    ULY_CHECK(t != nullptr, "sum_squares_all: a null tensor pointer");
    if (t->dtype() == DType::BF16) c.held(*t, "x");  // a bfloat16 gradient buffer (any backend)
    else c.data(*t, "x");
  }
  return sum_squares_all_impl(xs);
}

// master, m, v: [n] in the accumulator dtype of weight's; grad: [n], a gradient buffer (that dtype or
// bfloat16); weight: n elements in a data dtype.
void Backend::adamw_step(Tensor& master, Tensor& m, Tensor& v, Tensor& weight, const Tensor& grad,
                         const AdamWParams& p) {
  const OpCheck c(*this, "adamw_step");
  const DType wt = c.data(weight, "weight");
  const int64_t n = master.numel();
  for (const auto& [t, name] : {std::pair<const Tensor*, const char*>{&master, "master"}, {&m, "m"}, {&v, "v"},
                                {&grad, "grad"}, {&weight, "weight"}}) {
    if (t == &grad) c.gradient(*t, wt, name);
    else if (t != &weight) c.accumulator(*t, wt, name);
    ULY_CHECK(t->numel() == n, "adamw_step: " << name << " is " << t->describe() << ", expected " << n
                                              << " elements like master " << master.describe());
  }
  adamw_step_impl(master, m, v, weight, grad, p);
}

// dst: [N, Hd, d], src: [N, Hs, d]; heads [src_head0, +n_heads) of src to [dst_head0, +n_heads) of dst.
void Backend::copy_heads(Tensor& dst, int64_t dst_head0, const Tensor& src, int64_t src_head0, int64_t n_heads,
                         bool accumulate) {
  const OpCheck c(*this, "copy_heads");
  c.data(dst, "dst");
  c.same_dtype(src, dst, "src", "dst");
  c.ndim(dst, 3, "dst", "[N, Hd, d]");
  c.ndim(src, 3, "src", "[N, Hs, d]");
  const int64_t N = dst.dim(0), Hd = dst.dim(1), d = dst.dim(2), Hs = src.dim(1);
  ULY_CHECK(src.dim(0) == N && src.dim(2) == d,
            "copy_heads: src " << src.describe() << " and dst " << dst.describe() << " must agree in N and d");
  ULY_CHECK(n_heads >= 0 && dst_head0 >= 0 && src_head0 >= 0 && dst_head0 + n_heads <= Hd &&
                src_head0 + n_heads <= Hs,
            "copy_heads: heads [" << src_head0 << ", " << src_head0 + n_heads << ") of src " << src.describe()
                                  << " -> [" << dst_head0 << ", " << dst_head0 + n_heads << ") of dst "
                                  << dst.describe() << " are out of range");
  copy_heads_impl(dst, dst_head0, src, src_head0, n_heads, accumulate);
}

}  // namespace ulysses
