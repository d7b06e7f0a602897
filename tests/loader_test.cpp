// The data loader: packing, targets, shuffling, resumable state, SP rank slices, long mode.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <tuple>

#include "comm/communicator.h"
#include "expect_error.h"
#include "core/error.h"
#include "data/loader.h"
#include "data/permutation.h"
#include "data/prepare.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace ulysses;
using ulysses::test::expect_error;

namespace {

constexpr int64_t kVocab = 10000;

// Document d's token i is d*100 + i: every token says where it came from.
std::vector<std::vector<int32_t>> make_docs(const std::vector<int>& lengths, int first_doc = 0) {
  std::vector<std::vector<int32_t>> docs;
  for (size_t d = 0; d < lengths.size(); ++d) {
    docs.emplace_back();
    for (int i = 0; i < lengths[d]; ++i) docs.back().push_back(static_cast<int32_t>((first_doc + d) * 100 + i));
  }
  return docs;
}

std::string write_shard(const std::string& path, const std::vector<std::vector<int32_t>>& docs,
                        const std::string& tokenizer = "t") {
  TokenShardWriter w(path, kVocab, tokenizer);
  for (const auto& d : docs) w.add_document(d);
  w.finish();
  return path;
}

const std::vector<int> kLengths = {5, 1, 12, 3, 0, 7, 9, 2, 20, 4, 6, 11};

// The packing rule written out plainly over the whole stream.
struct Reference {
  std::vector<int32_t> stream, doc_begin;  // per token: the stream offset of its document's start
  explicit Reference(const std::vector<std::vector<int32_t>>& docs) {
    for (const auto& d : docs) {
      const auto begin = static_cast<int32_t>(stream.size());
      for (int32_t t : d) {
        stream.push_back(t);
        doc_begin.push_back(begin);
      }
    }
  }
  void row(int64_t k, int64_t S, int32_t* ids, int32_t* targets, int32_t* positions) const {
    for (int64_t j = 0; j < S; ++j) {
      const int64_t g = k * S + j;
      ids[j] = stream[g];
      positions[j] = static_cast<int32_t>(g - std::max<int64_t>(doc_begin[g], k * S));
    }
    for (int64_t j = 0; j < S; ++j) targets[j] = (j + 1 < S && positions[j + 1] != 0) ? ids[j + 1] : kIgnoreIndex;
  }
};

LoaderOptions options(std::vector<std::string> shards, int64_t S, bool shuffle, uint64_t seed = 0) {
  LoaderOptions o;
  o.shards = std::move(shards);
  o.seq_len = S;
  o.shuffle = shuffle;
  o.seed = seed;
  return o;
}

bool same(const TokenBatch& a, const TokenBatch& b) {
  return a.B == b.B && a.S == b.S && a.ids == b.ids && a.targets == b.targets && a.positions == b.positions;
}

}  // namespace

TEST(Loader, PackedRowsPositionsAndTargets) {
  const std::string dir = test::temp_dir("loader_pack");
  const auto docs = make_docs(kLengths);
  DataLoader loader(options({write_shard(dir + "/a.tokens", docs)}, 6, false));
  const Reference ref(docs);
  ASSERT_EQ(loader.num_sequences(), static_cast<int64_t>(ref.stream.size()) / 6);

  // Row 0 by hand: doc 0 (5 tokens), doc 1 (1 token); no target across either document end.
  const TokenBatch b0 = loader.next_batch(1);
  EXPECT_EQ(b0.ids, (std::vector<int32_t>{0, 1, 2, 3, 4, 100}));
  EXPECT_EQ(b0.positions, (std::vector<int32_t>{0, 1, 2, 3, 4, 0}));
  EXPECT_EQ(b0.targets, (std::vector<int32_t>{1, 2, 3, 4, -100, -100}));
  // Row 2 holds the end of doc 2 (12 tokens from offset 6): its continuation restarts at position 0.
  loader.next_batch(1);
  const TokenBatch b2 = loader.next_batch(1);
  EXPECT_EQ(b2.ids, (std::vector<int32_t>{206, 207, 208, 209, 210, 211}));
  EXPECT_EQ(b2.positions, (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));

  loader.restore({0, 0});
  const TokenBatch all = loader.next_batch(loader.num_sequences());
  std::vector<int32_t> ids(6), targets(6), positions(6);
  for (int64_t k = 0; k < loader.num_sequences(); ++k) {
    ref.row(k, 6, ids.data(), targets.data(), positions.data());
    EXPECT_EQ(std::vector<int32_t>(all.ids.begin() + k * 6, all.ids.begin() + (k + 1) * 6), ids) << "row " << k;
    EXPECT_EQ(std::vector<int32_t>(all.targets.begin() + k * 6, all.targets.begin() + (k + 1) * 6), targets) << k;
    EXPECT_EQ(std::vector<int32_t>(all.positions.begin() + k * 6, all.positions.begin() + (k + 1) * 6), positions) << k;
  }
}

