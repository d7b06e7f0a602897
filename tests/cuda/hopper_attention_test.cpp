// The Hopper (sm_90a, wgmma) attention forward against the fp32 GPU twin (attention_fp32.h, run on
// the same bf16-rounded inputs) and beside our FA2 kernel (attention_forward), over sweeps of
// sequence lengths (tile edges: 1, 7, 64, 127, 128, 129, 300, 1000, 4097), head layouts (1/1, 4/1,
// 32/8, 8/8), single and packed documents (boundaries inside a 128-row tile, one-token documents).
// Sliding windows. Outputs are poisoned before every run, so an element the kernel never writes fails
// as NaN. Every case runs for every kernel variant (hopper_attention_forward_variant 3 and 4; test
// names end in /v3, /v4). And the engine's opt-in (ULYSSES_ATTENTION=hopper) through the Backend interface,
// forward and backward, with the variant ULYSSES_HOPPER_VARIANT names (default 3).
// Fails without a GPU (CudaTest); skips on a GPU that is not sm_90 (the kernel is sm_90a only).
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

class HopperAttention : public ulysses::cuda_test::CudaTest {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (HasFatalFailure()) return;
    std::string why;
    if (!ulysses::cuda::hopper_attention_supported(128, 8, 8, &why)) GTEST_SKIP() << "Hopper kernel: " << why;
  }
};

// The sweeps and small cases, once per kernel variant (the parameter: 1, 2 or 3).
class HopperAttentionVariant : public HopperAttention, public ::testing::WithParamInterface<int> {};

// Documents for a sweep case: none (one document), or boundaries at S/3 (inside a tile for most S), a
// one-token document, one of 70 tokens (ends inside a tile) and the rest.
std::vector<int64_t> packed_lengths(int64_t S) {
  if (S < 4) return {1};
  return {std::max<int64_t>(S / 3, 1), 1, 70};
}

struct Case {
  int64_t S, H, Hkv, d;
  std::vector<int64_t> doc_lens;  // empty: one document
  double q_range = 1.0;           // larger: sharper softmax
  int64_t window = 0;             // > 0: a sliding window of that many keys, folded into doc_start
};

// Largest relative error of one row (over d) between out and ref, rows with a non-zero reference.
double worst_row_error(const std::vector<float>& out, const std::vector<float>& ref, int64_t rows, int64_t d) {
  double worst = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double num = 0, den = 0;
    for (int64_t x = 0; x < d; ++x) {
      const double a = out[size_t(r * d + x)], b = ref[size_t(r * d + x)];
      num += (a - b) * (a - b);
      den += b * b;
    }
    if (!(num == num)) return INFINITY;  // NaN: an unwritten element
    if (den > 0) worst = std::max(worst, std::sqrt(num / den));
  }
  return worst;
}

