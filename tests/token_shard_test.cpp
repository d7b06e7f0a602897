// Token shards (write/read/validation), `ulysses prepare` and `ulysses tokenize`.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "expect_error.h"
#include "core/error.h"
#include "data/prepare.h"
#include "io/token_shard.h"
#include "io/tokenizer.h"
#include "test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace ulysses;
using ulysses::test::expect_error;

namespace {

void write_file(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream f(path, std::ios::binary);
  f << text;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string shard_with(const std::string& dir, const std::vector<std::vector<int32_t>>& docs, int64_t vocab = 1000) {
  const std::string path = dir + "/s.tokens";
  TokenShardWriter w(path, vocab, "test-tokenizer");
  for (const auto& d : docs) w.add_document(d);
  w.finish();
  return path;
}

int call(int (*fn)(int, char**), std::vector<std::string> args) {
  args.insert(args.begin(), {"ulysses", "cmd"});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return fn(static_cast<int>(argv.size()), argv.data());
}

// Runs `fn` with stdin = `in`, returns stdout.
std::string with_stdio(const std::string& in, const std::function<void()>& fn) {
  std::istringstream input(in);
  std::ostringstream output;
  auto* old_in = std::cin.rdbuf(input.rdbuf());
  auto* old_out = std::cout.rdbuf(output.rdbuf());
  try {
    fn();
  } catch (...) {
    std::cin.rdbuf(old_in);
    std::cout.rdbuf(old_out);
    throw;
  }
  std::cin.rdbuf(old_in);
  std::cout.rdbuf(old_out);
  return output.str();
}

}  // namespace

TEST(TokenShard, RoundTrip) {
  const std::string dir = test::temp_dir("shard_rt");
  const std::vector<std::vector<int32_t>> docs = {{1, 2, 3}, {}, {999}, {4, 5}};
  const std::string path = shard_with(dir, docs);
  EXPECT_FALSE(fs::exists(path + ".tmp-" + std::to_string(getpid())));
  const TokenShard s = TokenShard::open(path);
  EXPECT_EQ(s.num_tokens(), 6);
  EXPECT_EQ(s.num_documents(), 4);
  EXPECT_EQ(s.vocab_size(), 1000);
  EXPECT_EQ(s.tokenizer_name(), "test-tokenizer");
  EXPECT_EQ(std::vector<uint32_t>(s.tokens(), s.tokens() + 6), (std::vector<uint32_t>{1, 2, 3, 999, 4, 5}));
  EXPECT_EQ(std::vector<uint64_t>(s.document_offsets(), s.document_offsets() + 5),
            (std::vector<uint64_t>{0, 3, 3, 4, 6}));
  EXPECT_EQ(s.document_of(0), 0);
  EXPECT_EQ(s.document_of(2), 0);
  EXPECT_EQ(s.document_of(3), 2);  // skips the empty document 1
  EXPECT_EQ(s.document_of(5), 3);
  // 256-byte header, 6 tokens padded to 8 bytes, 5 offsets.
  EXPECT_EQ(fs::file_size(path), 256u + 24u + 40u);
  const TokenShard copy = s;  // copies share the mapping
  EXPECT_EQ(copy.tokens(), s.tokens());
}

TEST(TokenShard, WriterIsAtomic) {
  const std::string dir = test::temp_dir("shard_atomic");
  const std::string path = dir + "/a.tokens";
  {
    TokenShardWriter w(path, 10, "t");
    w.add_document({1, 2});
    EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);  // only the temporary
    EXPECT_FALSE(fs::exists(path));
  }  // abandoned without finish()
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 0);
  TokenShardWriter w(path, 10, "t");
  const std::string m = expect_error([&] { w.add_document({3, 10}); });
  EXPECT_NE(m.find("token 10 is outside the vocabulary [0, 10)"), std::string::npos) << m;
}