TEST(Loader, ShardsFormOneStream) {
  const std::string dir = test::temp_dir("loader_multi");
  const auto docs = make_docs(kLengths);
  const std::vector<std::vector<int32_t>> first(docs.begin(), docs.begin() + 5), second(docs.begin() + 5, docs.end());
  DataLoader one(options({write_shard(dir + "/all.tokens", docs)}, 7, false));
  DataLoader two(options({write_shard(dir + "/s0.tokens", first), write_shard(dir + "/empty.tokens", {}),
                          write_shard(dir + "/s1.tokens", second)},
                         7, false));
  ASSERT_EQ(one.num_sequences(), two.num_sequences());
  EXPECT_TRUE(same(one.next_batch(one.num_sequences()), two.next_batch(two.num_sequences())));
}

TEST(Loader, ShuffleIsAPermutationPerEpochAndDeterministic) {
  const std::string dir = test::temp_dir("loader_shuffle");
  const std::string shard = write_shard(dir + "/a.tokens", make_docs(kLengths));
  DataLoader a(options({shard}, 3, true, 1)), b(options({shard}, 3, true, 1)), c(options({shard}, 3, true, 2));
  const int64_t N = a.num_sequences();
  std::vector<int64_t> epoch0, epoch1, other;
  for (int64_t i = 0; i < N; ++i) {
    epoch0.push_back(a.sequence_at(i));
    epoch1.push_back(a.sequence_at(N + i));
    other.push_back(c.sequence_at(i));
  }
  EXPECT_EQ(std::set<int64_t>(epoch0.begin(), epoch0.end()).size(), static_cast<size_t>(N));
  EXPECT_EQ(std::set<int64_t>(epoch1.begin(), epoch1.end()).size(), static_cast<size_t>(N));
  EXPECT_EQ(*std::max_element(epoch0.begin(), epoch0.end()), N - 1);
  EXPECT_NE(epoch0, epoch1);  // a new order every epoch
  EXPECT_NE(epoch0, other);   // and per seed
  std::vector<int64_t> identity(N);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_NE(epoch0, identity);
  for (int i = 0; i < 7; ++i) EXPECT_TRUE(same(a.next_batch(5), b.next_batch(5)));  // runs over several epochs
  EXPECT_GE(a.state().epoch, 1);
}

TEST(Loader, StateSaveRestoreGivesTheSameBatches) {
  const std::string dir = test::temp_dir("loader_state");
  const std::string shard = write_shard(dir + "/a.tokens", make_docs(kLengths));
  DataLoader a(options({shard}, 4, true, 42));
  for (int i = 0; i < 5; ++i) a.next_batch(3);
  const std::string saved = a.state_json();
  std::vector<TokenBatch> expected;
  for (int i = 0; i < 6; ++i) expected.push_back(a.next_batch(3));  // crosses an epoch boundary
  DataLoader b(options({shard}, 4, true, 42));
  b.restore_json(saved);
  for (int i = 0; i < 6; ++i) EXPECT_TRUE(same(b.next_batch(3), expected[i])) << "batch " << i;
  DataLoader wrong_seed(options({shard}, 4, true, 43));
  std::string m = expect_error([&] { wrong_seed.restore_json(saved); });
  EXPECT_NE(m.find("seed"), std::string::npos) << m;
  DataLoader wrong_len(options({shard}, 5, true, 42));
  m = expect_error([&] { wrong_len.restore_json(saved); });
  EXPECT_NE(m.find("seq_len"), std::string::npos) << m;
  EXPECT_NE(expect_error([&] { b.restore_json("{\"epoch\": 1"); }).find("invalid JSON"), std::string::npos);
}

