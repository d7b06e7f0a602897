// The ops' argument checks (backend/op_checks.cpp) run once, in Backend's entries,
// for every backend: one table of bad calls (wrong shape, wrong dtype, undefined
// tensor, mismatched heads, ...) is refused by the CPU backend, by the planner
// planning for the CPU and by the planner planning for CUDA in bf16, each time
// naming the op and the argument; one table of good calls is taken by all three.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/documents.h"
#include "backend/planning_backend.h"
#include "expect_error.h"

namespace ulysses::test {
namespace {

// Tensors for one backend: data in its act_dtype, accumulators (statistics, losses,
// weight gradients, AdamW state) in its accumulator dtype, int32 indices on the host;
// all zero where there is memory (so ids are in range and the CPU's value checks pass).
struct Args {
  Backend& be;
  Tensor make(const Shape& s, DType dt) {
    Tensor t = be.empty(s, dt);
    be.zero(t);
    return t;
  }
  Tensor D(const Shape& s) { return make(s, be.act_dtype()); }
  Tensor A(const Shape& s) { return make(s, be.accumulator_dtype(be.act_dtype())); }
  Tensor I(const Shape& s) {
    Tensor t = Tensor::empty(s, DType::I32);
    t.zero_();
    return t;
  }
  Tensor inv_freq(int64_t n) {
    Tensor t = Tensor::empty({n}, DType::F32);
    t.zero_();
    return t;
  }
  Documents docs(int64_t S) { return single_document(be, S); }
};

// Shapes: N = 3 tokens, hidden 8, vocabulary 5; attention S = 4, H = 4, Hkv = 2, d = 2.
struct Case {
  const char* what;
  const char* op;
  const char* arg;  // named in the message
  std::function<void(Args&)> call;
};

std::vector<Case> bad_calls() {
  auto mm = [](Args& a, const Shape& as, const Shape& bs, const Shape& cs, bool ta = false, bool tb = false) {
    Tensor C = a.D(cs);
    a.be.matmul(C, a.D(as), a.D(bs), ta, tb);
  };
  // Attention over S = 4 tokens, q [4, 4, 2]: forward with k, v, lse and the documents given;
  // backward with q and dv given.
  auto attn = [](Args& a, const Shape& ks, const Shape& vs, Tensor lse, const Documents& docs) {
    Tensor o = a.D({4, 4, 2});
    a.be.attention_forward(o, lse, a.D({4, 4, 2}), a.D(ks), a.D(vs), docs, 1.0);
  };
  // Cross-entropy of logits (also the gradient) into losses, with n targets.
  auto ce = [](Args& a, const Shape& logits, Tensor losses, int64_t n) {
    Tensor lg = a.D(logits);
    a.be.cross_entropy_forward_backward(lg, losses, lg, a.I({n}), 1.0);
  };
  // AdamW over 6 elements with master and m given.
  auto adam = [](Args& a, Tensor master, Tensor m) {
    Tensor v = a.A({6}), w = a.D({6});
    a.be.adamw_step(master, m, v, w, a.A({6}), AdamWParams{});
  };
  auto attn_bwd = [](Args& a, const Tensor& q, const Shape& dvs) {
    Tensor dq = a.D({4, 4, 2}), dk = a.D({4, 2, 2}), dv = a.D(dvs), o = a.D({4, 4, 2});
    a.be.attention_backward(dq, dk, dv, o, o, a.A({4, 4}), q, a.D({4, 2, 2}), a.D({4, 2, 2}), a.docs(4), 1.0);
  };
  return {
      {"float ids", "embedding_forward", "ids",
       [](Args& a) { Tensor out = a.D({3, 8}); a.be.embedding_forward(out, a.make({3}, DType::F32), a.D({5, 8})); }},
      {"out of the wrong width", "embedding_forward", "out",
       [](Args& a) { Tensor out = a.D({3, 7}); a.be.embedding_forward(out, a.I({3}), a.D({5, 8})); }},
      {"undefined table", "embedding_forward", "table",
       [](Args& a) { Tensor out = a.D({3, 8}); a.be.embedding_forward(out, a.I({3}), Tensor{}); }},
      {"int32 table gradient", "embedding_backward", "dtable",
       [](Args& a) { Tensor dt = a.make({5, 8}, DType::I32); a.be.embedding_backward(dt, a.D({3, 8}), a.I({3})); }},
      {"1-D table gradient", "embedding_backward", "dtable",
       [](Args& a) { Tensor dt = a.A({40}); a.be.embedding_backward(dt, a.D({3, 8}), a.I({3})); }},
      {"weight of the wrong width", "rmsnorm_forward", "w",
       [](Args& a) { Tensor y = a.D({3, 8}), r = a.A({3}); a.be.rmsnorm_forward(y, r, a.D({3, 8}), a.D({7}), 1e-5); }},
      {"rstd of the wrong length", "rmsnorm_forward", "rstd",
       [](Args& a) { Tensor y = a.D({3, 8}), r = a.A({2}); a.be.rmsnorm_forward(y, r, a.D({3, 8}), a.D({8}), 1e-5); }},
      {"float16 input", "rmsnorm_forward", "x",
       [](Args& a) {
         Tensor y = a.D({3, 8}), r = a.A({3});
         a.be.rmsnorm_forward(y, r, a.make({3, 8}, DType::F16), a.D({8}), 1e-5);
       }},
      {"int32 rstd", "rmsnorm_forward", "rstd",
       [](Args& a) {
         Tensor y = a.D({3, 8}), r = a.make({3}, DType::I32);
         a.be.rmsnorm_forward(y, r, a.D({3, 8}), a.D({8}), 1e-5);
       }},
      {"weight gradient of the wrong width", "rmsnorm_backward", "dw",
       [](Args& a) {
         Tensor dx = a.D({3, 8}), dw = a.A({9});
         a.be.rmsnorm_backward(dx, dw, a.D({3, 8}), a.D({3, 8}), a.D({8}), a.A({3}));
       }},
      {"dx of another shape", "rmsnorm_backward", "dx",
       [](Args& a) {
         Tensor dx = a.D({3, 7}), dw = a.A({8});
         a.be.rmsnorm_backward(dx, dw, a.D({3, 8}), a.D({3, 8}), a.D({8}), a.A({3}));
       }},
      {"too few positions", "rope_forward", "pos",
       [](Args& a) { Tensor o = a.D({3, 2, 6}); a.be.rope_forward(o, a.D({3, 2, 6}), a.I({2}), a.inv_freq(3)); }},
      {"float64 inv_freq", "rope_forward", "inv_freq",
       [](Args& a) {
         Tensor o = a.D({3, 2, 6}), f = Tensor::empty({3}, DType::F64);
         a.be.rope_forward(o, a.D({3, 2, 6}), a.I({3}), f);
       }},
      {"inv_freq of the wrong length", "rope_forward", "inv_freq",
       [](Args& a) { Tensor o = a.D({3, 2, 6}); a.be.rope_forward(o, a.D({3, 2, 6}), a.I({3}), a.inv_freq(2)); }},
      {"odd head dim", "rope_backward", "dout",
       [](Args& a) { Tensor dx = a.D({3, 2, 5}); a.be.rope_backward(dx, a.D({3, 2, 5}), a.I({3}), a.inv_freq(2)); }},
      {"query heads not a multiple of kv heads", "attention_forward", "Hkv",
       [attn](Args& a) { attn(a, {4, 3, 2}, {4, 3, 2}, a.A({4, 4}), a.docs(4)); }},
      {"v of another head size", "attention_forward", "v",
       [attn](Args& a) { attn(a, {4, 2, 2}, {4, 2, 3}, a.A({4, 4}), a.docs(4)); }},
      {"lse of the wrong shape", "attention_forward", "lse",
       [attn](Args& a) { attn(a, {4, 2, 2}, {4, 2, 2}, a.A({4, 3}), a.docs(4)); }},
      {"lse in int32", "attention_forward", "lse",
       [attn](Args& a) { attn(a, {4, 2, 2}, {4, 2, 2}, a.make({4, 4}, DType::I32), a.docs(4)); }},
      {"no documents", "attention_forward", "doc_start",
       [attn](Args& a) { attn(a, {4, 2, 2}, {4, 2, 2}, a.A({4, 4}), Documents{}); }},
      {"documents of another length", "attention_forward", "doc_start",
       [attn](Args& a) { attn(a, {4, 2, 2}, {4, 2, 2}, a.A({4, 4}), a.docs(3)); }},
      {"dv of q's shape", "attention_backward", "dv",
       [attn_bwd](Args& a) { attn_bwd(a, a.D({4, 4, 2}), {4, 4, 2}); }},
      {"undefined q", "attention_backward", "q", [attn_bwd](Args& a) { attn_bwd(a, Tensor{}, {4, 2, 2}); }},
      {"up of another shape", "gated_activation_forward", "up",
       [](Args& a) {
         Tensor h = a.D({2, 6});
         a.be.gated_activation_forward(h, a.D({2, 6}), a.D({2, 5}), Activation::SiLU);
       }},
      {"int32 gate gradient", "gated_activation_backward", "dgate",
       [](Args& a) {
         Tensor dg = a.make({2, 6}, DType::I32), du = a.D({2, 6});
         a.be.gated_activation_backward(dg, du, a.D({2, 6}), a.D({2, 6}), a.D({2, 6}), Activation::SiLU);
       }},
      {"losses of the wrong length", "cross_entropy_forward_backward", "losses",
       [ce](Args& a) { ce(a, {2, 5}, a.A({3}), 2); }},
      {"int32 losses", "cross_entropy_forward_backward", "losses",
       [ce](Args& a) { ce(a, {2, 5}, a.make({2}, DType::I32), 2); }},
      {"targets of the wrong length", "cross_entropy_forward_backward", "targets",
       [ce](Args& a) { ce(a, {2, 5}, a.A({2}), 3); }},
      {"an empty vocabulary", "cross_entropy_forward_backward", "logits",
       [ce](Args& a) { ce(a, {2, 0}, a.A({2}), 2); }},
      {"inner dimensions differ (trans_a)", "matmul", "op(A)",
       [mm](Args& a) { mm(a, {3, 4}, {4, 5}, {3, 5}, true, false); }},
      {"inner dimensions differ (trans_b)", "matmul", "op(B)",
       [mm](Args& a) { mm(a, {3, 4}, {4, 5}, {3, 5}, false, true); }},
      {"C transposed", "matmul", "C", [mm](Args& a) { mm(a, {3, 4}, {4, 5}, {5, 3}); }},
      {"3-D A", "matmul", "A", [mm](Args& a) { mm(a, {3, 4, 1}, {4, 5}, {3, 5}); }},
      {"float16 B", "matmul", "B",
       [](Args& a) { Tensor C = a.D({3, 5}); a.be.matmul(C, a.D({3, 4}), a.make({4, 5}, DType::F16), false, false); }},
      {"int32 C", "matmul", "C",
       [](Args& a) { Tensor C = a.make({3, 5}, DType::I32); a.be.matmul(C, a.D({3, 4}), a.D({4, 5}), false, false); }},
      {"element counts differ", "add", "b",
       [](Args& a) { Tensor y = a.D({3, 5}); a.be.add(y, a.D({3, 5}), a.D({4, 5})); }},
      {"element counts differ", "axpy", "x", [](Args& a) { Tensor y = a.D({3, 5}); a.be.axpy(y, a.D({3, 4}), 1.0); }},
      {"undefined y", "axpy", "y", [](Args& a) { Tensor y; a.be.axpy(y, a.D({3, 4}), 1.0); }},
      {"heads out of range", "copy_heads", "src",
       [](Args& a) { Tensor dst = a.D({3, 2, 4}); a.be.copy_heads(dst, 1, a.D({3, 4, 4}), 0, 2, false); }},
      {"token counts differ", "copy_heads", "src",
       [](Args& a) { Tensor dst = a.D({3, 2, 4}); a.be.copy_heads(dst, 0, a.D({2, 4, 4}), 0, 2, false); }},
      {"moment of another size", "adamw_step", "m", [adam](Args& a) { adam(a, a.A({6}), a.A({5})); }},
      {"int32 master", "adamw_step", "master",
       [adam](Args& a) { adam(a, a.make({6}, DType::I32), a.A({6})); }},
      {"an undefined tensor among many", "sum_squares_all", "x",
       [](Args& a) {
         const Tensor g = a.D({4}), u;
         a.be.sum_squares_all({&g, &u});
       }},
      {"int32 data", "sum_squares", "x", [](Args& a) { a.be.sum_squares(a.make({4}, DType::I32)); }},
      {"element counts differ", "copy", "dst", [](Args& a) { Tensor d = a.D({4}); a.be.copy(d, a.D({5})); }},
      {"int32 to float", "copy", "src", [](Args& a) { Tensor d = a.D({4}); a.be.copy(d, a.I({4})); }},
      {"undefined tensor", "zero", "t", [](Args& a) { Tensor t; a.be.zero(t); }},
      {"undefined tensor", "sum", "x", [](Args& a) { a.be.sum(Tensor{}); }},
  };
}

std::vector<Case> good_calls() {
  return {
      {"embedding", "embedding_forward", "",
       [](Args& a) {
         Tensor out = a.D({3, 8}), dt = a.A({5, 8});
         a.be.embedding_forward(out, a.I({3}), a.D({5, 8}));
         a.be.embedding_backward(dt, out, a.I({3}));
       }},
      {"rmsnorm", "rmsnorm_forward", "",
       [](Args& a) {
         Tensor y = a.D({3, 8}), r = a.A({3}), dx = a.D({3, 8}), dw = a.A({8});
         a.be.rmsnorm_forward(y, r, a.D({3, 8}), a.D({8}), 1e-5);
         a.be.rmsnorm_backward(dx, dw, y, a.D({3, 8}), a.D({8}), r);
       }},
      {"rope", "rope_forward", "",
       [](Args& a) {
         Tensor o = a.D({3, 2, 6});
         a.be.rope_forward(o, a.D({3, 2, 6}), a.I({3}), a.inv_freq(3));
         a.be.rope_backward(o, a.D({3, 2, 6}), a.I({3}), a.inv_freq(3));
       }},
      {"attention", "attention_forward", "",
       [](Args& a) {
         Tensor q = a.D({4, 4, 2}), k = a.D({4, 2, 2}), v = a.D({4, 2, 2}), o = a.D({4, 4, 2}), lse = a.A({4, 4});
         const Documents docs = make_documents(a.be, std::vector<int32_t>{0, 0, 2, 2});
         a.be.attention_forward(o, lse, q, k, v, docs, 1.0);
         Tensor dq = a.D({4, 4, 2}), dk = a.D({4, 2, 2}), dv = a.D({4, 2, 2});
         a.be.attention_backward(dq, dk, dv, o, o, lse, q, k, v, docs, 1.0);
       }},
      {"gated activation", "gated_activation_forward", "",
       [](Args& a) {
         Tensor h = a.D({2, 6}), dg = a.D({2, 6}), du = a.D({2, 6});
         a.be.gated_activation_forward(h, a.D({2, 6}), a.D({2, 6}), Activation::SiLU);
         a.be.gated_activation_backward(dg, du, h, a.D({2, 6}), a.D({2, 6}), Activation::SiLU);
       }},
      {"cross-entropy, float32 losses", "cross_entropy_forward_backward", "",
       [](Args& a) {
         Tensor lg = a.D({2, 5}), l = a.make({2}, DType::F32);
         a.be.cross_entropy_forward_backward(lg, l, lg, a.I({2}), 1.0);
       }},
      {"matmul into the data and the accumulator dtype", "matmul", "",
       [](Args& a) {
         Tensor C = a.D({3, 5}), Cacc = a.A({3, 5});
         a.be.matmul(C, a.D({4, 3}), a.D({5, 4}), true, true);
         a.be.matmul(Cacc, a.D({3, 4}), a.D({4, 5}), false, false, 1.0, 1.0);
       }},
      {"add, axpy (also into the accumulator)", "add", "",
       [](Args& a) {
         Tensor y = a.D({3, 5}), acc = a.A({15});
         a.be.add(y, a.D({3, 5}), a.D({15}));
         a.be.axpy(y, a.D({3, 5}), 0.5);
         a.be.axpy(acc, y, 0.5);
       }},
      {"copy_heads", "copy_heads", "",
       [](Args& a) {
         Tensor dst = a.D({3, 2, 4});
         a.be.copy_heads(dst, 0, a.D({3, 4, 4}), 2, 2, true);
       }},
      {"copy, zero, sum", "copy", "",
       [](Args& a) {
         Tensor d = a.D({4}), f = Tensor::empty({4}, DType::F32);
         f.zero_();
         a.be.copy(d, f);
         a.be.copy(f, d);
         a.be.zero(d);
         (void)a.be.sum(a.I({4}));
       }},
  };
}

struct Named {
  std::string name;
  std::unique_ptr<Backend> be;
};

std::vector<Named> backends() {
  std::vector<Named> v;
  v.push_back({"cpu", make_cpu_backend()});
  v.push_back({"plan for cpu float32", make_planning_backend(DType::F32, Device::CPU)});
  v.push_back({"plan for cuda bfloat16", make_planning_backend(DType::BF16, Device::CUDA)});
  return v;
}

TEST(OpChecks, EveryBackendRefusesTheSameBadCallsNamingOpAndArgument) {
  const std::vector<Case> cases = bad_calls();
  for (Named& b : backends()) {
    for (const Case& c : cases) {
      SCOPED_TRACE(b.name + ": " + c.op + ", " + c.what);
      Args a{*b.be};
      const std::string m = expect_error([&] { c.call(a); });
      EXPECT_EQ(m.rfind(std::string(c.op) + ": ", 0), 0u) << "the message starts with the op: " << m;
      EXPECT_NE(m.find(c.arg), std::string::npos) << "the message names '" << c.arg << "': " << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
  }
}

TEST(OpChecks, EveryBackendTakesTheGoodCalls) {
  const std::vector<Case> cases = good_calls();
  for (Named& b : backends()) {
    for (const Case& c : cases) {
      SCOPED_TRACE(b.name + ": " + c.what);
      Args a{*b.be};
      EXPECT_NO_THROW(c.call(a));
    }
  }
}

// The dtype rules follow the device: float32/float64 data with same-dtype statistics
// on the CPU; float32/bfloat16 data with float32 statistics on CUDA.
TEST(OpChecks, DtypeRulesFollowTheDevice) {
  auto cpu = make_cpu_backend();
  auto cuda = make_planning_backend(DType::BF16, Device::CUDA);
  EXPECT_TRUE(cpu->takes_data_dtype(DType::F64));
  EXPECT_FALSE(cpu->takes_data_dtype(DType::BF16));
  EXPECT_TRUE(cuda->takes_data_dtype(DType::BF16));
  EXPECT_FALSE(cuda->takes_data_dtype(DType::F64));
  EXPECT_EQ(cpu->accumulator_dtype(DType::F64), DType::F64);
  EXPECT_EQ(cuda->accumulator_dtype(DType::BF16), DType::F32);

  // rmsnorm in bf16 with float32 rstd: CUDA's rule; the CPU refuses the bf16 input.
  auto call = [](Backend& be, DType data, DType stat) {
    Tensor y = be.empty({3, 8}, data), r = be.empty({3}, stat);
    be.rmsnorm_forward(y, r, be.empty({3, 8}, data), be.empty({8}, data), 1e-5);
  };
  EXPECT_NO_THROW(call(*cuda, DType::BF16, DType::F32));
  EXPECT_ERROR(call(*cuda, DType::BF16, DType::BF16), "rmsnorm_forward: rstd", "expected float32");
  EXPECT_ERROR(call(*cuda, DType::F64, DType::F64), "rmsnorm_forward: x", "float32 or bfloat16");
  EXPECT_ERROR(call(*cpu, DType::BF16, DType::F32), "rmsnorm_forward: x", "float32 or float64");
  EXPECT_ERROR(call(*cpu, DType::F64, DType::F32), "rmsnorm_forward: rstd", "expected float64");

  // Losses: float32 or the accumulator dtype (float64 for float64 logits on the CPU).
  auto ce = [](Backend& be, DType data, DType loss) {
    Tensor lg = be.empty({2, 5}, data), l = be.empty({2}, loss), t = Tensor::empty({2}, DType::I32);
    be.zero(lg);
    t.zero_();
    be.cross_entropy_forward_backward(lg, l, lg, t, 1.0);
  };
  EXPECT_NO_THROW(ce(*cpu, DType::F64, DType::F64));
  EXPECT_NO_THROW(ce(*cpu, DType::F64, DType::F32));
  EXPECT_ERROR(ce(*cuda, DType::BF16, DType::BF16), "cross_entropy_forward_backward: losses", "expected float32");

  // matmul's C: A's dtype or the accumulator dtype; float32 A into bfloat16 C is refused.
  auto mm = [](Backend& be, DType ab, DType c) {
    Tensor C = be.empty({2, 2}, c);
    be.matmul(C, be.empty({2, 2}, ab), be.empty({2, 2}, ab), false, false);
  };
  EXPECT_NO_THROW(mm(*cuda, DType::BF16, DType::F32));
  EXPECT_ERROR(mm(*cuda, DType::F32, DType::BF16), "matmul: C", "expected float32");
}

// Where tensors must be: the CPU backend takes host tensors only; index tensors too.
TEST(OpChecks, CpuRefusesDeviceTensors) {
  auto cpu = make_cpu_backend();
  float fake[16] = {};
  int32_t ids[3] = {};
  const Tensor dev = Tensor::borrow(fake, {2, 8}, DType::F32, Device::CUDA);
  const Tensor dev_ids = Tensor::borrow(ids, {3}, DType::I32, Device::CUDA);
  Tensor out = cpu->empty({3, 8}, DType::F32), y = cpu->empty({2, 8}, DType::F32), r = cpu->empty({2}, DType::F32);
  EXPECT_ERROR(cpu->embedding_forward(out, dev_ids, cpu->empty({5, 8}, DType::F32)), "embedding_forward: ids",
               "cuda", "host tensors");
  EXPECT_ERROR(cpu->rmsnorm_forward(y, r, dev, cpu->empty({8}, DType::F32), 1e-5), "rmsnorm_forward: x", "cuda",
               "host tensors");
  Tensor t = Tensor::borrow(fake, {16}, DType::F32, Device::CUDA);
  EXPECT_ERROR(cpu->zero(t), "zero: t", "host tensors");
  // The planner holds its tensors whatever their device: it checks shapes and dtypes only.
  auto plan = make_planning_backend(DType::F32, Device::CUDA);
  EXPECT_NO_THROW(plan->rmsnorm_forward(y, r, dev, cpu->empty({8}, DType::F32), 1e-5));
}

}  // namespace
}  // namespace ulysses::test