TEST(TokenShard, ValidationErrors) {
  const std::string dir = test::temp_dir("shard_bad");
  const std::string good = read_file(shard_with(dir, {{1, 2, 3}, {4}}));
  auto error_for = [&](const std::string& bytes, bool check_tokens = true) {
    write_file(dir + "/bad.tokens", bytes);
    return expect_error([&] { TokenShard::open(dir + "/bad.tokens", check_tokens); });
  };
  std::string m = error_for(good.substr(0, good.size() - 3));
  EXPECT_NE(m.find("truncated"), std::string::npos) << m;
  EXPECT_NE(m.find("bad.tokens"), std::string::npos) << m;
  m = error_for(good.substr(0, 100));
  EXPECT_NE(m.find("shorter than the 256-byte"), std::string::npos) << m;
  std::string b = good;
  b[0] = 'X';
  m = error_for(b);
  EXPECT_NE(m.find("not a token shard (magic 'XLYTOKS1'"), std::string::npos) << m;
  b = good;
  b[8] = 7;  // version
  m = error_for(b);
  EXPECT_NE(m.find("version 7 is not supported"), std::string::npos) << m;
  b = good;
  b[256] = static_cast<char>(0xE8);  // token 1 -> 1000 + ...: >= vocab 1000
  b[257] = 3;
  m = error_for(b);
  EXPECT_NE(m.find("outside the vocabulary [0, 1000)"), std::string::npos) << m;
  EXPECT_NO_THROW(TokenShard::open(dir + "/bad.tokens", /*check_tokens=*/false));
  m = error_for(good + "xx");
  EXPECT_NE(m.find("trailing bytes"), std::string::npos) << m;
  m = expect_error([&] { TokenShard::open(dir + "/missing.tokens"); });
  EXPECT_NE(m.find("missing.tokens: cannot open"), std::string::npos) << m;
}

TEST(Prepare, ByteTokenizerCorpus) {
  const std::string dir = test::temp_dir("prep");
  write_file(dir + "/in/b.txt", "second file");
  write_file(dir + "/in/a.txt", "first file\r\nwith CRLF");
  write_file(dir + "/in/sub/c.jsonl", "{\"text\": \"json one\", \"id\": 1}\n\n{\"text\": \"\"}\n{\"text\": \"json two\"}\n");
  write_file(dir + "/in/.hidden.txt", "never read");
  const std::string out = dir + "/out";
  ASSERT_EQ(call(run_prepare, {"--input", dir + "/in", "--out", out, "--quiet"}), 0);

  const json m = json::parse(std::ifstream(out + "/manifest.json"));
  EXPECT_EQ(m["tokenizer"]["name"], "byte");
  EXPECT_EQ(m["documents"]["train"], 4);
  EXPECT_EQ(m["documents"]["skipped_empty"], 1);
  ASSERT_EQ(m["train"].size(), 1u);
  EXPECT_EQ(m["val"].size(), 0u);
  const TokenShard s = TokenShard::open(out + "/" + m["train"][0]["file"].get<std::string>());
  // Sorted order a.txt, b.txt, sub/c.jsonl; every document ends with EOS (257).
  const std::vector<std::string> want = {"first file\r\nwith CRLF", "second file", "json one", "json two"};
  ASSERT_EQ(s.num_documents(), 4);
  auto tok = make_byte_tokenizer();
  for (int d = 0; d < 4; ++d) {
    std::vector<int32_t> ids(s.tokens() + s.document_begin(d), s.tokens() + s.document_end(d));
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids.back(), 257);
    ids.pop_back();
    EXPECT_EQ(tok->decode(ids), want[d]);
  }
  // An earlier output is not silently mixed with a new one.
  const std::string msg = expect_error([&] { call(run_prepare, {"--input", dir + "/in", "--out", out, "--quiet"}); });
  EXPECT_NE(msg.find("--force"), std::string::npos) << msg;
  EXPECT_EQ(call(run_prepare, {"--input", dir + "/in", "--out", out, "--quiet", "--force", "--no-eos"}), 0);
  EXPECT_EQ(TokenShard::open(out + "/train-00000.tokens").num_tokens(), s.num_tokens() - 4);
}

TEST(Prepare, ShardsValSplitAndDeterminism) {
  const std::string dir = test::temp_dir("prep_split");
  std::string jsonl;
  for (int i = 0; i < 200; ++i) jsonl += json({{"text", "document number " + std::to_string(i)}}).dump() + "\n";
  write_file(dir + "/docs.jsonl", jsonl);
  auto run = [&](const std::string& out, const std::string& seed) {
    return call(run_prepare, {"--input=" + dir + "/docs.jsonl", "--out", out, "--val-fraction", "0.25", "--seed", seed,
                              "--shard-tokens", "1000", "--quiet", "--threads", "2"});
  };
  ASSERT_EQ(run(dir + "/o1", "5"), 0);
  ASSERT_EQ(run(dir + "/o2", "5"), 0);
  ASSERT_EQ(run(dir + "/o3", "6"), 0);
  const json m = json::parse(std::ifstream(dir + "/o1/manifest.json"));
  const int64_t train = m["documents"]["train"], val = m["documents"]["val"];
  EXPECT_EQ(train + val, 200);
  EXPECT_GT(val, 25);
  EXPECT_LT(val, 75);
  EXPECT_GT(m["train"].size(), 2u);  // ~3.6K tokens at <= 1000 a shard
  int64_t docs = 0;
  for (const auto& e : m["train"]) {
    const TokenShard s = TokenShard::open(dir + "/o1/" + e["file"].get<std::string>());
    EXPECT_LE(s.num_tokens(), 1000);
    EXPECT_EQ(s.num_tokens(), e["tokens"].get<int64_t>());
    docs += s.num_documents();
  }
  EXPECT_EQ(docs, train);
  EXPECT_EQ(read_file(dir + "/o1/val-00000.tokens"), read_file(dir + "/o2/val-00000.tokens"));
  EXPECT_EQ(read_file(dir + "/o1/train-00001.tokens"), read_file(dir + "/o2/train-00001.tokens"));
  EXPECT_NE(read_file(dir + "/o1/val-00000.tokens"), read_file(dir + "/o3/val-00000.tokens"));
}

