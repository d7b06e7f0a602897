// Float32 CUDA attention (attention_fp32.h, forward and backward) against the
// CPU reference run in float64 on the same float inputs: relative error
// ||gpu - ref|| / ||ref|| <= 1e-5 per output (out, lse, dq, dk, dv). Outputs and
// workspace are poisoned (0xFF bytes: NaN) before every call, so an element the
// kernels never write fails the NaN check. Fixed seeds. Needs a GPU: without
// one these tests fail, never skip.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cuda/attention_fp32.h"
#include "core/error.h"
#include "cuda/cuda_test_util.h"

namespace ulysses {
namespace {

using cuda_test::count_nan;
using cuda_test::DeviceBuffer;
using cuda_test::download;
using cuda_test::upload;
using cuda_test::upload_i32;

constexpr double kTol = 1e-5;

std::vector<double> to_double(const std::vector<float>& f) { return std::vector<double>(f.begin(), f.end()); }
std::vector<float> to_float(const std::vector<double>& d) { return std::vector<float>(d.begin(), d.end()); }

enum class Docs { kSingle, kPacked, kAllSingleToken, kArbitrary };
const char* docs_name(Docs p) {
  switch (p) {
    case Docs::kSingle: return "single";
    case Docs::kPacked: return "packed";
    case Docs::kAllSingleToken: return "all1tok";
    default: return "arbitrary";
  }
}

std::vector<int32_t> make_doc_start(int64_t S, Docs p, uint64_t seed) {
  switch (p) {
    case Docs::kSingle: return std::vector<int32_t>(S, 0);
    case Docs::kPacked:  // 1-token documents at the start, in the middle and (for S = 7) at the end
      return cuda_test::doc_start_of_lengths(S, {1, std::max<int64_t>(1, S / 3), 1, 5, 1, std::max<int64_t>(1, S / 4)});
    case Docs::kAllSingleToken: {
      std::vector<int32_t> doc(S);
      for (int64_t i = 0; i < S; ++i) doc[i] = static_cast<int32_t>(i);
      return doc;
    }
    default: {  // any doc_start[i] <= i, not monotone (the reference's general case)
      std::mt19937_64 rng(seed);
      std::vector<int32_t> doc(S);
      for (int64_t i = 0; i < S; ++i) doc[i] = static_cast<int32_t>(rng() % static_cast<uint64_t>(i + 1));
      return doc;
    }
  }
}

void check_close(const char* what, const std::vector<float>& got, const std::vector<double>& ref, double tol) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  EXPECT_EQ(count_nan(got), 0u) << what << ": NaN present (unwritten or bad values)";
  const double err = test::rel_error(got.data(), ref.data(), got.size());
  EXPECT_LE(err, tol) << what << ": relative error " << err << " > " << tol;
}

struct Case {
  int64_t S, H, Hkv, d;
  Docs docs;
  double q_range = 1.0;  // larger: sharper softmax
};

class CudaAttentionF32 : public cuda_test::CudaTest {
 protected:
  void run_case(const Case& c) {
    const int64_t S = c.S, H = c.H, Hkv = c.Hkv, d = c.d;
    const uint64_t seed = 1000003ull * uint64_t(S) + 1009ull * uint64_t(d) + 17ull * uint64_t(H) + uint64_t(Hkv) +
                          101ull * static_cast<uint64_t>(c.docs);
    SCOPED_TRACE("S=" + std::to_string(S) + " H=" + std::to_string(H) + " Hkv=" + std::to_string(Hkv) +
                 " d=" + std::to_string(d) + " docs=" + docs_name(c.docs) + " seed=" + std::to_string(seed));
    const double scale = 1.0 / std::sqrt(double(d));
    const size_t nq = size_t(S * H * d), nk = size_t(S * Hkv * d), nl = size_t(H * S);

    const auto q = test::random_vector_f(nq, seed, -c.q_range, c.q_range);
    const auto k = test::random_vector_f(nk, seed + 1);
    const auto v = test::random_vector_f(nk, seed + 2);
    const auto dout = test::random_vector_f(nq, seed + 3);
    const auto doc = make_doc_start(S, c.docs, seed + 4);

    // Reference in float64 on exactly the float inputs.
    const auto q64 = to_double(q), k64 = to_double(k), v64 = to_double(v), dout64 = to_double(dout);
    std::vector<double> out_ref(nq), lse_ref(nl);
    cpu::attention_forward<double>(out_ref.data(), lse_ref.data(), q64.data(), k64.data(), v64.data(), doc.data(), S,
                                   H, Hkv, d, scale);
    // The backward's out and lse inputs as the GPU gets them: the reference's, rounded to float.
    const auto out_in = to_float(out_ref), lse_in = to_float(lse_ref);
    const auto out_in64 = to_double(out_in), lse_in64 = to_double(lse_in);
    std::vector<double> dq_ref(nq), dk_ref(nk), dv_ref(nk);
    cpu::attention_backward<double>(dq_ref.data(), dk_ref.data(), dv_ref.data(), dout64.data(), out_in64.data(),
                                    lse_in64.data(), q64.data(), k64.data(), v64.data(), doc.data(), S, H, Hkv, d,
                                    scale);

    DeviceBuffer<float> dq_in(nq), dk_in(nk), dv_in(nk), ddout(nq), dout_ref_in(nq), dlse_ref_in(nl);
    DeviceBuffer<int32_t> ddoc{size_t(S)};
    upload(dq_in, q);
    upload(dk_in, k);
    upload(dv_in, v);
    upload(ddout, dout);
    upload(dout_ref_in, out_in);
    upload(dlse_ref_in, lse_in);
    upload_i32(ddoc, doc);

    // Forward.
    DeviceBuffer<float> gout(nq), glse(nl);
    gout.poison();
    glse.poison();
    cuda::attention_forward_f32(gout.get(), glse.get(), dq_in.get(), dk_in.get(), dv_in.get(), ddoc.get(), S, H, Hkv,
                                d, scale, stream);
    sync();
    check_close("out", download(gout), out_ref, kTol);
    check_close("lse", download(glse), lse_ref, kTol);

    // Backward on the reference's forward outputs, twice: the second time with the workspace left dirty.
    const size_t ws_bytes = cuda::attention_backward_f32_workspace_bytes(S, H, Hkv, d);
    DeviceBuffer<unsigned char> ws(ws_bytes);
    DeviceBuffer<float> gdq(nq), gdk(nk), gdv(nk);
    for (int run = 0; run < 2; ++run) {
      SCOPED_TRACE("backward run " + std::to_string(run));
      gdq.poison();
      gdk.poison();
      gdv.poison();
      if (run == 0) ws.poison();
      cuda::attention_backward_f32(gdq.get(), gdk.get(), gdv.get(), ddout.get(), dout_ref_in.get(), dlse_ref_in.get(),
                                   dq_in.get(), dk_in.get(), dv_in.get(), ddoc.get(), S, H, Hkv, d, scale, ws.get(),
                                   ws_bytes, stream);
      sync();
      check_close("dq", download(gdq), dq_ref, kTol);
      check_close("dk", download(gdk), dk_ref, kTol);
      check_close("dv", download(gdv), dv_ref, kTol);
    }

    // End to end: the backward on the GPU forward's own outputs.
    SCOPED_TRACE("backward on the GPU forward's outputs");
    gdq.poison();
    gdk.poison();
    gdv.poison();
    cuda::attention_backward_f32(gdq.get(), gdk.get(), gdv.get(), ddout.get(), gout.get(), glse.get(), dq_in.get(),
                                 dk_in.get(), dv_in.get(), ddoc.get(), S, H, Hkv, d, scale, ws.get(), ws_bytes, stream);
    sync();
    check_close("dq", download(gdq), dq_ref, kTol);
    check_close("dk", download(gdk), dk_ref, kTol);
    check_close("dv", download(gdv), dv_ref, kTol);
  }
};

// ---- the grid: d x heads x S x document pattern ----------------------------------------

struct Heads {
  int64_t H, Hkv;
};
using Param = std::tuple<int64_t, Heads, int64_t, Docs>;  // d, heads, S, docs

class CudaAttentionF32Grid : public CudaAttentionF32, public ::testing::WithParamInterface<Param> {};

TEST_P(CudaAttentionF32Grid, MatchesFloat64Reference) {
  const auto& [d, heads, S, docs] = GetParam();
  run_case({S, heads.H, heads.Hkv, d, docs});
}

std::string grid_name(const ::testing::TestParamInfo<Param>& info) {
  const int64_t d = std::get<0>(info.param), S = std::get<2>(info.param);
  const Heads heads = std::get<1>(info.param);
  return "d" + std::to_string(d) + "_H" + std::to_string(heads.H) + "_Hkv" + std::to_string(heads.Hkv) + "_S" +
         std::to_string(S) + "_" + docs_name(std::get<3>(info.param));
}

INSTANTIATE_TEST_SUITE_P(
    All, CudaAttentionF32Grid,
    ::testing::Combine(::testing::Values<int64_t>(8, 16, 48, 64, 128),
                       ::testing::Values(Heads{4, 2}, Heads{4, 1}, Heads{3, 3}),
                       ::testing::Values<int64_t>(1, 7, 64, 300),
                       ::testing::Values(Docs::kSingle, Docs::kPacked, Docs::kAllSingleToken, Docs::kArbitrary)),
    grid_name);

// ---- further cases ---------------------------------------------------------------------------

TEST_F(CudaAttentionF32, SharpSoftmax) { run_case({300, 4, 2, 64, Docs::kPacked, 4.0}); }
// d not a multiple of 32, past 128, at the 256 limit.
TEST_F(CudaAttentionF32, OddHeadDims) {
  for (int64_t d : {1, 33, 80, 200, 256}) run_case({70, 2, 1, d, Docs::kPacked});
}
// More rows (H * S) than the grid's warps: the grid-stride loops.
TEST_F(CudaAttentionF32, GridStride) { run_case({4100, 10, 2, 8, Docs::kPacked}); }

// A row with doc_start[i] > i sees no key: out = 0, lse = -inf, dq = 0, and the other rows are unaffected.
TEST_F(CudaAttentionF32, RowWithNoVisibleKeys) {
  const int64_t S = 20, H = 2, Hkv = 1, d = 16, bad = 9;
  const double scale = 0.25;
  const size_t nq = size_t(S * H * d), nk = size_t(S * Hkv * d), nl = size_t(H * S);
  const auto q = test::random_vector_f(nq, 71), k = test::random_vector_f(nk, 72), v = test::random_vector_f(nk, 73);
  const auto dout = test::random_vector_f(nq, 74);
  auto doc = cuda_test::doc_start_of_lengths(S, {5, 10});  // row 9 lies in [5, 15)
  doc[bad] = static_cast<int32_t>(bad + 1);
  DeviceBuffer<float> dq_in(nq), dk_in(nk), dv_in(nk), ddout(nq), gout(nq), glse(nl), gdq(nq), gdk(nk), gdv(nk);
  DeviceBuffer<int32_t> ddoc{size_t(S)};
  upload(dq_in, q);
  upload(dk_in, k);
  upload(dv_in, v);
  upload(ddout, dout);
  upload_i32(ddoc, doc);
  gout.poison();
  glse.poison();
  cuda::attention_forward_f32(gout.get(), glse.get(), dq_in.get(), dk_in.get(), dv_in.get(), ddoc.get(), S, H, Hkv, d,
                              scale, stream);
  sync();
  auto out = download(gout), lse = download(glse);
  std::vector<double> out_ref(nq), lse_ref(nl);
  const auto q64 = to_double(q), k64 = to_double(k), v64 = to_double(v), dout64 = to_double(dout);
  cpu::attention_forward<double>(out_ref.data(), lse_ref.data(), q64.data(), k64.data(), v64.data(), doc.data(), S, H,
                                 Hkv, d, scale);
  for (int64_t h = 0; h < H; ++h) {
    EXPECT_TRUE(std::isinf(lse[h * S + bad]) && lse[h * S + bad] < 0) << "lse[" << h << ", " << bad << "] = "
                                                                      << lse[h * S + bad];
    lse_ref[h * S + bad] = lse[h * S + bad] = 0;
    for (int64_t c = 0; c < d; ++c) {
      EXPECT_EQ(out[(bad * H + h) * d + c], 0.f);
      out_ref[(bad * H + h) * d + c] = 0;  // the reference gives 0/0 there
    }
  }
  check_close("out", out, out_ref, kTol);
  check_close("lse", lse, lse_ref, kTol);

  const auto out_in = out;
  std::vector<double> dq_ref(nq), dk_ref(nk), dv_ref(nk);
  const auto out64 = to_double(out_in);
  const auto lse64 = to_double(download(glse));
  cpu::attention_backward<double>(dq_ref.data(), dk_ref.data(), dv_ref.data(), dout64.data(), out64.data(),
                                  lse64.data(), q64.data(), k64.data(), v64.data(), doc.data(), S, H, Hkv, d, scale);
  const size_t ws_bytes = cuda::attention_backward_f32_workspace_bytes(S, H, Hkv, d);
  DeviceBuffer<unsigned char> ws(ws_bytes);
  ws.poison();
  gdq.poison();
  gdk.poison();
  gdv.poison();
  cuda::attention_backward_f32(gdq.get(), gdk.get(), gdv.get(), ddout.get(), gout.get(), glse.get(), dq_in.get(),
                               dk_in.get(), dv_in.get(), ddoc.get(), S, H, Hkv, d, scale, ws.get(), ws_bytes, stream);
  sync();
  const auto dq = download(gdq);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t c = 0; c < d; ++c) EXPECT_EQ(dq[(bad * H + h) * d + c], 0.f);
  check_close("dq", dq, dq_ref, kTol);
  check_close("dk", download(gdk), dk_ref, kTol);
  check_close("dv", download(gdv), dv_ref, kTol);
}