void run_case(const Case& c, int variant, cudaStream_t stream) {
  const uint64_t seed = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
  SCOPED_TRACE("variant=" + std::to_string(variant) + " S=" + std::to_string(c.S) + " H=" + std::to_string(c.H) +
               " Hkv=" + std::to_string(c.Hkv) + " d=" + std::to_string(c.d) + " docs=" + std::to_string(c.doc_lens.size() + 1) +
               " window=" + std::to_string(c.window) + " seed=" + std::to_string(seed));
  const int64_t S = c.S, H = c.H, Hkv = c.Hkv, d = c.d;
  const double scale = 1.0 / std::sqrt(double(d));
  const size_t nq = size_t(S * H * d), nk = size_t(S * Hkv * d), nl = size_t(H * S);
  using ulysses::cuda_test::rounded;
  const auto q = rounded<bf16>(ulysses::test::random_vector_f(nq, seed, -c.q_range, c.q_range));
  const auto k = rounded<bf16>(ulysses::test::random_vector_f(nk, seed + 1, -1.0, 1.0));
  const auto v = rounded<bf16>(ulysses::test::random_vector_f(nk, seed + 2, -1.0, 1.0));
  const auto doc = ulysses::cuda_test::with_window(ulysses::cuda_test::doc_start_of_lengths(S, c.doc_lens), c.window);

  DeviceBuffer<bf16> qb(nq), kb(nk), vb(nk), out_h(nq), out_fa2(nq);
  DeviceBuffer<float> qf(nq), kf(nk), vf(nk), out_ref(nq), lse_ref(nl), lse_h(nl), lse_fa2(nl);
  DeviceBuffer<int32_t> ddoc{size_t(S)};
  ulysses::cuda_test::upload(qb, q);
  ulysses::cuda_test::upload(kb, k);
  ulysses::cuda_test::upload(vb, v);
  ulysses::cuda_test::upload(qf, q);
  ulysses::cuda_test::upload(kf, k);
  ulysses::cuda_test::upload(vf, v);
  ulysses::cuda_test::upload_i32(ddoc, doc);
  out_h.poison();
  lse_h.poison();
  out_fa2.poison();
  lse_fa2.poison();

  ulysses::cuda::attention_forward_f32(out_ref.get(), lse_ref.get(), qf.get(), kf.get(), vf.get(), ddoc.get(), S, H,
                                       Hkv, d, scale, stream);
  ulysses::cuda::attention_forward(out_fa2.get(), lse_fa2.get(), qb.get(), kb.get(), vb.get(), ddoc.get(), S, H, Hkv,
                                   d, scale, stream);
  ulysses::cuda::hopper_attention_forward_variant(out_h.get(), lse_h.get(), qb.get(), kb.get(), vb.get(), ddoc.get(),
                                                  S, H, Hkv, d, scale, stream, variant);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_CHECK(cudaGetLastError());

  const auto ref = ulysses::cuda_test::download(out_ref), lref = ulysses::cuda_test::download(lse_ref);
  const auto oh = ulysses::cuda_test::download(out_h), lh = ulysses::cuda_test::download(lse_h);
  const auto of = ulysses::cuda_test::download(out_fa2), lf = ulysses::cuda_test::download(lse_fa2);

  EXPECT_EQ(ulysses::cuda_test::count_nan(oh), 0u) << "out: NaN or never-written elements";
  EXPECT_EQ(ulysses::cuda_test::count_nan(lh), 0u) << "lse: NaN or never-written elements";
  const double e_h = ulysses::test::rel_error(oh.data(), ref.data(), nq);
  const double e_f = ulysses::test::rel_error(of.data(), ref.data(), nq);
  const double row_h = worst_row_error(oh, ref, S * H, d), row_f = worst_row_error(of, ref, S * H, d);
  const double le_h = ulysses::test::rel_error(lh.data(), lref.data(), nl);
  double lse_worst = 0;  // elementwise, relative to max(1, |ref|)
  int64_t lse_worst_at = -1;
  for (size_t i = 0; i < nl; ++i) {
    const double e = std::fabs(double(lh[i]) - lref[i]) / std::max(1.0, std::fabs(double(lref[i])));
    if (!(e <= lse_worst)) {
      lse_worst = e;
      lse_worst_at = int64_t(i);
    }
  }
  std::printf("  v%d S=%-5lld H=%-2lld Hkv=%-2lld d=%-3lld docs=%zu  out rel %.2e (fa2 %.2e), worst row %.2e (fa2 %.2e), "
              "lse rel %.2e, worst %.2e\n",
              variant, (long long)S, (long long)H, (long long)Hkv, (long long)d, c.doc_lens.size() + 1, e_h, e_f, row_h,
              row_f,
              le_h, lse_worst);
  EXPECT_LE(e_h, 2e-2) << "out: relative error against the fp32 twin";
  EXPECT_LE(row_h, 4e-2) << "out: worst row's relative error (fa2's: " << row_f << ")";
  EXPECT_LE(le_h, 1e-3) << "lse: relative error";
  EXPECT_LE(lse_worst, 1e-3) << "lse: worst element (head " << (lse_worst_at >= 0 ? lse_worst_at / S : -1)
                             << ", row " << (lse_worst_at >= 0 ? lse_worst_at % S : -1) << ")";
}

const std::vector<int64_t> kSizes = {1, 7, 64, 127, 128, 129, 300, 1000, 4097};
const std::vector<std::pair<int64_t, int64_t>> kHeads = {{1, 1}, {4, 1}, {32, 8}, {8, 8}};

