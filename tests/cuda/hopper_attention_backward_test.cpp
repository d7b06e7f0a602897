// The Hopper (sm_90a, wgmma) attention backward (hopper_attention_backward) against the fp32 GPU twin's
// backward (attention_fp32.h, on the same bf16-rounded inputs and the twin's own forward) and beside
// our FA2 backward (attention_backward, on the FA2 forward's out and lse, as the Hopper backward),
// over sweeps of sequence lengths (1, 7, 64, 127, 128, 129, 300, 1000, 4097), head layouts (1/1, 4/1,
// 32/8, 8/8), single and packed documents, sliding windows, d 128 and 64, for each variant (2: TMA
// loads and TMA-reduced dQ; 3: 2 with consumers coupled one pair late; 4: 2 with K and V in registers
// at d 64; 5: 4 with dV issued early; 6: 5 with the dQ output pipelined; 7: 5 with the dQ reductions
// issued by a producer warp; 9: consumers split by product). Outputs and the workspace are poisoned
// before every run (an unwritten element fails as NaN); the Hopper backward runs twice on a dirty
// workspace.
// Errors are relative (grad_error: with an absolute floor where the reference gradient vanishes).
// And the engine's opt-in (ULYSSES_ATTENTION=hopper with ULYSSES_HOPPER_BWD=2, 3, 5, 6, 7 or 9) through the Backend
// interface. Fails without a GPU (CudaTest); skips on a GPU that is not sm_90.
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/attention.h"
#include "backend/cuda/attention_fp32.h"
#include "backend/cuda/hopper_attention.h"
#include "backend/documents.h"
#include "core/error.h"
#include "cuda/cuda_test_util.h"
#include "cuda/hopper_engine_check.h"
#include "test_util.h"

namespace {

using ulysses::cuda_test::DeviceBuffer;
using bf16 = __nv_bfloat16;

class HopperAttentionBackward : public ulysses::cuda_test::CudaTest {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (HasFatalFailure()) return;
    std::string why;
    if (!ulysses::cuda::hopper_attention_backward_supported(128, 8, 8, &why))
      GTEST_SKIP() << "Hopper backward: " << why;
  }
};
// A variant of the kernel, and for variant 3 whether its dQ order is deterministic.
struct Variant {
  int v;
  bool deterministic = false;
};
class HopperAttentionBackwardVariant : public HopperAttentionBackward, public ::testing::WithParamInterface<Variant> {};

// Documents for a sweep case: boundaries at S/3, a one-token document, one of 70 tokens, the rest.
std::vector<int64_t> packed_lengths(int64_t S) {
  if (S < 4) return {1};
  return {std::max<int64_t>(S / 3, 1), 1, 70};
}

