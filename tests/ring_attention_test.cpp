// The pieces of ring attention on one process: the block-offset attention op
// (a query block at global offset q0 against a key block at k0, documents of
// the whole row) and the log-sum-exp merge give exactly the full causal
// attention when the blocks tile the row, forward and backward, GQA and
// packed documents included; and the token layouts (contiguous, zigzag, hybrid)
// hand every token to exactly one rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "backend/backend.h"
#include "backend/documents.h"
#include "parallel/token_layout.h"
#include "test_util.h"

namespace ulysses {
namespace {

constexpr int64_t S = 24, H = 4, Hkv = 2, d = 8;
constexpr double kScale = 0.37;

std::vector<int32_t> doc_starts(const std::vector<int>& lengths) {
  std::vector<int32_t> ds;
  for (int len : lengths) {
    const int32_t start = static_cast<int32_t>(ds.size());
    for (int t = 0; t < len; ++t) ds.push_back(start);
  }
  return ds;
}

Tensor random(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::F64);
  const std::vector<double> v = test::random_vector(static_cast<size_t>(t.numel()), seed);
  std::copy(v.begin(), v.end(), t.data<double>());
  return t;
}

Tensor zeros(const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::F64);
  std::fill_n(t.data<double>(), t.numel(), 0.0);
  return t;
}

// Columns [c0, c0 + n) of lse [H, S] as a fresh [H, n] tensor, and back.
Tensor lse_cols(const Tensor& lse, int64_t c0, int64_t n) {
  Tensor out = Tensor::empty({lse.dim(0), n}, DType::F64);
  for (int64_t h = 0; h < lse.dim(0); ++h)
    for (int64_t i = 0; i < n; ++i) out.data<double>()[h * n + i] = lse.data<double>()[h * lse.dim(1) + c0 + i];
  return out;
}

struct Case {
  std::unique_ptr<Backend> be = make_cpu_backend();
  Tensor q = random({S, H, d}, 1), k = random({S, Hkv, d}, 2), v = random({S, Hkv, d}, 3);
  Tensor dout = random({S, H, d}, 4);
  Documents docs;
  Tensor out = Tensor::empty({S, H, d}, DType::F64), lse = Tensor::empty({H, S}, DType::F64);
  explicit Case(const std::vector<int>& lengths) {
    docs = make_documents(*be, doc_starts(lengths));
    be->attention_forward(out, lse, q, k, v, docs, kScale);
  }
};

// Query blocks merged from key blocks, in an order that starts away from the diagonal.
void check_forward_by_blocks(const std::vector<int>& lengths, int64_t block) {
  Case c(lengths);
  for (int64_t q0 = 0; q0 < S; q0 += block) {
    const int64_t Sq = std::min(block, S - q0);
    Tensor acc = zeros({Sq, H, d}), acc_lse = Tensor::empty({H, Sq}, DType::F64);
    std::fill_n(acc_lse.data<double>(), acc_lse.numel(), -INFINITY);
    for (int64_t k0 = S - S % block; k0 >= 0; k0 -= block) {
      const int64_t Sk = std::min(block, S - k0);
      if (Sk <= 0) continue;
      Tensor o = Tensor::empty({Sq, H, d}, DType::F64), l = Tensor::empty({H, Sq}, DType::F64);
      c.be->attention_forward_block(o, l, c.q.slice(q0, q0 + Sq), c.k.slice(k0, k0 + Sk), c.v.slice(k0, k0 + Sk),
                                    c.docs, q0, k0, kScale);
      c.be->attention_merge(acc, acc_lse, o, l);
    }
    EXPECT_LE(test::rel_error(acc, c.out.slice(q0, q0 + Sq)), 1e-13) << "rows " << q0;
    EXPECT_LE(test::rel_error(acc_lse, lse_cols(c.lse, q0, Sq)), 1e-13) << "rows " << q0;
  }
}

TEST(BlockAttention, ForwardBlocksMergeToFullCausal) {
  check_forward_by_blocks({24}, 6);
  check_forward_by_blocks({7, 10, 7}, 6);   // documents across block edges
  check_forward_by_blocks({1, 5, 3, 15}, 5);  // ragged last block
}

