// The CPU Backend: checks every Tensor argument (device, dtype, shape) with a
// message naming the op and the shapes, then calls the cpu:: reference ops.
//
// Data tensors are float32 (act_dtype) or, for float64 reference runs, float64;
// all data tensors of one call share one dtype. Index tensors (ids, pos,
// targets, doc_start) are int32; inv_freq is float32.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/ops.h"
#include "core/step_profile.h"

namespace ulysses {
namespace {

void check_host(const char* op, const char* name, const Tensor& t) {
  ULY_CHECK(t.defined(), op << ": " << name << " is an undefined tensor");
  ULY_CHECK(t.device() == Device::CPU, op << ": " << name << " is " << t.describe()
                                          << "; the cpu backend only takes host tensors (copy it to the host first)");
}

void check_dtype(const char* op, const char* name, const Tensor& t, DType want) {
  check_host(op, name, t);
  ULY_CHECK(t.dtype() == want, op << ": " << name << " must be " << dtype_name(want) << ", got " << t.describe());
}

// The data dtype of a call: float32 or float64, the same for every data tensor given.
DType data_dtype(const char* op, std::initializer_list<std::pair<const char*, const Tensor*>> ts) {
  const auto& first = *ts.begin();
  check_host(op, first.first, *first.second);
  const DType dt = first.second->dtype();
  ULY_CHECK(dt == DType::F32 || dt == DType::F64,
            op << ": " << first.first << " must be float32 (or float64), got " << first.second->describe());
  for (const auto& [name, t] : ts) {
    check_host(op, name, *t);
    ULY_CHECK(t->dtype() == dt, op << ": " << name << " is " << t->describe() << " but " << first.first << " is "
                                   << first.second->describe() << "; all data tensors must share one dtype");
  }
  return dt;
}

void check_shape(const char* op, const char* name, const Tensor& t, const Shape& want) {
  ULY_CHECK(t.shape() == want,
            op << ": " << name << " must have shape " << shape_str(want) << ", got " << t.describe());
}

void check_ndim(const char* op, const char* name, const Tensor& t, int ndim, const char* layout) {
  ULY_CHECK(t.ndim() == ndim, op << ": " << name << " must be " << layout << ", got " << t.describe());
}

// Calls f(T{}) with T the C++ type of dtype dt (float32 or float64).
template <class F>
void dispatch(DType dt, F&& f) {
  if (dt == DType::F32) f(float{});
  else f(double{});
}

template <class T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.raw());
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(bool lagging_transfers) : lagging_transfers_(lagging_transfers) {}
  Device device() const override { return Device::CPU; }
  std::string name() const override { return "cpu"; }
  DType act_dtype() const override { return DType::F32; }
  Allocator& allocator() override { return host_allocator(); }

  void zero(Tensor& t) override {
    check_host("zero", "t", t);
    if (t.nbytes() > 0) std::memset(t.raw(), 0, t.nbytes());
  }