// ||x - ref|| / max(||ref||, 1e-5 sqrt(n)): relative, except where the reference gradient is ~0 (S = 1:
// dS = P (dP - D) cancels to rounding noise) and an absolute floor far below the typical gradient
// (~1e-2 per element for these inputs) applies. NaN or inf: infinity.
double grad_error(const std::vector<float>& x, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i]) || !std::isfinite(ref[i])) return INFINITY;
    num += (double(x[i]) - ref[i]) * (double(x[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-5 * std::sqrt(double(x.size())));
}

struct Case {
  int64_t S, H, Hkv, d;
  std::vector<int64_t> doc_lens;  // empty: one document
  double q_range = 1.0;           // larger: sharper softmax
  int64_t window = 0;             // > 0: a sliding window of that many keys, folded into doc_start
};

void run_case(const Case& c, Variant variant, cudaStream_t stream) {
  const uint64_t seed = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
  SCOPED_TRACE("variant " + std::to_string(variant.v) + (variant.deterministic ? " deterministic" : "") + " S=" + std::to_string(c.S) + " H=" + std::to_string(c.H) + " Hkv=" + std::to_string(c.Hkv) +
               " d=" + std::to_string(c.d) + " docs=" + std::to_string(c.doc_lens.size() + 1) +
               " window=" + std::to_string(c.window) + " seed=" + std::to_string(seed));
  const int64_t S = c.S, H = c.H, Hkv = c.Hkv, d = c.d;
  const double scale = 1.0 / std::sqrt(double(d));
  const size_t nq = size_t(S * H * d), nk = size_t(S * Hkv * d), nl = size_t(H * S);
  using ulysses::cuda_test::rounded;
  const auto q = rounded<bf16>(ulysses::test::random_vector_f(nq, seed, -c.q_range, c.q_range));
  const auto k = rounded<bf16>(ulysses::test::random_vector_f(nk, seed + 1, -1.0, 1.0));
  const auto v = rounded<bf16>(ulysses::test::random_vector_f(nk, seed + 2, -1.0, 1.0));
  const auto dout = rounded<bf16>(ulysses::test::random_vector_f(nq, seed + 3, -1.0, 1.0));
  const auto doc = ulysses::cuda_test::with_window(ulysses::cuda_test::doc_start_of_lengths(S, c.doc_lens), c.window);

  DeviceBuffer<bf16> qb(nq), kb(nk), vb(nk), dob(nq), out_b(nq);
  DeviceBuffer<bf16> dq_h(nq), dk_h(nk), dv_h(nk), dq_f(nq), dk_f(nk), dv_f(nk);
  DeviceBuffer<float> qf(nq), kf(nk), vf(nk), dof(nq), out_ref(nq), lse_ref(nl), lse_b(nl);
  DeviceBuffer<float> dq_r(nq), dk_r(nk), dv_r(nk);
  DeviceBuffer<int32_t> ddoc{size_t(S)};
  ulysses::cuda_test::upload(qb, q);
  ulysses::cuda_test::upload(kb, k);
  ulysses::cuda_test::upload(vb, v);
  ulysses::cuda_test::upload(dob, dout);
  ulysses::cuda_test::upload(qf, q);
  ulysses::cuda_test::upload(kf, k);
  ulysses::cuda_test::upload(vf, v);
  ulysses::cuda_test::upload(dof, dout);
  ulysses::cuda_test::upload_i32(ddoc, doc);
  for (auto* b : {&dq_h, &dk_h, &dv_h, &dq_f, &dk_f, &dv_f}) b->poison();

  const size_t ws_f32 = ulysses::cuda::attention_backward_f32_workspace_bytes(S, H, Hkv, d);
  const size_t ws = ulysses::cuda::attention_backward_workspace_bytes(S, H, Hkv, d);
  DeviceBuffer<float> wsf(ws_f32 / 4 + 1), wsb(ws / 4 + 1);
  wsb.poison();

  ulysses::cuda::attention_forward_f32(out_ref.get(), lse_ref.get(), qf.get(), kf.get(), vf.get(), ddoc.get(), S, H,
                                       Hkv, d, scale, stream);
  ulysses::cuda::attention_backward_f32(dq_r.get(), dk_r.get(), dv_r.get(), dof.get(), out_ref.get(), lse_ref.get(),
                                        qf.get(), kf.get(), vf.get(), ddoc.get(), S, H, Hkv, d, scale, wsf.get(),
                                        ws_f32, stream);
  ulysses::cuda::attention_forward(out_b.get(), lse_b.get(), qb.get(), kb.get(), vb.get(), ddoc.get(), S, H, Hkv, d,
                                   scale, stream);
  ulysses::cuda::attention_backward(dq_f.get(), dk_f.get(), dv_f.get(), dob.get(), out_b.get(), lse_b.get(), qb.get(),
                                    kb.get(), vb.get(), ddoc.get(), S, H, Hkv, d, scale, wsb.get(), ws, stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  wsb.poison();
  const auto ref_q = ulysses::cuda_test::download(dq_r), ref_k = ulysses::cuda_test::download(dk_r),
             ref_v = ulysses::cuda_test::download(dv_r);
  const auto fq = ulysses::cuda_test::download(dq_f), fk = ulysses::cuda_test::download(dk_f),
             fv = ulysses::cuda_test::download(dv_f);
  std::vector<float> first_dq;  // deterministic: the second run's dq must equal the first's bitwise
  for (int run = 0; run < 2; ++run) {  // the second on the first's (dirty) workspace
    SCOPED_TRACE("run " + std::to_string(run));
    for (auto* b : {&dq_h, &dk_h, &dv_h}) b->poison();
    ulysses::cuda::hopper_attention_backward(dq_h.get(), dk_h.get(), dv_h.get(), dob.get(), out_b.get(), lse_b.get(),
                                             qb.get(), kb.get(), vb.get(), ddoc.get(), S, H, Hkv, d, scale, wsb.get(),
                                             ws, stream, variant.v, variant.deterministic);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    CUDA_CHECK(cudaGetLastError());
    const auto hq = ulysses::cuda_test::download(dq_h), hk = ulysses::cuda_test::download(dk_h),
               hv = ulysses::cuda_test::download(dv_h);
    EXPECT_EQ(ulysses::cuda_test::count_nan(hq), 0u) << "dq: NaN or never-written elements";
    EXPECT_EQ(ulysses::cuda_test::count_nan(hk), 0u) << "dk: NaN or never-written elements";
    EXPECT_EQ(ulysses::cuda_test::count_nan(hv), 0u) << "dv: NaN or never-written elements";
    const double eq = grad_error(hq, ref_q), ek = grad_error(hk, ref_k), ev = grad_error(hv, ref_v);
    const double fq_e = grad_error(fq, ref_q), fk_e = grad_error(fk, ref_k), fv_e = grad_error(fv, ref_v);
    const double xq = grad_error(hq, fq), xk = grad_error(hk, fk), xv = grad_error(hv, fv);
    if (run == 0)
      std::printf("  S=%-5lld H=%-2lld Hkv=%-2lld d=%-3lld docs=%zu  vs fp32: dq %.2e dk %.2e dv %.2e (fa2 %.2e %.2e "
                  "%.2e); vs fa2: %.2e %.2e %.2e\n",
                  (long long)S, (long long)H, (long long)Hkv, (long long)d, c.doc_lens.size() + 1, eq, ek, ev, fq_e,
                  fk_e, fv_e, xq, xk, xv);
    EXPECT_LE(eq, 2e-2) << "dq vs the fp32 twin (fa2: " << fq_e << ")";
    EXPECT_LE(ek, 2e-2) << "dk vs the fp32 twin (fa2: " << fk_e << ")";
    EXPECT_LE(ev, 2e-2) << "dv vs the fp32 twin (fa2: " << fv_e << ")";
    EXPECT_LE(eq, std::max(2.0 * fq_e, 1e-2)) << "dq: well above fa2's error (" << fq_e << ")";
    EXPECT_LE(ek, std::max(2.0 * fk_e, 1e-2)) << "dk: well above fa2's error (" << fk_e << ")";
    EXPECT_LE(ev, std::max(2.0 * fv_e, 1e-2)) << "dv: well above fa2's error (" << fv_e << ")";
    if (variant.deterministic && run == 0) first_dq = hq;
    if (variant.deterministic && run == 1)
      EXPECT_EQ(0, std::memcmp(first_dq.data(), hq.data(), hq.size() * sizeof(float)))
          << "deterministic: dq differs between two runs";
  }
}

const std::vector<int64_t> kSizes = {1, 7, 64, 127, 128, 129, 300, 1000, 4097};
const std::vector<std::pair<int64_t, int64_t>> kHeads = {{1, 1}, {4, 1}, {32, 8}, {8, 8}};

void sweep(int64_t d, bool packed, Variant variant, cudaStream_t stream) {
  for (int64_t S : kSizes)
    for (auto [H, Hkv] : kHeads) {
      run_case({S, H, Hkv, d, packed ? packed_lengths(S) : std::vector<int64_t>{}}, variant, stream);
      if (::testing::Test::HasFailure()) return;  // the first failing case is the useful one
    }
}

// Small cases first (the memcheck run of bench/device/hopper_bwd.sh uses D128Small).
TEST_P(HopperAttentionBackwardVariant, D128Small) { run_case({129, 2, 1, 128, {5, 1, 60}}, GetParam(), stream); }
TEST_P(HopperAttentionBackwardVariant, D64Small) { run_case({129, 2, 1, 64, {5, 1, 60}}, GetParam(), stream); }
TEST_P(HopperAttentionBackwardVariant, D128SharpSoftmax) {
  run_case({1000, 4, 2, 128, {450, 3}, 4.0}, GetParam(), stream);
}
TEST_P(HopperAttentionBackwardVariant, D128ManySmallDocuments) {
  run_case({2000, 8, 2, 128, {1, 129, 1, 333, 64, 200, 1, 127, 128, 5}}, GetParam(), stream);
}
// Sliding windows (Mistral's), folded into doc_start as the engine does. The engine passes windowed
// rows only to variant 3 (cuda_backend_ops.cpp), the one these passed on a GPU (H100, 2026-12-07).
TEST_P(HopperAttentionBackwardVariant, D128SlidingWindow) {
  run_case({1000, 4, 2, 128, {450, 3}, 1.0, 100}, GetParam(), stream);
  run_case({2000, 8, 2, 128, {}, 1.0, 300}, GetParam(), stream);
}
TEST_P(HopperAttentionBackwardVariant, D64SlidingWindow) {
  run_case({1500, 4, 1, 64, {700}, 1.0, 129}, GetParam(), stream);
}
TEST_P(HopperAttentionBackwardVariant, D128SingleDocumentSweep) { sweep(128, false, GetParam(), stream); }
TEST_P(HopperAttentionBackwardVariant, D128PackedDocumentsSweep) { sweep(128, true, GetParam(), stream); }
TEST_P(HopperAttentionBackwardVariant, D64SingleDocumentSweep) { sweep(64, false, GetParam(), stream); }
TEST_P(HopperAttentionBackwardVariant, D64PackedDocumentsSweep) { sweep(64, true, GetParam(), stream); }
INSTANTIATE_TEST_SUITE_P(Hopper, HopperAttentionBackwardVariant,
                         ::testing::Values(Variant{2}, Variant{3}, Variant{3, true}, Variant{4}, Variant{5}, Variant{6},
                                           Variant{7}, Variant{9}, Variant{11}),
                         [](const ::testing::TestParamInfo<Variant>& i) {
                           return "v" + std::to_string(i.param.v) + (i.param.deterministic ? "det" : "");
                         });

// The engine's opt-in: with ULYSSES_ATTENTION=hopper and ULYSSES_HOPPER_BWD=5 the backend's forward
// and backward run the Hopper kernels; both against the CPU backend, two packed documents. The second:
// the TMA forward (variant 3) and the TMA backward (variant 2) together.
TEST_F(HopperAttentionBackward, BackendOptIn) {
  ulysses::cuda_test::expect_engine_attention_matches_cpu(
      {{"ULYSSES_ATTENTION", "hopper"}, {"ULYSSES_HOPPER_BWD", "5"}}, 80, /*check_forward=*/false);
}
TEST_F(HopperAttentionBackward, BackendOptInTma) {
  ulysses::cuda_test::expect_engine_attention_matches_cpu(
      {{"ULYSSES_ATTENTION", "hopper"}, {"ULYSSES_HOPPER_VARIANT", "3"}, {"ULYSSES_HOPPER_BWD", "2"}}, 81,
      /*check_forward=*/true);
}

// Variant 6 (variant 2 with dV issued early and the dQ output pipelined) through the engine.
TEST_F(HopperAttentionBackward, BackendOptInPipelined) {
  ulysses::cuda_test::expect_engine_attention_matches_cpu(
      {{"ULYSSES_ATTENTION", "hopper"}, {"ULYSSES_HOPPER_VARIANT", "3"}, {"ULYSSES_HOPPER_BWD", "6"}}, 90,
      /*check_forward=*/false);
}

// Variant 7 (variant 5 with the dQ reductions issued by the producer's dQ writer warp) through the engine.
TEST_F(HopperAttentionBackward, BackendOptInDqWriter) {
  ulysses::cuda_test::expect_engine_attention_matches_cpu(
      {{"ULYSSES_ATTENTION", "hopper"}, {"ULYSSES_HOPPER_VARIANT", "3"}, {"ULYSSES_HOPPER_BWD", "7"}}, 91,
      /*check_forward=*/false);
}

// Variant 9 (consumers split by product: one S^T, P^T and dV, the other dP^T, dS^T, dK and dQ) through
// the engine.
TEST_F(HopperAttentionBackward, BackendOptInSplit) {
  ulysses::cuda_test::expect_engine_attention_matches_cpu(
      {{"ULYSSES_ATTENTION", "hopper"}, {"ULYSSES_HOPPER_VARIANT", "3"}, {"ULYSSES_HOPPER_BWD", "9"}}, 93,
      /*check_forward=*/false);
}

TEST_F(HopperAttentionBackward, BackendOptInDecoupled) {
  ulysses::cuda_test::expect_engine_attention_matches_cpu(
      {{"ULYSSES_ATTENTION", "hopper"}, {"ULYSSES_HOPPER_VARIANT", "3"}, {"ULYSSES_HOPPER_BWD", "3"}}, 82,
      /*check_forward=*/false);
}

// Deterministic dq at a size where several key blocks add to every query block (8K tokens, 64 key
// blocks): three runs, bitwise equal; and the refusal of the option on another variant.
TEST_F(HopperAttentionBackward, DeterministicRepeats) {
  const int64_t S = 8192, H = 8, Hkv = 2, d = 128;
  const size_t nq = size_t(S * H * d), nk = size_t(S * Hkv * d), nl = size_t(H * S);
  using ulysses::cuda_test::rounded;
  const auto q = rounded<bf16>(ulysses::test::random_vector_f(nq, 11, -1.0, 1.0));
  const auto k = rounded<bf16>(ulysses::test::random_vector_f(nk, 12, -1.0, 1.0));
  const auto v = rounded<bf16>(ulysses::test::random_vector_f(nk, 13, -1.0, 1.0));
  const auto dout = rounded<bf16>(ulysses::test::random_vector_f(nq, 14, -1.0, 1.0));
  DeviceBuffer<bf16> qb(nq), kb(nk), vb(nk), dob(nq), out(nq), dq(nq), dk(nk), dv(nk);
  DeviceBuffer<float> lse(nl);
  DeviceBuffer<int32_t> doc{size_t(S)};
  ulysses::cuda_test::upload(qb, q);
  ulysses::cuda_test::upload(kb, k);
  ulysses::cuda_test::upload(vb, v);
  ulysses::cuda_test::upload(dob, dout);
  ulysses::cuda_test::upload_i32(doc, ulysses::cuda_test::doc_start_of_lengths(S, {3000, 1}));
  const double scale = 1.0 / std::sqrt(double(d));
  const size_t ws = ulysses::cuda::attention_backward_workspace_bytes(S, H, Hkv, d);
  DeviceBuffer<float> wsb(ws / 4 + 1);
  ulysses::cuda::attention_forward(out.get(), lse.get(), qb.get(), kb.get(), vb.get(), doc.get(), S, H, Hkv, d, scale,
                                   stream);
  std::vector<float> first;
  for (int run = 0; run < 3; ++run) {
    dq.poison();
    ulysses::cuda::hopper_attention_backward(dq.get(), dk.get(), dv.get(), dob.get(), out.get(), lse.get(), qb.get(),
                                             kb.get(), vb.get(), doc.get(), S, H, Hkv, d, scale, wsb.get(), ws, stream,
                                             3, /*deterministic=*/true);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    const auto got = ulysses::cuda_test::download(dq);
    EXPECT_EQ(ulysses::cuda_test::count_nan(got), 0u);
    if (run == 0) first = got;
    else EXPECT_EQ(0, std::memcmp(first.data(), got.data(), got.size() * sizeof(float))) << "run " << run;
  }
  EXPECT_THROW(ulysses::cuda::hopper_attention_backward(dq.get(), dk.get(), dv.get(), dob.get(), out.get(), lse.get(),
                                                        qb.get(), kb.get(), vb.get(), doc.get(), S, H, Hkv, d, scale,
                                                        wsb.get(), ws, stream, 2, /*deterministic=*/true),
               ulysses::Error);
}
TEST_F(HopperAttentionBackward, BackendOptInDeterministic) {
  ulysses::cuda_test::expect_engine_attention_matches_cpu({{"ULYSSES_ATTENTION", "hopper"},
                                                           {"ULYSSES_HOPPER_BWD", "3"},
                                                           {"ULYSSES_HOPPER_DETERMINISTIC", "1"}},
                                                          83, /*check_forward=*/false);
}

TEST_F(HopperAttentionBackward, RefusesUnsupported) {
  std::string why;
  EXPECT_FALSE(ulysses::cuda::hopper_attention_backward_supported(96, 8, 8, &why));
  EXPECT_NE(why.find("head_dim"), std::string::npos) << why;
  EXPECT_FALSE(ulysses::cuda::hopper_attention_backward_supported(128, 6, 4, &why));
  // Argument checks run before any device work, so null pointers are fine here.
  EXPECT_THROW(ulysses::cuda::hopper_attention_backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                                        nullptr, nullptr, nullptr, 128, 4, 4, 96, 0.1, nullptr, 0,
                                                        stream),
               ulysses::Error);
  EXPECT_THROW(ulysses::cuda::hopper_attention_backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                                        nullptr, nullptr, nullptr, 128, 4, 4, 128, 0.1, nullptr, 0,
                                                        stream),
               ulysses::Error);  // no workspace, null pointers
  // The removed first variant: refused by name.
  try {
    ulysses::cuda::hopper_attention_backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                             nullptr, nullptr, 128, 4, 4, 128, 0.1, nullptr, 0, stream, 1);
    ADD_FAILURE() << "variant 1 must be refused";
  } catch (const ulysses::Error& e) {
    EXPECT_NE(std::string(e.what()).find("removed"), std::string::npos) << e.what();
  }
}

}  // namespace