TEST(BlockAttention, NonSquareBlockMatchesFullRows) {
  Case c({24});
  // Queries 10..14 against keys 4..11: each row's result over those keys only, checked by
  // merging it with the rest of its keys (0..3 and 12..14).
  const int64_t q0 = 10, Sq = 5;
  Tensor acc = zeros({Sq, H, d}), acc_lse = Tensor::empty({H, Sq}, DType::F64);
  std::fill_n(acc_lse.data<double>(), acc_lse.numel(), -INFINITY);
  for (auto [k0, Sk] : std::vector<std::pair<int64_t, int64_t>>{{4, 8}, {0, 4}, {12, 3}, {15, 9}}) {
    Tensor o = Tensor::empty({Sq, H, d}, DType::F64), l = Tensor::empty({H, Sq}, DType::F64);
    c.be->attention_forward_block(o, l, c.q.slice(q0, q0 + Sq), c.k.slice(k0, k0 + Sk), c.v.slice(k0, k0 + Sk),
                                  c.docs, q0, k0, kScale);
    if (k0 == 15) {  // all keys after all queries: empty rows, out 0 and lse -inf
      for (int64_t i = 0; i < l.numel(); ++i) EXPECT_EQ(l.data<double>()[i], -INFINITY);
      for (int64_t i = 0; i < o.numel(); ++i) EXPECT_EQ(o.data<double>()[i], 0.0);
    }
    c.be->attention_merge(acc, acc_lse, o, l);
  }
  EXPECT_LE(test::rel_error(acc, c.out.slice(q0, q0 + Sq)), 1e-13);
  EXPECT_LE(test::rel_error(acc_lse, lse_cols(c.lse, q0, Sq)), 1e-13);
}

void check_backward_by_blocks(const std::vector<int>& lengths, int64_t block) {
  Case c(lengths);
  Tensor dq = Tensor::empty({S, H, d}, DType::F64), dk = Tensor::empty({S, Hkv, d}, DType::F64),
         dv = Tensor::empty({S, Hkv, d}, DType::F64);
  c.be->attention_backward(dq, dk, dv, c.dout, c.out, c.lse, c.q, c.k, c.v, c.docs, kScale);
  Tensor dq_sum = zeros({S, H, d}), dk_sum = zeros({S, Hkv, d}), dv_sum = zeros({S, Hkv, d});
  for (int64_t q0 = 0; q0 < S; q0 += block) {
    const int64_t Sq = std::min(block, S - q0);
    const Tensor l = lse_cols(c.lse, q0, Sq);
    for (int64_t k0 = 0; k0 < S; k0 += block) {
      const int64_t Sk = std::min(block, S - k0);
      Tensor bq = Tensor::empty({Sq, H, d}, DType::F64), bk = Tensor::empty({Sk, Hkv, d}, DType::F64),
             bv = Tensor::empty({Sk, Hkv, d}, DType::F64);
      c.be->attention_backward_block(bq, bk, bv, c.dout.slice(q0, q0 + Sq), c.out.slice(q0, q0 + Sq), l,
                                     c.q.slice(q0, q0 + Sq), c.k.slice(k0, k0 + Sk), c.v.slice(k0, k0 + Sk),
                                     c.docs, q0, k0, kScale);
      Tensor dq_rows = dq_sum.slice(q0, q0 + Sq), dk_rows = dk_sum.slice(k0, k0 + Sk),
             dv_rows = dv_sum.slice(k0, k0 + Sk);
      c.be->axpy(dq_rows, bq, 1.0);
      c.be->axpy(dk_rows, bk, 1.0);
      c.be->axpy(dv_rows, bv, 1.0);
    }
  }
  EXPECT_LE(test::rel_error(dq_sum, dq), 1e-12);
  EXPECT_LE(test::rel_error(dk_sum, dk), 1e-12);
  EXPECT_LE(test::rel_error(dv_sum, dv), 1e-12);
}

TEST(BlockAttention, BackwardBlocksSumToFullCausal) {
  check_backward_by_blocks({24}, 8);
  check_backward_by_blocks({7, 10, 7}, 6);
  check_backward_by_blocks({1, 5, 3, 15}, 5);
}

TEST(BlockAttention, MergeOfEmptyAndNonEmpty) {
  auto be = make_cpu_backend();
  Tensor acc = zeros({2, 1, 2}), acc_lse = Tensor::empty({1, 2}, DType::F64);
  acc_lse.data<double>()[0] = -INFINITY;  // row 0 empty so far
  acc_lse.data<double>()[1] = std::log(2.0);
  acc.data<double>()[2] = 1.0;  // row 1: (1, 3) with weight 2
  acc.data<double>()[3] = 3.0;
  Tensor o = random({2, 1, 2}, 9), l = Tensor::empty({1, 2}, DType::F64);
  l.data<double>()[0] = 0.5;
  l.data<double>()[1] = std::log(6.0);  // row 1: weight 6
  const std::vector<double> o_before(o.data<double>(), o.data<double>() + 4);
  be->attention_merge(acc, acc_lse, o, l);
  EXPECT_DOUBLE_EQ(acc.data<double>()[0], o_before[0]);
  EXPECT_DOUBLE_EQ(acc.data<double>()[1], o_before[1]);
  EXPECT_DOUBLE_EQ(acc_lse.data<double>()[0], 0.5);
  EXPECT_NEAR(acc.data<double>()[2], (2 * 1.0 + 6 * o_before[2]) / 8, 1e-15);
  EXPECT_NEAR(acc.data<double>()[3], (2 * 3.0 + 6 * o_before[3]) / 8, 1e-15);
  EXPECT_NEAR(acc_lse.data<double>()[1], std::log(8.0), 1e-15);
  // A block that saw nothing leaves the running result as it is.
  l.data<double>()[0] = l.data<double>()[1] = -INFINITY;
  const std::vector<double> acc_before(acc.data<double>(), acc.data<double>() + 4);
  be->attention_merge(acc, acc_lse, o, l);
  EXPECT_EQ(std::vector<double>(acc.data<double>(), acc.data<double>() + 4), acc_before);
}