TEST(Loader, RankSlicesConcatenateToTheFullRow) {
  const std::string dir = test::temp_dir("loader_sp");
  const std::string shard = write_shard(dir + "/a.tokens", make_docs(kLengths));
  for (int64_t S : {12, 10}) {
    for (int64_t P : {1, 2, 3, 4, 5}) {
      DataLoader full(options({shard}, S, true, 3));
      full.next_batch(1);  // start somewhere other than slot 0
      const LoaderState st = full.state();
      const TokenBatch batch = full.next_batch(2);
      const int64_t S_l = (S + P - 1) / P;
      for (int64_t r = 0; r < P; ++r) {
        SCOPED_TRACE("S " + std::to_string(S) + " P " + std::to_string(P) + " rank " + std::to_string(r));
        DataLoader part(options({shard}, S, true, 3));
        part.restore(st);
        const auto shards = part.next_shards(2, r, P);
        EXPECT_EQ(part.state().index, full.state().index);  // same advance as next_batch
        ASSERT_EQ(shards.size(), 2u);
        auto sim = make_simulated_communicator(static_cast<int>(P), static_cast<int>(r));
        for (int64_t row = 0; row < 2; ++row) {
          const SequenceShard want = shard_sequence(batch, row, *sim);  // slicing and padding rule of the model
          const SequenceShard& got = shards[row];
          EXPECT_EQ(got.S_global, want.S_global);
          EXPECT_EQ(got.offset, want.offset);
          EXPECT_EQ(got.S_local(), S_l);
          EXPECT_EQ(got.ids, want.ids);
          EXPECT_EQ(got.targets, want.targets);
          EXPECT_EQ(got.positions, want.positions);
          // doc_start of the whole padded row, as an all-gather of positions would give it.
          std::vector<int32_t> padded(batch.positions.begin() + row * S, batch.positions.begin() + (row + 1) * S);
          for (int64_t g = S; g < S_l * P; ++g) padded.push_back(static_cast<int32_t>(g - S));
          EXPECT_EQ(got.doc_start, document_starts(padded));
        }
      }
    }
  }
}

// Ring layouts (zigzag, hybrid): each rank reads exactly the tokens shard_sequence gives it.
TEST(Loader, RingLayoutsReadWhatShardSequenceGives) {
  const std::string dir = test::temp_dir("loader_ring");
  const std::string shard = write_shard(dir + "/a.tokens", make_docs(kLengths));
  const int64_t S = 16;
  for (auto [P, ring, zigzag] : std::vector<std::tuple<int64_t, int64_t, bool>>{
           {4, 4, true}, {4, 2, true}, {8, 4, true}, {2, 2, false}, {6, 3, false}}) {
    const TokenLayout layout(P, ring, zigzag);
    if (layout.zigzag() && S % layout.multiple() != 0) continue;
    DataLoader full(options({shard}, S, true, 3));
    const TokenBatch batch = full.next_batch(2);
    std::vector<int32_t> padded(batch.positions.begin(), batch.positions.begin() + S);
    for (int64_t g = S; g < layout.padded_length(S); ++g) padded.push_back(static_cast<int32_t>(g - S));
    for (int64_t r = 0; r < P; ++r) {
      SCOPED_TRACE(layout.describe() + " rank " + std::to_string(r));
      DataLoader part(options({shard}, S, true, 3));
      const auto shards = part.next_shards(2, r, layout);
      auto sim = make_simulated_communicator(static_cast<int>(P), static_cast<int>(r));
      const SequenceShard want = shard_sequence(batch, 0, *sim, layout);
      EXPECT_EQ(shards[0].ids, want.ids);
      EXPECT_EQ(shards[0].targets, want.targets);
      EXPECT_EQ(shards[0].positions, want.positions);
      EXPECT_EQ(shards[0].offset, want.offset);
      EXPECT_EQ(shards[0].doc_start, document_starts(padded));  // the whole row's, in global order
    }
  }
  // Zigzag with a length the chunks do not divide: the clear error, not padding.
  DataLoader odd(options({shard}, 12, true, 3));
  const std::string m = expect_error([&] { odd.next_shards(1, 0, TokenLayout(4, 4, true)); });
  EXPECT_NE(m.find("data.seq_len 12 is not a multiple of 8"), std::string::npos) << m;
}

TEST(Loader, LongDocumentMode) {
  const std::string dir = test::temp_dir("loader_long");
  const auto docs = make_docs(kLengths);
  LoaderOptions o = options({write_shard(dir + "/a.tokens", docs)}, 9, false);
  o.mode = LoaderMode::Long;
  DataLoader loader(o);
  // Documents with >= 9 tokens: 2 (12), 6 (9), 8 (20), 11 (11).
  ASSERT_EQ(loader.num_sequences(), 4);
  const TokenBatch b = loader.next_batch(4);
  const int docs_used[] = {2, 6, 8, 11};
  for (int r = 0; r < 4; ++r)
    for (int j = 0; j < 9; ++j) {
      EXPECT_EQ(b.ids[r * 9 + j], docs_used[r] * 100 + j);
      EXPECT_EQ(b.positions[r * 9 + j], j);
      EXPECT_EQ(b.targets[r * 9 + j], j + 1 < 9 ? docs_used[r] * 100 + j + 1 : kIgnoreIndex);
    }
  const auto sh = DataLoader(o).next_shards(1, 1, 3);
  EXPECT_EQ(sh[0].ids, (std::vector<int32_t>{203, 204, 205}));
  EXPECT_EQ(sh[0].targets, (std::vector<int32_t>{204, 205, 206}));  // the lookahead token
  EXPECT_EQ(sh[0].doc_start, std::vector<int32_t>(9, 0));
  o.seq_len = 21;
  const std::string m = expect_error([&] { DataLoader{o}; });
  EXPECT_NE(m.find("longest has 20; use data.mode=pack or a shorter data.seq_len"), std::string::npos) << m;
}