  void copy(Tensor& dst, const Tensor& src) override {
    check_host("copy", "dst", dst);
    check_host("copy", "src", src);
    ULY_CHECK(dst.numel() == src.numel(),
              "copy: dst " << dst.describe() << " and src " << src.describe() << " differ in element count");
    const size_t n = static_cast<size_t>(src.numel());
    if (dst.dtype() == src.dtype()) {
      if (n > 0) std::memmove(dst.raw(), src.raw(), src.nbytes());
      return;
    }
    ULY_CHECK(is_float(dst.dtype()) && is_float(src.dtype()),
              "copy: cannot convert " << src.describe() << " to " << dst.describe()
                                      << "; only float dtypes (float32, float64, bfloat16, float16) convert");
    // Fixed chunks converted in parallel; each goes through float32 unless the
    // destination is float64 or the source already is float32.
    constexpr size_t kChunk = size_t{1} << 15;
    const int64_t chunks = static_cast<int64_t>((n + kChunk - 1) / kChunk);
    const size_t src_es = dtype_size(src.dtype()), dst_es = dtype_size(dst.dtype());
    const char* s = static_cast<const char*>(src.raw());
    char* d = static_cast<char*>(dst.raw());
    const DType st = src.dtype(), dt = dst.dtype();
#pragma omp parallel if (chunks > 1)
    {
      std::vector<float> buf;
#pragma omp for schedule(static)
      for (int64_t c = 0; c < chunks; ++c) {
        const size_t b = static_cast<size_t>(c) * kChunk, m = std::min(kChunk, n - b);
        if (dt == DType::F64) {
          convert_to_f64(reinterpret_cast<double*>(d + b * dst_es), s + b * src_es, st, m);
        } else if (st == DType::F32) {
          convert_from_f32(d + b * dst_es, dt, reinterpret_cast<const float*>(s + b * src_es), m);
        } else {
          buf.resize(m);
          convert_to_f32(buf.data(), s + b * src_es, st, m);
          convert_from_f32(d + b * dst_es, dt, buf.data(), m);
        }
      }
    }
  }

  void synchronize() override {}

  // Every op has finished when it returns, so the host clock times the families.
  void enable_profiling(StepProfile* profile) override { profile_ = profile; }
  void profile_push(const char* family, bool absorb_nested) override {
    if (profile_ != nullptr) profile_->open(family, absorb_nested, now());
  }
  void profile_pop() override {
    if (profile_ != nullptr) profile_->close(now());
  }

  void embedding_forward(Tensor& out, const Tensor& ids, const Tensor& table) override {
    const char* op = "embedding_forward";
    const DType dt = data_dtype(op, {{"table", &table}, {"out", &out}});
    check_dtype(op, "ids", ids, DType::I32);
    check_ndim(op, "table", table, 2, "[V, D]");
    check_ndim(op, "ids", ids, 1, "[N]");
    const int64_t N = ids.dim(0), V = table.dim(0), D = table.dim(1);
    check_shape(op, "out", out, {N, D});
    check_ids(op, "ids", ids, V, false);
    dispatch(dt, [&](auto t) {
      using T = decltype(t);
      cpu::embedding_forward(ptr<T>(out), ptr<int32_t>(ids), ptr<T>(table), N, D);
    });
  }

  void embedding_backward(Tensor& dtable, const Tensor& dout, const Tensor& ids) override {
    const char* op = "embedding_backward";
    const DType dt = data_dtype(op, {{"dtable", &dtable}, {"dout", &dout}});
    check_dtype(op, "ids", ids, DType::I32);
    check_ndim(op, "dtable", dtable, 2, "[V, D]");
    check_ndim(op, "ids", ids, 1, "[N]");
    const int64_t N = ids.dim(0), V = dtable.dim(0), D = dtable.dim(1);
    check_shape(op, "dout", dout, {N, D});
    check_ids(op, "ids", ids, V, false);
    dispatch(dt, [&](auto t) {
      using T = decltype(t);
      cpu::embedding_backward(ptr<T>(dtable), ptr<T>(dout), ptr<int32_t>(ids), N, D);
    });
  }

  // x: [..., D] (any leading dims, N rows); rstd: N elements.
  void rmsnorm_forward(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w, double eps) override {
    const char* op = "rmsnorm_forward";
    const DType dt = data_dtype(op, {{"x", &x}, {"y", &y}, {"rstd", &rstd}, {"w", &w}});
    ULY_CHECK(x.ndim() >= 1, op << ": x must be [N, D], got " << x.describe());
    const int64_t D = x.dim(-1), N = D == 0 ? 0 : x.numel() / D;
    check_shape(op, "w", w, {D});
    check_shape(op, "y", y, x.shape());
    ULY_CHECK(rstd.numel() == N, op << ": rstd must have " << N << " elements (one per row of x "
                                    << x.describe() << "), got " << rstd.describe());
    ULY_CHECK(eps >= 0, op << ": eps must be >= 0, got " << eps);
    dispatch(dt, [&](auto t) {
      using T = decltype(t);
      cpu::rmsnorm_forward(ptr<T>(y), ptr<T>(rstd), ptr<T>(x), ptr<T>(w), N, D, eps);
    });
  }

