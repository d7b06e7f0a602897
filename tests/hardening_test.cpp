// The rules of docs/reliability.md, one by one: stated limits, files read only when
// regular and small enough, paths from files confined to their folder, outputs
// written whole or not at all (and logs whose every write is checked), one name per
// safetensors tensor, and the resume fingerprint.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <chrono>
#include <csignal>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "core/limits.h"
#include "expect_error.h"
#include "io/atomic_file.h"
#include "io/checksums.h"
#include "io/regular_file.h"
#include "io/safetensors.h"
#include "test_util.h"
#include "train/checkpoint.h"
#include "train/fingerprint.h"
#include "train/train_config.h"

namespace ulysses {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void put(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

TEST(Limits, IntegerRanges) {
  const IntRange r{1, 8, "ranks"};
  EXPECT_EQ(check_in_range("--sp", 1, r), 1);
  EXPECT_EQ(check_in_range("--sp", 8, r), 8);
  EXPECT_ERROR(check_in_range("--sp", 0, r), "--sp must be in [1, 8] (ranks), got 0");
  EXPECT_ERROR(check_in_range("--sp", 9, r), "got 9");
  EXPECT_ERROR(check_in_range("seed", -1, limits::kSeed), "seed must be in [0, ...)", "got -1");
}

TEST(Limits, RealRangesRefuseNanAndInfinity) {
  EXPECT_EQ(check_in_range("beta1", 0.0, limits::kBeta), 0.0);
  EXPECT_ERROR(check_in_range("beta1", 1.0, limits::kBeta), "beta1 must be in [0, 1)", "got 1");
  EXPECT_ERROR(check_in_range("eps", 0.0, limits::kAdamEps), "eps must be in (0, ...) (positive), got 0");
  EXPECT_ERROR(check_in_range("lr", std::nan(""), limits::kLearningRate), "got nan");
  EXPECT_ERROR(check_in_range("lr", std::numeric_limits<double>::infinity(), limits::kLearningRate), "got inf");
  EXPECT_ERROR(check_in_range("--memory-limit", 2e6, limits::kGiB), "(0, 1048576] (GiB), got 2000000");
}

TEST(Limits, ThreadsBoundedByTheHost) {
  EXPECT_GE(max_threads(), 4);
  EXPECT_LE(max_threads(), 4 * 65536);
}

TEST(ConfinedPath, PlainNamesOnly) {
  EXPECT_EQ(confined_path("/m", "model-00001.safetensors", "index.json", "entry 'x'"), "/m/model-00001.safetensors");
  for (const char* bad : {"../x", "/etc/passwd", "a/b", "", ".", "..", "./x"})
    EXPECT_ERROR(confined_path("/m", bad, "index.json", "entry 'x'"), "index.json: entry 'x' names '" + std::string(bad) + "'",
                 "not a file in /m");
}

TEST(ReadTextFile, RegularFilesWithinTheLimit) {
  const std::string dir = test::temp_dir("read_text");
  put(dir + "/a.json", "{\"x\": 1}");
  EXPECT_EQ(read_text_file(dir + "/a.json", "config", 8), "{\"x\": 1}");
  EXPECT_ERROR(read_text_file(dir + "/a.json", "config", 7), "a.json: the config is 8 bytes, more than the 7-byte limit");
  EXPECT_ERROR(read_text_file(dir, "config", 100), "the config is not a regular file but a directory");
  EXPECT_ERROR(read_text_file(dir + "/none.json", "config", 100), "none.json: cannot open config (No such file");
  ASSERT_EQ(::mkfifo((dir + "/fifo").c_str(), 0600), 0);
  EXPECT_ERROR(read_text_file(dir + "/fifo", "config", 100), "the config is not a regular file but a FIFO");  // no hang
  EXPECT_ERROR(read_text_file("/dev/zero", "tokenizer", 100), "/dev/zero: the tokenizer is not a regular file");
}

TEST(AtomicFile, WholeOrNothing) {
  const std::string dir = test::temp_dir("atomic");
  const std::string path = dir + "/config.json";
  write_file_atomic(path, "old");
  {
    test::FileSizeLimit limit(1000);
    EXPECT_ERROR(write_file_atomic(path, std::string(5000, 'x')), "config.json: write failed", "nothing was written",
                 "is the disk full?");
  }
  EXPECT_EQ(slurp(path), "old");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  // Never renamed over what is not a regular file.
  fs::create_symlink(path, dir + "/link.json");
  EXPECT_ERROR(write_file_atomic(dir + "/link.json", "new"), "exists and is not a regular file (a symbolic link)");
  EXPECT_EQ(slurp(path), "old");
  EXPECT_TRUE(fs::is_symlink(dir + "/link.json"));
}

TEST(AppendFile, EveryWriteChecked) {
  const std::string dir = test::temp_dir("append");
  const std::string path = dir + "/metrics.jsonl";
  AppendFile log(path);
  log.append("{\"step\": 1}\n");
  log.sync();
  EXPECT_EQ(slurp(path), "{\"step\": 1}\n");
  test::FileSizeLimit limit(100);
  EXPECT_ERROR(log.append(std::string(200, 'x')), "metrics.jsonl: write failed (File too large); is the disk full?");
}

TEST(SafetensorsHeader, ANameGivenTwiceIsRefused) {
  const std::string dir = test::temp_dir("dup_names");
  // Two entries named "a" with different offsets: a map-based reader would keep the last silently.
  std::string header = R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                       R"( "a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string file(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(file.data(), &n, 8);
  file += header + std::string(8, '\0');
  put(dir + "/dup.safetensors", file);
  EXPECT_ERROR(SafetensorsFile::open(dir + "/dup.safetensors"), "dup.safetensors: the header lists tensor 'a' twice");
}

// More entries than the stated limit: refused while the header is parsed, in time linear in its
// size (every check of the entries is a sort or a lookup: n log n); the limit itself is fine.
TEST(SafetensorsHeader, EntriesAreBoundedAndCheckedInNLogN) {
  const std::string dir = test::temp_dir("many_entries");
  auto write = [&](const std::string& name, size_t entries) {
    std::string header = "{";
    for (size_t i = 0; i < entries; ++i)
      header += (i ? ",\"" : "\"") + std::to_string(i) + R"(":{"dtype":"F32","shape":[0],"data_offsets":[0,0]})";
    header += "}";
    std::string file(8, '\0');
    const uint64_t n = header.size();
    std::memcpy(file.data(), &n, 8);
    put(dir + "/" + name, file + header);
  };
  write("over.safetensors", limits::kMaxSafetensorsEntries + 1);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_ERROR(SafetensorsFile::open(dir + "/over.safetensors"),
               "over.safetensors: the header lists more than 1048576 tensors (the limit of one file)");
  write("many.safetensors", 200000);
  EXPECT_EQ(SafetensorsFile::open(dir + "/many.safetensors").entries().size(), 200000u);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 60.0);
}

// Checksums at rest (issue 28, class 7): one flipped byte, a truncated or missing file, or an
// entry that leaves the folder is refused with one line naming the file; a folder without the
// list (written before checksums) passes.
TEST(Checksums, EveryByteOfEveryFile) {
  const std::string dir = test::temp_dir("checksums");
  EXPECT_FALSE(verify_checksums(dir));
  fs::create_directories(dir + "/model");
  put(dir + "/model/w.safetensors", std::string(1000, 'x'));
  put(dir + "/trainer_state.json", "{}");
  write_checksums(dir);
  EXPECT_TRUE(verify_checksums(dir));
  const json list = json::parse(slurp(dir + "/checksums.json"));
  EXPECT_EQ(list["files"].size(), 2u);
  EXPECT_EQ(list["files"]["model/w.safetensors"]["bytes"], 1000);

  std::string flipped(1000, 'x');
  flipped[700] ^= 0x01;
  put(dir + "/model/w.safetensors", flipped);
  EXPECT_ERROR(verify_checksums(dir), dir + "/model/w.safetensors: checksum mismatch (crc32 ", "the file is damaged");
  put(dir + "/model/w.safetensors", std::string(999, 'x'));
  EXPECT_ERROR(verify_checksums(dir), "w.safetensors: 999 bytes, but 1000 when it was written");
  fs::remove(dir + "/model/w.safetensors");
  EXPECT_ERROR(verify_checksums(dir), "w.safetensors: missing (listed in");
  put(dir + "/checksums.json", R"({"algorithm": "crc32", "files": {"../x": {"bytes": 1, "crc32": "00000000"}}})");
  EXPECT_ERROR(verify_checksums(dir), "checksums.json: entry '../x' is not a file inside");
}

TEST(SafetensorsHeader, AnAbsurdHeaderLengthIsRefusedBeforeParsing) {
  const std::string dir = test::temp_dir("big_header");
  std::string file(8, '\0');
  const uint64_t n = limits::kMaxSafetensorsHeader + 8;
  std::memcpy(file.data(), &n, 8);
  file += "{}";
  put(dir + "/big.safetensors", file);
  fs::resize_file(dir + "/big.safetensors", 8 + n);  // sparse: the length is checked before the JSON is read
  EXPECT_ERROR(SafetensorsFile::open(dir + "/big.safetensors"), "over the 104857600-byte limit for a safetensors header");
}

json fingerprint_with(double theta, int64_t shard_tokens, int shards = 1) {
  TrainConfig c = load_train_config("", {"data.train=x", "model_config=tiny"});
  ModelConfig m;
  named_model_config("tiny", &m);
  m.rope.theta = theta;
  json list = json::array();
  for (int i = 0; i < shards; ++i) list.push_back({{"file", "train-0000" + std::to_string(i) + ".tokens"}, {"tokens", shard_tokens}});
  return run_fingerprint(c, m, CheckpointMesh{2, 2, 1}, {{"train", {{"tokenizer", "byte"}, {"shards", list}}}});
}

TEST(ResumeFingerprint, SameMathsPasses) {
  check_resume_fingerprint(fingerprint_with(10000, 100), fingerprint_with(10000, 100), "ck");
  // Written to JSON text and read back, as trainer_state.json does.
  check_resume_fingerprint(json::parse(fingerprint_with(10000, 100).dump()), fingerprint_with(10000, 100), "ck");
}

TEST(ResumeFingerprint, NamesTheKeyAndBothValues) {
  EXPECT_ERROR(check_resume_fingerprint(fingerprint_with(10000, 100), fingerprint_with(500000, 100), "ck/step-3"),
               "resume would change the run's maths: 'model.rope_theta' is 500000.0 in this run but was 10000.0 in ck/step-3");
  EXPECT_ERROR(check_resume_fingerprint(fingerprint_with(10000, 100), fingerprint_with(10000, 101), "ck"),
               "'data.train.shards[0].tokens' is 101 in this run but was 100");
  // Another number of shards: the count is named, not the first shard that happens to differ.
  EXPECT_ERROR(check_resume_fingerprint(fingerprint_with(10000, 100), fingerprint_with(10000, 100, 2), "ck"),
               "'data.train.shards.count' is 2 in this run but was 1", "other value");
}

TEST(ResumeFingerprint, CoversPrecisionMeshAndOptimizerButNotSteps) {
  ModelConfig m;
  named_model_config("tiny", &m);
  auto fp = [&](std::vector<std::string> overrides, CheckpointMesh mesh = {1, 1, 1}) {
    overrides.insert(overrides.begin(), {"data.train=x", "model_config=tiny"});
    return run_fingerprint(load_train_config("", overrides), m, mesh, json::object());
  };
  const json base = fp({});
  EXPECT_ERROR(check_resume_fingerprint(base, fp({"backend=cuda"}), "ck"), "'precision.backend' is \"cuda\"");
  EXPECT_ERROR(check_resume_fingerprint(fp({"backend=cuda"}), fp({"backend=cuda", "dtype=fp32"}), "ck"),
               "'precision.dtype' is \"fp32\" in this run but was \"bf16\"");
  EXPECT_ERROR(check_resume_fingerprint(base, fp({}, {2, 2, 1}), "ck"), "'mesh.");
  const CheckpointMesh sp2 = {2, 2, 1};
  EXPECT_ERROR(check_resume_fingerprint(fp({}, sp2), fp({"sp_ring=2"}, sp2), "ck"), "'mesh.sp_ring' is 2 in this run but was absent");
  EXPECT_ERROR(check_resume_fingerprint(fp({"sp_ring=2"}, sp2), fp({"sp_ring=2", "zigzag=true"}, sp2), "ck"),
               "'mesh.zigzag' is true");
  EXPECT_ERROR(check_resume_fingerprint(base, fp({"optimizer.beta2=0.99"}), "ck"), "'training.optimizer.beta2' is 0.99");
  EXPECT_ERROR(check_resume_fingerprint(base, fp({"data.seq_len=2048"}), "ck"), "'training.data.seq_len' is 2048");
  check_resume_fingerprint(base, fp({"steps=5000", "log_every=7", "out_dir=elsewhere", "memory.checkpoint=true"}), "ck");
}

TEST(TrainConfigLimits, RangesAndBudgets) {
  const std::vector<std::string> base = {"data.train=x", "model_config=tiny"};
  auto with = [&](const std::string& kv) {
    auto o = base;
    o.push_back(kv);
    return o;
  };
  EXPECT_ERROR(load_train_config("", with("optimizer.beta1=1.5")), "'optimizer.beta1' must be in [0, 1)", "got 1.5");
  EXPECT_ERROR(load_train_config("", with("memory.offload_checkpoints=-2")), "'memory.offload_checkpoints' must be in [-1, 65536]");
  EXPECT_ERROR(load_train_config("", with("num_layers=1025")), "'num_layers' must be in [0, 1024]");
  const std::string dir = test::temp_dir("yaml_bomb");
  std::string bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n";
  std::string prev = "a";
  for (char c = 'b'; c <= 'j'; ++c) {
    bomb += std::string(1, c) + ": &" + c + " [";
    for (int i = 0; i < 10; ++i) bomb += (i ? ", *" : "*") + prev;
    bomb += "]\n";
    prev = std::string(1, c);
  }
  put(dir + "/bomb.yaml", bomb);
  EXPECT_ERROR(load_train_config(dir + "/bomb.yaml", base), "bomb.yaml: the YAML expands to more than 1048576 nodes");
  std::string deep(100, '[');
  put(dir + "/deep.yaml", "steps: " + deep + std::string(100, ']') + "\n");
  EXPECT_ERROR(load_train_config(dir + "/deep.yaml", base), "deep.yaml: nesting deeper than 64 at line 1");
}

}  // namespace
}  // namespace ulysses