TEST(Loader, DataParallelRanksSplitEachGlobalBatch) {
  const std::string dir = test::temp_dir("loader_dp");
  const std::string shard = write_shard(dir + "/a.tokens", make_docs(kLengths));
  LoaderOptions o = options({shard}, 3, true, 9);
  DataLoader single(o);
  o.dp_size = 2;
  DataLoader r0(o);
  o.dp_rank = 1;
  DataLoader r1(o);
  for (int step = 0; step < 3; ++step) {
    const TokenBatch g = single.next_batch(4), a = r0.next_batch(2), b = r1.next_batch(2);
    std::vector<int32_t> joined = a.ids;
    joined.insert(joined.end(), b.ids.begin(), b.ids.end());
    EXPECT_EQ(joined, g.ids) << "step " << step;
  }
  EXPECT_EQ(r0.state_json(), single.state_json());
}

TEST(Loader, Errors) {
  const std::string dir = test::temp_dir("loader_err");
  const std::string a = write_shard(dir + "/a.tokens", make_docs({3, 4}));
  std::string m = expect_error([&] { DataLoader(options({a}, 8, false)); });
  // The advice names the train config's key (the loader's only user), not a flag train rejects.
  EXPECT_NE(m.find("7 tokens, fewer than one sequence of 8; use more data or a shorter data.seq_len"),
            std::string::npos) << m;
  const std::string b = write_shard(dir + "/b.tokens", make_docs({3}), "other");
  m = expect_error([&] { DataLoader(options({a, b}, 2, false)); });
  EXPECT_NE(m.find("share a tokenizer"), std::string::npos) << m;
  LoaderOptions o = options({a}, 3, false);
  o.vocab_limit = 50;  // doc 1's tokens are 100..103: refused at the start, not at the batch that reads them
  m = expect_error([&] { DataLoader limited(o); });
  EXPECT_NE(m.find("a.tokens: holds token id 103 (tokenizer 't', vocab 10000) but the model's vocab_size is 50"),
            std::string::npos) << m;
  o.vocab_limit = 104;  // every token fits: accepted although the tokenizer's vocabulary is larger
  DataLoader fits(o);
  fits.next_batch(2);
  EXPECT_NE(expect_error([&] { DataLoader(options({}, 3, false)); }).find("no token shards"), std::string::npos);
  EXPECT_NE(expect_error([&] { parse_loader_mode("packed"); }).find("'pack' or 'long'"), std::string::npos);
}

TEST(Loader, ResolvesPreparedFolders) {
  const std::string dir = test::temp_dir("loader_resolve");
  std::ofstream(dir + "/in.txt") << std::string(3000, 'x');
  std::ofstream(dir + "/in2.txt") << std::string(3000, 'y');
  PrepareOptions p;
  p.inputs = {dir + "/in.txt", dir + "/in2.txt"};
  p.out_dir = dir + "/out";
  p.shard_tokens = 3001;
  p.progress_interval_s = 0;
  prepare_corpus(p);
  const auto shards = resolve_shards(dir + "/out");
  ASSERT_EQ(shards.size(), 2u);
  EXPECT_EQ(fs::path(shards[1]).filename(), "train-00001.tokens");
  EXPECT_EQ(resolve_shards(shards[0] + "," + shards[1]), shards);
  DataLoader loader(options(shards, 1000, false));
  EXPECT_EQ(loader.num_sequences(), 6);  // 2 x 3001 tokens
  EXPECT_EQ(loader.tokenizer_name(), "byte");
  EXPECT_NE(expect_error([&] { resolve_shards(dir + "/out", "val"); }).find("--val-fraction"), std::string::npos);
  EXPECT_NE(expect_error([&] { resolve_shards(dir); }).find("no manifest.json"), std::string::npos);
}

TEST(Permutation, IsABijectionForManySizes) {
  for (uint64_t n : {1ull, 2ull, 3ull, 5ull, 16ull, 17ull, 100ull, 1000ull, 4097ull, 100003ull}) {
    const IndexPermutation p(n, 1234 + n);
    std::vector<char> seen(n, 0);
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t v = p(i);
      ASSERT_LT(v, n);
      ASSERT_FALSE(seen[v]) << "n " << n << " value " << v;
      seen[v] = 1;
    }
  }
  // Different keys give different orders.
  const IndexPermutation a(1000, 1), b(1000, 2);
  int equal = 0;
  for (uint64_t i = 0; i < 1000; ++i) equal += a(i) == b(i);
  EXPECT_LT(equal, 20);
}