  void rmsnorm_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w,
                        const Tensor& rstd) override {
    const char* op = "rmsnorm_backward";
    const DType dt =
        data_dtype(op, {{"x", &x}, {"dx", &dx}, {"dw", &dw}, {"dy", &dy}, {"w", &w}, {"rstd", &rstd}});
    ULY_CHECK(x.ndim() >= 1, op << ": x must be [N, D], got " << x.describe());
    const int64_t D = x.dim(-1), N = D == 0 ? 0 : x.numel() / D;
    check_shape(op, "w", w, {D});
    check_shape(op, "dw", dw, {D});
    check_shape(op, "dy", dy, x.shape());
    check_shape(op, "dx", dx, x.shape());
    ULY_CHECK(rstd.numel() == N, op << ": rstd must have " << N << " elements (one per row of x "
                                    << x.describe() << "), got " << rstd.describe());
    dispatch(dt, [&](auto t) {
      using T = decltype(t);
      cpu::rmsnorm_backward(ptr<T>(dx), ptr<T>(dw), ptr<T>(dy), ptr<T>(x), ptr<T>(w), ptr<T>(rstd), N, D);
    });
  }

  void rope_forward(Tensor& out, const Tensor& x, const Tensor& pos, const Tensor& inv_freq) override {
    rope("rope_forward", "x", "out", out, x, pos, inv_freq, true);
  }
  void rope_backward(Tensor& dx, const Tensor& dout, const Tensor& pos, const Tensor& inv_freq) override {
    rope("rope_backward", "dout", "dx", dx, dout, pos, inv_freq, false);
  }

  void attention_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                         const Documents& docs, double scale) override {
    const char* op = "attention_forward";
    const Tensor& doc_start = docs.doc_start;
    const DType dt = data_dtype(op, {{"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}, {"lse", &lse}});
    const Dims a = attention_dims(op, q, k, v, doc_start);
    check_shape(op, "out", out, q.shape());
    check_shape(op, "lse", lse, {a.H, a.S});
    dispatch(dt, [&](auto t) {
      using T = decltype(t);
      cpu::attention_forward(ptr<T>(out), ptr<T>(lse), ptr<T>(q), ptr<T>(k), ptr<T>(v), ptr<int32_t>(doc_start),
                             a.S, a.H, a.Hkv, a.d, scale);
    });
  }

  void attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& out,
                          const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Documents& docs, double scale) override {
    const char* op = "attention_backward";
    const Tensor& doc_start = docs.doc_start;
    const DType dt = data_dtype(op, {{"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}, {"lse", &lse},
                                     {"dout", &dout}, {"dq", &dq}, {"dk", &dk}, {"dv", &dv}});
    const Dims a = attention_dims(op, q, k, v, doc_start);
    check_shape(op, "out", out, q.shape());
    check_shape(op, "dout", dout, q.shape());
    check_shape(op, "dq", dq, q.shape());
    check_shape(op, "dk", dk, k.shape());
    check_shape(op, "dv", dv, k.shape());
    check_shape(op, "lse", lse, {a.H, a.S});
    dispatch(dt, [&](auto t) {
      using T = decltype(t);
      cpu::attention_backward(ptr<T>(dq), ptr<T>(dk), ptr<T>(dv), ptr<T>(dout), ptr<T>(out), ptr<T>(lse),
                              ptr<T>(q), ptr<T>(k), ptr<T>(v), ptr<int32_t>(doc_start), a.S, a.H, a.Hkv, a.d,
                              scale);
    });
  }

  // gate, up, h: [..., F], all the same shape.
  void swiglu_forward(Tensor& h, const Tensor& gate, const Tensor& up) override {
    const char* op = "swiglu_forward";
    const DType dt = data_dtype(op, {{"gate", &gate}, {"up", &up}, {"h", &h}});
    check_shape(op, "up", up, gate.shape());
    check_shape(op, "h", h, gate.shape());
    const auto [N, F] = rows_cols(gate);
    dispatch(dt, [&](auto t) {
      using T = decltype(t);
      cpu::swiglu_forward(ptr<T>(h), ptr<T>(gate), ptr<T>(up), N, F);
    });
  }

  void swiglu_backward(Tensor& dgate, Tensor& dup, const Tensor& dh, const Tensor& gate,
                       const Tensor& up) override {
    const char* op = "swiglu_backward";
    const DType dt =
        data_dtype(op, {{"gate", &gate}, {"up", &up}, {"dh", &dh}, {"dgate", &dgate}, {"dup", &dup}});
    check_shape(op, "up", up, gate.shape());
    check_shape(op, "dh", dh, gate.shape());
    check_shape(op, "dgate", dgate, gate.shape());
    check_shape(op, "dup", dup, gate.shape());
    const auto [N, F] = rows_cols(gate);
    dispatch(dt, [&](auto t) {
      using T = decltype(t);
      cpu::swiglu_backward(ptr<T>(dgate), ptr<T>(dup), ptr<T>(dh), ptr<T>(gate), ptr<T>(up), N, F);
    });
  }

  // losses may be float32 (the interface's type) or the logits' dtype.
  void cross_entropy_forward_backward(Tensor& dlogits, Tensor& losses, const Tensor& logits, const Tensor& targets,
                                      double grad_scale) override {
    const char* op = "cross_entropy_forward_backward";
    const DType dt = data_dtype(op, {{"logits", &logits}, {"dlogits", &dlogits}});
    check_ndim(op, "logits", logits, 2, "[N, V]");
    const int64_t N = logits.dim(0), V = logits.dim(1);
    check_shape(op, "dlogits", dlogits, logits.shape());
    check_dtype(op, "targets", targets, DType::I32);
    check_shape(op, "targets", targets, {N});
    check_host(op, "losses", losses);
    ULY_CHECK(losses.dtype() == DType::F32 || losses.dtype() == dt,
              op << ": losses must be float32, got " << losses.describe());
    check_shape(op, "losses", losses, {N});
    ULY_CHECK(V > 0 || N == 0, op << ": logits " << logits.describe() << " has an empty vocabulary");
    check_ids(op, "targets", targets, V, true);
    dispatch(dt, [&](auto t) {
      using T = decltype(t);
      if (losses.dtype() == dt) {
        cpu::cross_entropy_forward_backward(ptr<T>(dlogits), ptr<T>(losses), ptr<T>(logits),
                                            ptr<int32_t>(targets), N, V, grad_scale);
      } else {  // float64 logits, float32 losses
        std::vector<T> tmp(static_cast<size_t>(N));
        cpu::cross_entropy_forward_backward(ptr<T>(dlogits), tmp.data(), ptr<T>(logits), ptr<int32_t>(targets), N,
                                            V, grad_scale);
        float* l = ptr<float>(losses);
        for (int64_t i = 0; i < N; ++i) l[i] = static_cast<float>(tmp[i]);
      }
    });
  }

  void matmul(Tensor& C, const Tensor& A, const Tensor& B, bool trans_a, bool trans_b, double alpha,
              double beta) override {
    const char* op = "matmul";
    const DType dt = data_dtype(op, {{"A", &A}, {"B", &B}, {"C", &C}});
    check_ndim(op, "A", A, 2, trans_a ? "[K, M] (trans_a)" : "[M, K]");
    check_ndim(op, "B", B, 2, trans_b ? "[N, K] (trans_b)" : "[K, N]");
    check_ndim(op, "C", C, 2, "[M, N]");
    const int64_t M = trans_a ? A.dim(1) : A.dim(0), K = trans_a ? A.dim(0) : A.dim(1);
    const int64_t Kb = trans_b ? B.dim(1) : B.dim(0), N = trans_b ? B.dim(0) : B.dim(1);
    ULY_CHECK(K == Kb, op << ": inner dimensions differ: op(A) is [" << M << ", " << K << "] from A " << A.describe()
                          << (trans_a ? " (transposed)" : "") << ", op(B) is [" << Kb << ", " << N << "] from B "
                          << B.describe() << (trans_b ? " (transposed)" : ""));
    check_shape(op, "C", C, {M, N});
    dispatch(dt, [&](auto t) {
      using T = decltype(t);
      cpu::matmul(ptr<T>(C), ptr<T>(A), ptr<T>(B), M, N, K, trans_a, trans_b, alpha, beta);
    });
  }

  void add(Tensor& y, const Tensor& a, const Tensor& b) override {
    const char* op = "add";
    const DType dt = data_dtype(op, {{"y", &y}, {"a", &a}, {"b", &b}});
    ULY_CHECK(a.numel() == y.numel() && b.numel() == y.numel(),
              op << ": y " << y.describe() << ", a " << a.describe() << " and b " << b.describe()
                 << " must have the same number of elements");
    dispatch(dt, [&](auto t) {
      using T = decltype(t);
      cpu::add(ptr<T>(y), ptr<T>(a), ptr<T>(b), y.numel());
    });
  }

  void axpy(Tensor& y, const Tensor& x, double alpha) override {
    const char* op = "axpy";
    const DType dt = data_dtype(op, {{"y", &y}, {"x", &x}});
    ULY_CHECK(x.numel() == y.numel(),
              op << ": y " << y.describe() << " and x " << x.describe() << " must have the same number of elements");
    dispatch(dt, [&](auto t) {
      using T = decltype(t);
      cpu::axpy(ptr<T>(y), ptr<T>(x), alpha, y.numel());
    });
  }

  // dst: [N, Hd, d], src: [N, Hs, d]; heads [dst_head0, +n_heads) of dst from heads [src_head0, +n_heads) of src.
  void copy_heads(Tensor& dst, int64_t dst_head0, const Tensor& src, int64_t src_head0, int64_t n_heads,
                  bool accumulate) override {
    const char* op = "copy_heads";
    const DType dt = data_dtype(op, {{"dst", &dst}, {"src", &src}});
    check_ndim(op, "dst", dst, 3, "[N, Hd, d]");
    check_ndim(op, "src", src, 3, "[N, Hs, d]");
    const int64_t N = dst.dim(0), Hd = dst.dim(1), d = dst.dim(2), Hs = src.dim(1);
    ULY_CHECK(src.dim(0) == N && src.dim(2) == d,
              op << ": src " << src.describe() << " and dst " << dst.describe() << " must agree in N and d");
    ULY_CHECK(n_heads >= 0 && dst_head0 >= 0 && src_head0 >= 0 && dst_head0 + n_heads <= Hd &&
                  src_head0 + n_heads <= Hs,
              op << ": heads [" << src_head0 << ", " << src_head0 + n_heads << ") of src " << src.describe()
                 << " -> [" << dst_head0 << ", " << dst_head0 + n_heads << ") of dst " << dst.describe()
                 << " are out of range");
    dispatch(dt, [&](auto t) {
      using T = decltype(t);
      cpu::copy_heads(ptr<T>(dst), Hd, dst_head0, ptr<T>(src), Hs, src_head0, n_heads, N, d, accumulate);
    });
  }

  double sum_squares(const Tensor& x) override {
    const DType dt = data_dtype("sum_squares", {{"x", &x}});
    double s = 0;
    dispatch(dt, [&](auto t) {
      using T = decltype(t);
      s = cpu::sum_squares(ptr<T>(x), x.numel());
    });
    return s;
  }

  void adamw_step(Tensor& master, Tensor& m, Tensor& v, Tensor& weight, const Tensor& grad,
                  const AdamWParams& p) override {
    const char* op = "adamw_step";
    const DType dt = data_dtype(op, {{"master", &master}, {"m", &m}, {"v", &v}, {"weight", &weight}, {"grad", &grad}});
    const int64_t n = master.numel();
    for (const Tensor* t : std::initializer_list<const Tensor*>{&m, &v, &weight, &grad})
      ULY_CHECK(t->numel() == n, op << ": " << t->describe() << " does not match master " << master.describe());
    dispatch(dt, [&](auto t) {
      using T = decltype(t);
      cpu::adamw_step(ptr<T>(master), ptr<T>(m), ptr<T>(v), ptr<T>(weight), ptr<T>(grad), n, p.lr, p.beta1, p.beta2,
                      p.eps, p.weight_decay, p.step, p.grad_scale);
    });
  }

  // Fixed chunks summed in a fixed order, so the result does not depend on the thread count.
  double sum(const Tensor& x) override {
    check_host("sum", "x", x);
    const int64_t n = x.numel();
    constexpr int64_t kChunk = 1 << 14;
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    std::vector<double> partial(static_cast<size_t>(chunks));
    const DType dt = x.dtype();
    const char* base = static_cast<const char*>(x.raw());
    const size_t es = dtype_size(dt);
#pragma omp parallel if (chunks > 1)
    {
      std::vector<double> buf;
#pragma omp for schedule(static)
      for (int64_t c = 0; c < chunks; ++c) {
        const int64_t b = c * kChunk, m = std::min(kChunk, n - b);
        const char* p = base + static_cast<size_t>(b) * es;
        double s = 0;
        switch (dt) {
          case DType::I32: for (int64_t i = 0; i < m; ++i) s += reinterpret_cast<const int32_t*>(p)[i]; break;
          case DType::I64:
            for (int64_t i = 0; i < m; ++i) s += static_cast<double>(reinterpret_cast<const int64_t*>(p)[i]);
            break;
          case DType::U8: for (int64_t i = 0; i < m; ++i) s += reinterpret_cast<const uint8_t*>(p)[i]; break;
          default:
            buf.resize(static_cast<size_t>(m));
            convert_to_f64(buf.data(), p, dt, static_cast<size_t>(m));
            for (int64_t i = 0; i < m; ++i) s += buf[i];
        }
        partial[c] = s;
      }
    }
    double total = 0;
    for (double s : partial) total += s;
    return total;
  }

 private:
  struct Dims {
    int64_t S, H, Hkv, d;
  };

  static std::pair<int64_t, int64_t> rows_cols(const Tensor& t) {
    if (t.ndim() == 0) return {1, 1};
    const int64_t F = t.dim(-1);
    return {F == 0 ? 0 : t.numel() / F, F};
  }

  // Ids must index rows [0, V) (targets may also be -100, "ignored").
  static void check_ids(const char* op, const char* name, const Tensor& ids, int64_t V, bool allow_ignore) {
    const int32_t* p = ptr<int32_t>(ids);
    for (int64_t i = 0; i < ids.numel(); ++i) {
      const int32_t id = p[i];
      ULY_CHECK((id >= 0 && id < V) || (allow_ignore && id == -100),
                op << ": " << name << "[" << i << "] = " << id << " is outside [0, " << V << ")"
                   << (allow_ignore ? " and is not -100 (ignored)" : "")
                   << "; the vocabulary (rows of the table/logits) is too small for these ids");
    }
  }

  static Dims attention_dims(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& doc_start) {
    check_ndim(op, "q", q, 3, "[S, H, d]");
    check_ndim(op, "k", k, 3, "[S, Hkv, d]");
    const Dims a{q.dim(0), q.dim(1), k.dim(1), q.dim(2)};
    ULY_CHECK(k.dim(0) == a.S && k.dim(2) == a.d,
              op << ": k " << k.describe() << " must be [S, Hkv, d] with S, d of q " << q.describe());
    ULY_CHECK(a.Hkv > 0 && a.H % a.Hkv == 0,
              op << ": query heads H=" << a.H << " (q " << q.describe() << ") must be a multiple of kv heads Hkv="
                 << a.Hkv << " (k " << k.describe() << ")");
    check_shape(op, "v", v, k.shape());
    ULY_CHECK(doc_start.defined(), op << ": the documents have no doc_start");
    check_dtype(op, "doc_start", doc_start, DType::I32);
    check_shape(op, "doc_start", doc_start, {a.S});
    const int32_t* ds = ptr<int32_t>(doc_start);
    for (int64_t i = 0; i < a.S; ++i)
      ULY_CHECK(ds[i] >= 0 && ds[i] <= i, op << ": doc_start[" << i << "] = " << ds[i]
                                             << " must lie in [0, " << i
                                             << "] (the first token of query " << i << "'s document)");
    return a;
  }

  void rope(const char* op, const char* in_name, const char* out_name, Tensor& out, const Tensor& x,
            const Tensor& pos, const Tensor& inv_freq, bool forward) {
    const DType dt = data_dtype(op, {{in_name, &x}, {out_name, &out}});
    check_ndim(op, in_name, x, 3, "[N, H, d]");
    check_shape(op, out_name, out, x.shape());
    const int64_t N = x.dim(0), H = x.dim(1), d = x.dim(2);
    ULY_CHECK(d % 2 == 0, op << ": head dim d of " << in_name << " " << x.describe() << " must be even");
    check_dtype(op, "pos", pos, DType::I32);
    check_shape(op, "pos", pos, {N});
    check_dtype(op, "inv_freq", inv_freq, DType::F32);
    check_shape(op, "inv_freq", inv_freq, {d / 2});
    dispatch(dt, [&](auto t) {
      using T = decltype(t);
      if (forward)
        cpu::rope_forward(ptr<T>(out), ptr<T>(x), ptr<int32_t>(pos), ptr<float>(inv_freq), N, H, d);
      else
        cpu::rope_backward(ptr<T>(out), ptr<T>(x), ptr<int32_t>(pos), ptr<float>(inv_freq), N, H, d);
    });
  }

  // Lagging transfers: the destination reads as NaN until wait_transfer() makes the copy.
  uint64_t copy_async(Tensor& dst, const Tensor& src) override {
    if (!lagging_transfers_) return Backend::copy_async(dst, src);
    ULY_CHECK(dst.dtype() == src.dtype() && dst.numel() == src.numel(),
              "copy_async: " << dst.describe() << " <- " << src.describe() << ": one dtype and one element count");
    std::memset(dst.raw(), 0xFF, dst.nbytes());  // all-ones bytes are NaN in every float dtype
    lagging_[next_transfer_] = {dst.raw(), src.raw(), dst.nbytes()};
    return next_transfer_++;
  }
  void wait_transfer(uint64_t id) override {
    if (!lagging_transfers_ || id == 0) return;
    auto it = lagging_.find(id);
    ULY_CHECK(it != lagging_.end(), "wait_transfer: transfer " << id << " is unknown or was already waited for");
    std::memcpy(it->second.dst, it->second.src, it->second.bytes);
    lagging_.erase(it);
  }

 private:
  static double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }

  struct Lagging {
    void* dst;
    const void* src;
    size_t bytes;
  };
  bool lagging_transfers_;
  std::map<uint64_t, Lagging> lagging_;
  uint64_t next_transfer_ = 1;
  StepProfile* profile_ = nullptr;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(bool lagging_transfers) {
  return std::make_unique<CpuBackend>(lagging_transfers);
}

}  // namespace ulysses