TEST(BlockAttention, RejectsBlocksOutsideTheRow) {
  Case c({24});
  Tensor o = Tensor::empty({6, H, d}, DType::F64), l = Tensor::empty({H, 6}, DType::F64);
  EXPECT_THROW(c.be->attention_forward_block(o, l, c.q.slice(0, 6), c.k.slice(0, 6), c.v.slice(0, 6), c.docs, 20,
                                             0, kScale),
               Error);
  EXPECT_THROW(c.be->attention_forward_block(o, l, c.q.slice(0, 6), c.k.slice(0, 6), c.v.slice(0, 6), c.docs, 0,
                                             -1, kScale),
               Error);
  Tensor l_bad = Tensor::empty({H, 5}, DType::F64);
  EXPECT_THROW(c.be->attention_merge(o, l_bad, o, l), Error);
}

TEST(TokenLayout, EveryTokenOnExactlyOneRank) {
  for (int64_t sp : {1, 2, 3, 4, 6, 8}) {
    for (int64_t ring = 1; ring <= sp; ++ring) {
      if (sp % ring != 0) continue;
      for (bool zigzag : {false, true}) {
        const TokenLayout t(sp, ring, zigzag);
        const int64_t S_row = t.padded_length(37);
        EXPECT_EQ(S_row % t.multiple(), 0);
        std::set<int64_t> seen;
        for (int64_t s = 0; s < sp; ++s) {
          const std::vector<int64_t> mine = t.rank_tokens(S_row, s);
          EXPECT_EQ(static_cast<int64_t>(mine.size()), S_row / sp);
          for (int64_t g : mine) EXPECT_TRUE(seen.insert(g).second) << "token " << g << " twice";
        }
        EXPECT_EQ(static_cast<int64_t>(seen.size()), S_row);
        // A ring rank's tokens are its Ulysses ranks' tokens, in Ulysses-rank order.
        for (int64_t r = 0; r < ring; ++r) {
          std::vector<int64_t> joined;
          for (int64_t u = 0; u < sp / ring; ++u) {
            const std::vector<int64_t> part = t.rank_tokens(S_row, r * (sp / ring) + u);
            joined.insert(joined.end(), part.begin(), part.end());
          }
          std::vector<int64_t> chunks;
          for (const TokenRange& c : t.ring_chunks(S_row, r))
            for (int64_t i = 0; i < c.length; ++i) chunks.push_back(c.start + i);
          EXPECT_EQ(joined, chunks);
        }
      }
    }
  }
}

TEST(TokenLayout, ZigzagPairsEarlyAndLateChunks) {
  const TokenLayout t(4, 4, true);
  EXPECT_EQ(t.multiple(), 8);
  const std::vector<TokenRange> r0 = t.ring_chunks(16, 0), r3 = t.ring_chunks(16, 3);
  ASSERT_EQ(r0.size(), 2u);
  EXPECT_EQ(r0[0].start, 0);
  EXPECT_EQ(r0[1].start, 14);
  EXPECT_EQ(r3[0].start, 6);
  EXPECT_EQ(r3[1].start, 8);
  EXPECT_EQ(TokenLayout(6, 2, true).multiple(), 12);  // lcm(6, 4)
  EXPECT_EQ(TokenLayout(4, 2, true).multiple(), 4);
  EXPECT_FALSE(TokenLayout(4, 1, true).zigzag());  // no ring, nothing to balance
}

TEST(TokenLayout, ClearErrors) {
  EXPECT_THROW(TokenLayout(6, 4, false), Error);  // ring does not divide sp
  EXPECT_THROW(TokenLayout(0, 1, false), Error);
  try {
    TokenLayout(4, 4, true).check_length(12, "--seq");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--seq 12 is not a multiple of 8"), std::string::npos) << m;
    EXPECT_NE(m.find("zigzag"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace ulysses