void sweep(int64_t d, bool packed, int variant, cudaStream_t stream) {
  for (int64_t S : kSizes)
    for (auto [H, Hkv] : kHeads) {
      run_case({S, H, Hkv, d, packed ? packed_lengths(S) : std::vector<int64_t>{}}, variant, stream);
      if (::testing::Test::HasFailure()) return;  // the first failing case is the useful one
    }
}

TEST_P(HopperAttentionVariant, D128SingleDocumentSweep) { sweep(128, false, GetParam(), stream); }
TEST_P(HopperAttentionVariant, D128PackedDocumentsSweep) { sweep(128, true, GetParam(), stream); }
TEST_P(HopperAttentionVariant, D64SingleDocumentSweep) { sweep(64, false, GetParam(), stream); }
TEST_P(HopperAttentionVariant, D64PackedDocumentsSweep) { sweep(64, true, GetParam(), stream); }

// Small cases, also the ones the memcheck run of bench/device/hopper_attn.sh uses.
TEST_P(HopperAttentionVariant, D128Small) { run_case({129, 2, 1, 128, {5, 1, 60}}, GetParam(), stream); }
TEST_P(HopperAttentionVariant, D128SharpSoftmax) { run_case({1000, 4, 2, 128, {450, 3}, 4.0}, GetParam(), stream); }
TEST_P(HopperAttentionVariant, D128ManySmallDocuments) {
  run_case({2000, 8, 2, 128, {1, 129, 1, 333, 64, 200, 1, 127, 128, 5}}, GetParam(), stream);
}

// Sliding windows (Mistral's), folded into doc_start as the engine does. The engine passes windowed
// rows only to variant 3 (cuda_backend_ops.cpp), the one these passed on a GPU (H100, 2026-12-07).
TEST_P(HopperAttentionVariant, D128SlidingWindow) {
  run_case({1000, 4, 2, 128, {450, 3}, 1.0, 100}, GetParam(), stream);
  run_case({2000, 8, 2, 128, {}, 1.0, 300}, GetParam(), stream);
}
TEST_P(HopperAttentionVariant, D64SlidingWindow) { run_case({1500, 4, 1, 64, {700}, 1.0, 129}, GetParam(), stream); }

INSTANTIATE_TEST_SUITE_P(Hopper, HopperAttentionVariant, ::testing::Values(3, 4),
                         [](const ::testing::TestParamInfo<int>& info) { return "v" + std::to_string(info.param); });

// The engine's opt-in: with ULYSSES_ATTENTION=hopper the backend's forward runs the Hopper kernel,
// and its backward (as auto: cuDNN where it runs) reads that forward's out and lse; both against the
// CPU backend on the same bf16-rounded inputs, two packed documents.
TEST_F(HopperAttention, BackendOptInForwardAndBackward) {
  ulysses::cuda_test::expect_engine_attention_matches_cpu({{"ULYSSES_ATTENTION", "hopper"}}, 70,
                                                          /*check_forward=*/true);
}

TEST_F(HopperAttention, RefusesUnsupported) {
  std::string why;
  EXPECT_FALSE(ulysses::cuda::hopper_attention_supported(96, 8, 8, &why));
  EXPECT_NE(why.find("head_dim"), std::string::npos) << why;
  EXPECT_FALSE(ulysses::cuda::hopper_attention_supported(128, 6, 4, &why));
  // Argument checks run before any device work, so null pointers are fine here.
  EXPECT_THROW(ulysses::cuda::hopper_attention_forward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 128, 4, 4,
                                                       96, 0.1, stream),
               ulysses::Error);
  EXPECT_THROW(ulysses::cuda::hopper_attention_forward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 128, 4, 4,
                                                       128, 0.1, stream),
               ulysses::Error);  // null pointers
  EXPECT_THROW(ulysses::cuda::hopper_attention_forward_variant(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 128,
                                                               4, 4, 128, 0.1, stream, 5),
               ulysses::Error);  // no variant 5
  // The removed variants (cp.async loads): refused by name.
  for (const int removed : {1, 2}) {
    try {
      ulysses::cuda::hopper_attention_forward_variant(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 128, 4, 4,
                                                      128, 0.1, stream, removed);
      ADD_FAILURE() << "variant " << removed << " must be refused";
    } catch (const ulysses::Error& e) {
      EXPECT_NE(std::string(e.what()).find("removed"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
