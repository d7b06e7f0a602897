// cuDNN's fused attention (backend/cuda/cudnn_attention.*) against the CPU
// reference in float64 on the same bf16-rounded inputs: one document and
// packed documents (ragged, with the batch padded by empty entries and not),
// GQA and MQA, head sizes 64 and 128, sequence lengths off the kernels' tiles,
// int32 and int64 ragged offsets; outputs poisoned before every run.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cuda/cudnn_attention.h"
#include "cuda/cuda_test_util.h"

namespace ulysses::cuda_test {
namespace {

using cuda::AttentionProblem;
using cuda::CudnnAttention;

struct Case {
  int64_t H, Hkv, d;
  std::vector<int64_t> docs;  // document lengths; their sum is S
  double scale;               // 0: 1/sqrt(d)
  bool pad_batch = true, int64_offsets = false, ragged_stats = true, dense_batch = true;
  const char* runs_as = nullptr;  // what describe() must say of it, if given
};

std::vector<float> random_bf16(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = u(g);
  return rounded<__nv_bfloat16>(v);
}

std::vector<double> to_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

class CudnnAttentionTest : public CudaTest {};

void run_case(const Case& c, cudaStream_t stream) {
  int64_t S = 0;
  for (int64_t len : c.docs) S += len;
  const int64_t H = c.H, Hkv = c.Hkv, d = c.d;
  const double scale = c.scale > 0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(d));
  const std::vector<int32_t> doc_start = doc_start_of_lengths(S, c.docs);
  std::vector<int32_t> bounds{0};
  int64_t longest = 0;
  for (int64_t len : c.docs) {
    bounds.push_back(bounds.back() + static_cast<int32_t>(len));
    longest = std::max(longest, len);
  }
  SCOPED_TRACE("S " + std::to_string(S) + " H " + std::to_string(H) + " Hkv " + std::to_string(Hkv) + " d " +
               std::to_string(d) + " documents " + std::to_string(c.docs.size()) + (c.pad_batch ? " padded" : "") +
               (c.int64_offsets ? " int64" : "") +
               (c.ragged_stats ? " ragged-stats" : " padded-stats") + (c.dense_batch ? "" : " no-dense"));

  const size_t nq = S * H * d, nk = S * Hkv * d;
  const std::vector<float> q = random_bf16(nq, 1), k = random_bf16(nk, 2), v = random_bf16(nk, 3),
                           dout = random_bf16(nq, 4);
  // The float64 reference on the same (bf16-rounded) values.
  std::vector<double> rout(nq), rlse(H * S), rdq(nq), rdk(nk), rdv(nk);
  const std::vector<double> q64 = to_double(q), k64 = to_double(k), v64 = to_double(v), do64 = to_double(dout);
  cpu::attention_forward(rout.data(), rlse.data(), q64.data(), k64.data(), v64.data(), doc_start.data(), S, H, Hkv, d,
                         scale);
  cpu::attention_backward(rdq.data(), rdk.data(), rdv.data(), do64.data(), rout.data(), rlse.data(), q64.data(),
                          k64.data(), v64.data(), doc_start.data(), S, H, Hkv, d, scale);

  CudnnAttention::Options opts;
  opts.pad_batch = c.pad_batch;
  opts.int64_offsets = c.int64_offsets;
  opts.ragged_stats = c.ragged_stats;
  opts.dense_batch = c.dense_batch;
  CudnnAttention attn(stream, opts);
  AttentionProblem p;
  p.S = S, p.H = H, p.Hkv = Hkv, p.d = d, p.documents = static_cast<int64_t>(c.docs.size()), p.longest = longest;
  p.scale = scale;
  std::string why;
  ASSERT_TRUE(attn.supports(p, false, &why)) << "forward: " << why;
  ASSERT_TRUE(attn.supports(p, true, &why)) << "backward: " << why;
  if (c.runs_as) {
    EXPECT_EQ(attn.describe(p, false), c.runs_as);
    EXPECT_EQ(attn.describe(p, true), c.runs_as);
  }