TEST_F(CudaAttentionF32, EmptySequenceIsANoOp) {
  EXPECT_EQ(cuda::attention_backward_f32_workspace_bytes(0, 4, 2, 64), 0u);
  // S = 0 launches nothing and touches no pointer.
  cuda::attention_forward_f32(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 4, 2, 64, 0.125, stream);
  cuda::attention_backward_f32(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                               nullptr, 0, 4, 2, 64, 0.125, nullptr, 0, stream);
  sync();
}

TEST_F(CudaAttentionF32, WorkspaceFormula) {
  auto up = [](size_t x) { return (x + 255) / 256 * 256; };
  for (int64_t S : {1, 7, 64, 300, 100000})
    for (int64_t H : {1, 3, 32})
      EXPECT_EQ(cuda::attention_backward_f32_workspace_bytes(S, H, 1, 64), up(4 * size_t(H * S)) + up(4 * size_t(S)))
          << "S=" << S << " H=" << H;
}

TEST_F(CudaAttentionF32, RejectsBadArguments) {
  // Argument checks run before any device work, so null pointers are fine here.
  auto fwd = [&](int64_t H, int64_t Hkv, int64_t d) {
    cuda::attention_forward_f32(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 128, H, Hkv, d, 0.125, stream);
  };
  try {
    fwd(6, 4, 64);
    ADD_FAILURE() << "H % Hkv != 0 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiple"), std::string::npos) << e.what();
  }
  for (int64_t d : {0, 257, 512}) {
    try {
      fwd(4, 4, d);
      ADD_FAILURE() << "d = " << d << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("1 to 256"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(cuda::attention_backward_f32_workspace_bytes(128, 4, 4, 300), Error);
  EXPECT_THROW(fwd(4, 4, 64), Error);  // null pointers
  const size_t need = cuda::attention_backward_f32_workspace_bytes(128, 4, 2, 64);
  try {
    cuda::attention_backward_f32(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                 nullptr, 128, 4, 2, 64, 0.125, nullptr, need - 1, stream);
    ADD_FAILURE() << "a too-small workspace was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("workspace"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ulysses
