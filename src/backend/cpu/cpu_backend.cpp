// The CPU Backend: calls the cpu:: reference ops with arguments that Backend's
// entries (op_checks.cpp) have checked: host tensors; data tensors float32
// (act_dtype) or, for float64 reference runs, float64, one dtype per call;
// index tensors (ids, pos, targets, doc_start) int32; inv_freq float32. What
// needs the data is checked here: ids and targets in range, document starts.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/ops.h"
#include "core/counter_uniform.h"
#include "core/step_profile.h"

namespace ulysses {
namespace {

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

  void synchronize() override {}

  // Every op has finished when it returns, so the host clock times the families.
  void enable_profiling(StepProfile* profile) override { profile_ = profile; }
  void profile_push(const char* family, bool absorb_nested) override {
    if (profile_ != nullptr) profile_->open(family, absorb_nested, now());
  }
  void profile_pop() override {
    if (profile_ != nullptr) profile_->close(now());
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

 protected:
  void zero_impl(Tensor& t) override {
    if (t.nbytes() > 0) std::memset(t.raw(), 0, t.nbytes());
  }

  void copy_impl(Tensor& dst, const Tensor& src) override {
    const size_t n = static_cast<size_t>(src.numel());
    if (dst.dtype() == src.dtype()) {
      if (n > 0) std::memmove(dst.raw(), src.raw(), src.nbytes());
      return;
    }
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

  void embedding_forward_impl(Tensor& out, const Tensor& ids, const Tensor& table) override {
    const int64_t N = ids.dim(0), V = table.dim(0), D = table.dim(1);
    check_ids("embedding_forward", "ids", ids, V, false);
    dispatch(table.dtype(), [&](auto t) {
      using T = decltype(t);
      cpu::embedding_forward(ptr<T>(out), ptr<int32_t>(ids), ptr<T>(table), N, D);
    });
  }

  void embedding_backward_impl(Tensor& dtable, const Tensor& dout, const Tensor& ids) override {
    const int64_t N = ids.dim(0), V = dtable.dim(0), D = dtable.dim(1);
    check_ids("embedding_backward", "ids", ids, V, false);
    dispatch(dout.dtype(), [&](auto t) {
      using T = decltype(t);
      cpu::embedding_backward(ptr<T>(dtable), ptr<T>(dout), ptr<int32_t>(ids), N, D);
    });
  }

  // x: [..., D] (any leading dims, N rows); rstd: N elements.
  void rmsnorm_forward_impl(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w, double eps) override {
    const auto [N, D] = rows_cols(x);
    dispatch(x.dtype(), [&](auto t) {
      using T = decltype(t);
      cpu::rmsnorm_forward(ptr<T>(y), ptr<T>(rstd), ptr<T>(x), ptr<T>(w), N, D, eps);
    });
  }

  void rmsnorm_backward_impl(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w,
                             const Tensor& rstd, bool accumulate_dx) override {
    const auto [N, D] = rows_cols(x);
    dispatch(x.dtype(), [&](auto t) {
      using T = decltype(t);
      cpu::rmsnorm_backward(ptr<T>(dx), ptr<T>(dw), ptr<T>(dy), ptr<T>(x), ptr<T>(w), ptr<T>(rstd), N, D,
                            accumulate_dx);
    });
  }

  void rope_forward_impl(Tensor& out, const Tensor& x, const Tensor& pos, const Tensor& inv_freq) override {
    rope(out, x, pos, inv_freq, true);
  }
  void rope_backward_impl(Tensor& dx, const Tensor& dout, const Tensor& pos, const Tensor& inv_freq) override {
    rope(dx, dout, pos, inv_freq, false);
  }

  void attention_forward_impl(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Documents& docs, double scale) override {
    const Tensor& doc_start = docs.doc_start;
    const Dims a = attention_dims("attention_forward", q, k, doc_start);
    dispatch(q.dtype(), [&](auto t) {
      using T = decltype(t);
      cpu::attention_forward(ptr<T>(out), ptr<T>(lse), ptr<T>(q), ptr<T>(k), ptr<T>(v), ptr<int32_t>(doc_start),
                             a.S, a.H, a.Hkv, a.d, scale);
    });
  }

  void attention_backward_impl(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& out,
                               const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Documents& docs, double scale) override {
    const Tensor& doc_start = docs.doc_start;
    const Dims a = attention_dims("attention_backward", q, k, doc_start);
    dispatch(q.dtype(), [&](auto t) {
      using T = decltype(t);
      cpu::attention_backward(ptr<T>(dq), ptr<T>(dk), ptr<T>(dv), ptr<T>(dout), ptr<T>(out), ptr<T>(lse),
                              ptr<T>(q), ptr<T>(k), ptr<T>(v), ptr<int32_t>(doc_start), a.S, a.H, a.Hkv, a.d,
                              scale);
    });
  }

  void attention_forward_block_impl(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Documents& docs, int64_t q0, int64_t k0, double scale) override {
    const Tensor& doc_start = docs.doc_start;
    check_doc_starts("attention_forward_block", doc_start);
    dispatch(q.dtype(), [&](auto t) {
      using T = decltype(t);
      cpu::attention_forward_block(ptr<T>(out), ptr<T>(lse), ptr<T>(q), ptr<T>(k), ptr<T>(v),
                                   ptr<int32_t>(doc_start), q.dim(0), k.dim(0), q0, k0, q.dim(1), k.dim(1),
                                   q.dim(2), scale);
    });
  }

  void attention_backward_block_impl(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& out,
                                     const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Documents& docs, int64_t q0, int64_t k0, double scale) override {
    const Tensor& doc_start = docs.doc_start;
    check_doc_starts("attention_backward_block", doc_start);
    dispatch(q.dtype(), [&](auto t) {
      using T = decltype(t);
      cpu::attention_backward_block(ptr<T>(dq), ptr<T>(dk), ptr<T>(dv), ptr<T>(dout), ptr<T>(out), ptr<T>(lse),
                                    ptr<T>(q), ptr<T>(k), ptr<T>(v), ptr<int32_t>(doc_start), q.dim(0), k.dim(0),
                                    q0, k0, q.dim(1), k.dim(1), q.dim(2), scale);
    });
  }

  void attention_merge_impl(Tensor& acc, Tensor& acc_lse, const Tensor& out, const Tensor& lse) override {
    dispatch(out.dtype(), [&](auto t) {
      using T = decltype(t);
      cpu::attention_merge<T, T>(ptr<T>(acc), ptr<T>(acc_lse), ptr<T>(out), ptr<T>(lse), out.dim(0), out.dim(1),
                                 out.dim(2));
    });
  }

  // gate, up, h: [..., F], all the same shape.
  void gated_activation_forward_impl(Tensor& h, const Tensor& gate, const Tensor& up, Activation act) override {
    dispatch(gate.dtype(), [&](auto t) {
      using T = decltype(t);
      cpu::gated_activation_forward(ptr<T>(h), ptr<T>(gate), ptr<T>(up), gate.numel(), act);
    });
  }

  void gated_activation_backward_impl(Tensor& dgate, Tensor& dup, const Tensor& dh, const Tensor& gate,
                                      const Tensor& up, Activation act) override {
    dispatch(gate.dtype(), [&](auto t) {
      using T = decltype(t);
      cpu::gated_activation_backward(ptr<T>(dgate), ptr<T>(dup), ptr<T>(dh), ptr<T>(gate), ptr<T>(up), gate.numel(),
                                     act);
    });
  }

  // losses may be float32 (the interface's type) or the logits' dtype.
  void cross_entropy_forward_backward_impl(Tensor& dlogits, Tensor& losses, const Tensor& logits,
                                           const Tensor& targets, double grad_scale) override {
    const DType dt = logits.dtype();
    const int64_t N = logits.dim(0), V = logits.dim(1);
    check_ids("cross_entropy_forward_backward", "targets", targets, V, true);
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

  void matmul_impl(Tensor& C, const Tensor& A, const Tensor& B, bool trans_a, bool trans_b, double alpha,
                   double beta) override {
    const int64_t M = C.dim(0), N = C.dim(1), K = trans_a ? A.dim(0) : A.dim(1);
    dispatch(A.dtype(), [&](auto t) {
      using T = decltype(t);
      cpu::matmul(ptr<T>(C), ptr<T>(A), ptr<T>(B), M, N, K, trans_a, trans_b, alpha, beta);
    });
  }

  void bias_add_impl(Tensor& y, const Tensor& b) override {
    const int64_t n = b.numel(), N = n == 0 ? 0 : y.numel() / n;
    dispatch(y.dtype(), [&](auto t) {
      using T = decltype(t);
      cpu::bias_add(ptr<T>(y), ptr<T>(b), N, n);
    });
  }

  void bias_backward_impl(Tensor& db, const Tensor& dy) override {
    const int64_t n = db.numel(), N = n == 0 ? 0 : dy.numel() / n;
    dispatch(dy.dtype(), [&](auto t) {
      using T = decltype(t);
      cpu::bias_backward(ptr<T>(db), ptr<T>(dy), N, n);
    });
  }

  void add_impl(Tensor& y, const Tensor& a, const Tensor& b) override {
    dispatch(y.dtype(), [&](auto t) {
      using T = decltype(t);
      cpu::add(ptr<T>(y), ptr<T>(a), ptr<T>(b), y.numel());
    });
  }

  void axpy_impl(Tensor& y, const Tensor& x, double alpha) override {
    if (y.dtype() == DType::BF16) {  // a bfloat16 gradient buffer; x float32
      cpu::axpy_bf16(ptr<cpu::Bf16>(y), ptr<float>(x), alpha, y.numel());
      return;
    }
    dispatch(y.dtype(), [&](auto t) {
      using T = decltype(t);
      cpu::axpy(ptr<T>(y), ptr<T>(x), alpha, y.numel());
    });
  }

  void init_uniform_impl(Tensor& x, uint64_t seed, uint64_t stream, int64_t first, float bound) override {
    dispatch(x.dtype(), [&](auto t) {
      using T = decltype(t);
      T* p = ptr<T>(x);
      const int64_t n = x.numel();
#pragma omp parallel for schedule(static) if (n > 65536)
      for (int64_t i = 0; i < n; ++i)
        p[i] = static_cast<T>(counter_uniform(seed, stream, static_cast<uint64_t>(first + i), bound));
    });
  }

  // dst: [N, Hd, d], src: [N, Hs, d]; heads [dst_head0, +n_heads) of dst from heads [src_head0, +n_heads) of src.
  void copy_heads_impl(Tensor& dst, int64_t dst_head0, const Tensor& src, int64_t src_head0, int64_t n_heads,
                       bool accumulate) override {
    const int64_t N = dst.dim(0), Hd = dst.dim(1), d = dst.dim(2), Hs = src.dim(1);
    dispatch(dst.dtype(), [&](auto t) {
      using T = decltype(t);
      cpu::copy_heads(ptr<T>(dst), Hd, dst_head0, ptr<T>(src), Hs, src_head0, n_heads, N, d, accumulate);
    });
  }

  double sum_squares_impl(const Tensor& x) override {
    if (x.dtype() == DType::BF16) return cpu::sum_squares(ptr<cpu::Bf16>(x), x.numel());
    double s = 0;
    dispatch(x.dtype(), [&](auto t) {
      using T = decltype(t);
      s = cpu::sum_squares(ptr<T>(x), x.numel());
    });
    return s;
  }

  void adamw_step_impl(Tensor& master, Tensor& m, Tensor& v, Tensor& weight, const Tensor& grad,
                       const AdamWParams& p) override {
    const int64_t n = master.numel();
    if (grad.dtype() == DType::BF16) {  // a bfloat16 gradient buffer
      ULY_CHECK(master.dtype() == DType::F32 && weight.dtype() == DType::F32,
                "adamw_step: a bfloat16 gradient takes float32 state and weights, got master " << master.describe());
      cpu::adamw_step(ptr<float>(master), ptr<float>(m), ptr<float>(v), ptr<float>(weight), ptr<cpu::Bf16>(grad), n,
                      p.lr, p.beta1, p.beta2, p.eps, p.weight_decay, p.step, p.grad_scale);
      return;
    }
    dispatch(master.dtype(), [&](auto t) {
      using T = decltype(t);
      cpu::adamw_step(ptr<T>(master), ptr<T>(m), ptr<T>(v), ptr<T>(weight), ptr<T>(grad), n, p.lr, p.beta1, p.beta2,
                      p.eps, p.weight_decay, p.step, p.grad_scale);
    });
  }

  // Fixed chunks summed in a fixed order, so the result does not depend on the thread count.
  double sum_impl(const Tensor& x) override {
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

  // The dimensions of q [S, H, d] and k [S, Hkv, d]; checks that each doc_start[i] lies in [0, i].
  static Dims attention_dims(const char* op, const Tensor& q, const Tensor& k, const Tensor& doc_start) {
    check_doc_starts(op, doc_start);
    return Dims{q.dim(0), q.dim(1), k.dim(1), q.dim(2)};
  }
  // Each doc_start[i] lies in [0, i].
  static void check_doc_starts(const char* op, const Tensor& doc_start) {
    const int32_t* ds = ptr<int32_t>(doc_start);
    for (int64_t i = 0; i < doc_start.numel(); ++i)
      ULY_CHECK(ds[i] >= 0 && ds[i] <= i, op << ": doc_start[" << i << "] = " << ds[i]
                                             << " must lie in [0, " << i
                                             << "] (the first token of query " << i << "'s document)");
  }

  static void rope(Tensor& out, const Tensor& x, const Tensor& pos, const Tensor& inv_freq, bool forward) {
    const int64_t N = x.dim(0), H = x.dim(1), d = x.dim(2);
    dispatch(x.dtype(), [&](auto t) {
      using T = decltype(t);
      if (forward)
        cpu::rope_forward(ptr<T>(out), ptr<T>(x), ptr<int32_t>(pos), ptr<float>(inv_freq), N, H, d);
      else
        cpu::rope_backward(ptr<T>(out), ptr<T>(x), ptr<int32_t>(pos), ptr<float>(inv_freq), N, H, d);
    });
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