  DeviceBuffer<__nv_bfloat16> dq_in(nq), dk_in(nk), dv_in(nk), ddout(nq), dout_(nq), gq(nq), gk(nk), gv(nk);
  DeviceBuffer<float> lse(H * S);
  DeviceBuffer<int32_t> dbounds(bounds.size());
  upload(dq_in, q);
  upload(dk_in, k);
  upload(dv_in, v);
  upload(ddout, dout);
  upload_i32(dbounds, bounds);
  const size_t wf = attn.workspace_bytes(p, false), wb = attn.workspace_bytes(p, true);
  DeviceBuffer<unsigned char> ws(std::max(wf, wb));
  for (int rep = 0; rep < 2; ++rep) {  // the second run reuses the cached graphs
    dout_.poison(), lse.poison(), gq.poison(), gk.poison(), gv.poison();
    // The workspace's contents on entry must not matter (poisoned on the attention's stream, in order).
    CUDA_CHECK(cudaMemsetAsync(ws.get(), 0xFF, ws.size(), stream));
    attn.forward(dout_.get(), lse.get(), dq_in.get(), dk_in.get(), dv_in.get(), dbounds.get(), p, ws.get());
    CUDA_CHECK(cudaMemsetAsync(ws.get(), 0xFF, ws.size(), stream));
    attn.backward(gq.get(), gk.get(), gv.get(), ddout.get(), dout_.get(), lse.get(), dq_in.get(), dk_in.get(),
                  dv_in.get(), dbounds.get(), p, ws.get());
    CUDA_CHECK(cudaStreamSynchronize(stream));
    const std::vector<float> out = download(dout_), l = download(lse), g_q = download(gq), g_k = download(gk),
                             g_v = download(gv);
    auto close = [](const std::vector<float>& a, const std::vector<double>& ref, double tol, const char* what) {
      EXPECT_EQ(count_nan(a), 0u) << what << ": NaN present (unwritten or bad values)";
      const double e = test::rel_error(a.data(), ref.data(), a.size());
      EXPECT_LE(e, tol) << what << ": relative error " << e;
    };
    if (count_nan(l) > 0) {  // where cuDNN left statistics unwritten, per document
      for (size_t j = 0; j + 1 < bounds.size(); ++j) {
        int64_t n = 0, first = -1;
        for (int64_t t = bounds[j]; t < bounds[j + 1]; ++t)
          for (int64_t h = 0; h < H; ++h)
            if (std::isnan(l[h * S + t])) {
              ++n;
              if (first < 0) first = t - bounds[j];
            }
        std::printf("document %zu [%d, %d): %lld NaN statistics, the first at row %lld\n", j, bounds[j],
                    bounds[j + 1], (long long)n, (long long)first);
      }
    }
    close(out, rout, 2e-2, "out");
    close(l, rlse, 1e-4, "lse");
    close(g_q, rdq, 5e-2, "dq");
    close(g_k, rdk, 5e-2, "dk");
    close(g_v, rdv, 5e-2, "dv");
  }
  EXPECT_EQ(attn.cached_graphs(), 2u) << "one forward and one backward graph, built once";
}

TEST_F(CudnnAttentionTest, OneDocument) {
  run_case({8, 2, 128, {300}, 0}, stream);          // GQA, S off the 128-token tiles
  run_case({4, 4, 64, {256}, 0.3}, stream);         // MHA, a scale of the caller's
}

TEST_F(CudnnAttentionTest, PackedDocuments) {
  for (bool ragged_stats : {true, false}) {
    run_case({4, 2, 64, {40, 56}, 0, true, false, ragged_stats}, stream);                 // short documents
    run_case({4, 2, 64, {100, 37, 163}, 0, true, false, ragged_stats}, stream);           // 3 run as a batch of 4
    run_case({4, 1, 128, {64, 1, 200, 31, 160}, 0, false, false, ragged_stats}, stream);  // MQA, 5 entries, 1 token
    run_case({8, 2, 128, {130, 126, 300, 44}, 0, true, true, ragged_stats}, stream);      // int64 ragged offsets
  }
}

// Equal documents run as a dense batch (statistics written in place), the same numbers as the
// ragged form of the same row.
TEST_F(CudnnAttentionTest, EqualDocumentsAsADenseBatch) {
  Case c{4, 2, 64, {128, 128, 128, 128}, 0};
  c.runs_as = "dense batch of 4 x 128";
  run_case(c, stream);
  c.dense_batch = false;
  c.runs_as = "ragged batch of 4 x 128";
  run_case(c, stream);
  Case odd{8, 2, 128, {300, 300, 300}, 0};  // off the tiles, an odd count, GQA 4:1
  odd.runs_as = "dense batch of 3 x 300";
  run_case(odd, stream);
}

// Rows with similar document counts share graphs: 3 and 4 documents of the same bucket run
// on one forward graph.
TEST_F(CudnnAttentionTest, GraphsAreShared) {
  CudnnAttention attn(stream);
  AttentionProblem p;
  p.S = 512, p.H = 4, p.Hkv = 2, p.d = 64, p.longest = 200, p.scale = 0.125;
  for (int64_t n : {3, 4, 4, 3}) {
    p.documents = n;
    ASSERT_TRUE(attn.supports(p, false));
  }
  EXPECT_EQ(attn.cached_graphs(), 1u);
  p.documents = 1;
  p.longest = 512;
  ASSERT_TRUE(attn.supports(p, false));
  EXPECT_EQ(attn.cached_graphs(), 2u);
}

TEST_F(CudnnAttentionTest, RefusesWhatItCannotRun) {
  CudnnAttention attn(stream);
  AttentionProblem p;
  p.S = 64, p.H = 4, p.Hkv = 2, p.d = 12, p.longest = 64;
  std::string why;
  EXPECT_FALSE(attn.supports(p, false, &why));
  EXPECT_NE(why.find("head size 12"), std::string::npos) << why;
  std::printf("cuDNN runtime %s\n", CudnnAttention::runtime_version().c_str());
}

}  // namespace
}  // namespace ulysses::cuda_test