TEST(Prepare, HfTokenizerMatchesEncode) {
  const std::string dir = test::temp_dir("prep_hf");
  const std::string tk = test::fixtures_dir() + "/tokenizers/llama3/tokenizer.json";
  write_file(dir + "/a.txt", "Hello world, 12345 <|end_of_text|> more");
  ASSERT_EQ(call(run_prepare, {"--input", dir + "/a.txt", "--out", dir + "/o", "--tokenizer", tk,
                               "--add-special-tokens", "--quiet"}),
            0);
  auto tok = load_hf_tokenizer(tk);
  auto want = tok->encode("Hello world, 12345 <|end_of_text|> more", true);
  want.push_back(*tok->eos_id());
  const TokenShard s = TokenShard::open(dir + "/o/train-00000.tokens");
  EXPECT_EQ(std::vector<int32_t>(s.tokens(), s.tokens() + s.num_tokens()), want);
  EXPECT_EQ(s.tokenizer_name(), tok->name());
  EXPECT_EQ(s.vocab_size(), tok->vocab_size());
}

TEST(Prepare, Errors) {
  const std::string dir = test::temp_dir("prep_err");
  write_file(dir + "/bad.jsonl", "{\"text\": \"ok\"}\n{\"body\": \"no text\"}\n");
  std::string m = expect_error([&] { call(run_prepare, {"--input", dir + "/bad.jsonl", "--out", dir + "/o", "--quiet"}); });
  EXPECT_NE(m.find("bad.jsonl:2: no \"text\" field"), std::string::npos) << m;
  EXPECT_FALSE(fs::exists(dir + "/o/train-00000.tokens"));  // nothing half-made is left
  write_file(dir + "/empty/e.txt", "");
  m = expect_error([&] { call(run_prepare, {"--input", dir + "/empty", "--out", dir + "/o2", "--quiet"}); });
  EXPECT_NE(m.find("empty corpus"), std::string::npos) << m;
  m = expect_error([&] { call(run_prepare, {"--input", dir + "/nope", "--out", dir + "/o3"}); });
  EXPECT_NE(m.find("nope: no such input"), std::string::npos) << m;
  m = expect_error([&] { call(run_prepare, {"--input", dir + "/bad.jsonl", "--out", dir + "/o4", "--shard-tokens", "x"}); });
  EXPECT_NE(m.find("--shard-tokens"), std::string::npos) << m;
  m = expect_error([&] {
    call(run_prepare, {"--input", dir + "/empty", "--out", dir + "/o5", "--tokenizer",
                       test::fixtures_dir() + "/tokenizers/llama3", "--eos-token", "<|nope|>"});
  });
  EXPECT_NE(m.find("no token '<|nope|>'"), std::string::npos) << m;
}

TEST(TokenizeCommand, EncodesAndDecodesStdin) {
  const std::string tk = test::fixtures_dir() + "/tokenizers/llama3/tokenizer.json";
  auto tok = load_hf_tokenizer(tk);
  const std::string text = "Hello, world!\n  two spaces";
  const std::string out = with_stdio(text, [&] { call(run_tokenize, {"--tokenizer", tk, "--add-special-tokens"}); });
  EXPECT_EQ(json::parse(out).get<std::vector<int32_t>>(), tok->encode(text, true));
  const std::string back = with_stdio(out, [&] { call(run_tokenize, {"--tokenizer", tk, "--decode", "--skip-special-tokens"}); });
  EXPECT_EQ(back, text);
  EXPECT_EQ(with_stdio("ab", [&] { call(run_tokenize, {}); }), "[97, 98]\n");  // byte tokenizer by default
}
