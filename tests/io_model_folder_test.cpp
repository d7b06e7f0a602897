// Hugging Face model folders: single-file and sharded round trips, atomic
// replacement, and the errors for missing or inconsistent files.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "io/model_folder.h"
#include "expect_error.h"
#include "test_util.h"

namespace ulysses {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;


ModelConfig tiny_config() {
  ModelConfig c;
  EXPECT_TRUE(named_model_config("tiny", &c));
  return c;
}

using Named = std::vector<std::pair<std::string, Tensor>>;

// A few tiny-model-shaped tensors (not the full model: this tests I/O, not shapes).
Named some_tensors(uint64_t seed) {
  const std::vector<std::pair<std::string, Shape>> spec = {
      {"model.embed_tokens.weight", {256, 64}},
      {"model.layers.0.self_attn.q_proj.weight", {64, 64}},
      {"model.layers.0.mlp.down_proj.weight", {64, 128}},
      {"model.layers.0.input_layernorm.weight", {64}},
      {"model.norm.weight", {64}},
      {"lm_head.weight", {256, 64}}};
  Named out;
  for (const auto& [name, shape] : spec) {
    Tensor t = Tensor::empty(shape, DType::F32);
    auto v = test::random_vector_f(static_cast<size_t>(t.numel()), seed++);
    std::memcpy(t.raw(), v.data(), t.nbytes());
    out.emplace_back(name, t);
  }
  return out;
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

// Every tensor reads back as `expected` after conversion to `dtype` (bit-exact).
void expect_tensors(const ModelFolder& m, const Named& expected, DType dtype) {
  ASSERT_EQ(m.tensor_names().size(), expected.size());
  for (const auto& [name, t] : expected) {
    ASSERT_TRUE(m.contains(name)) << name;
    EXPECT_EQ(m.info(name).dtype, dtype) << name;
    EXPECT_EQ(m.info(name).shape, t.shape()) << name;
    Tensor got = m.file_of(name).read_f32(name);
    const size_t n = static_cast<size_t>(t.numel());
    std::vector<uint8_t> stored(n * dtype_size(dtype));
    convert_from_f32(stored.data(), dtype, t.data<float>(), n);
    std::vector<float> want(n);
    convert_to_f32(want.data(), stored.data(), dtype, n);
    EXPECT_EQ(std::memcmp(got.raw(), want.data(), n * 4), 0) << name;
  }
}

size_t count_entries(const std::string& dir) {
  return static_cast<size_t>(std::distance(fs::directory_iterator(dir), fs::directory_iterator()));
}

TEST(ModelFolder, SingleFileRoundTrip) {
  const std::string dir = test::temp_dir("mf") + "/model";
  const Named tensors = some_tensors(1);
  save_model_folder(dir, tiny_config(), tensors, DType::F32);
  EXPECT_TRUE(fs::exists(dir + "/model.safetensors"));
  EXPECT_FALSE(fs::exists(dir + "/model.safetensors.index.json"));
  EXPECT_EQ(count_entries(dir), 2u);  // config.json + model.safetensors
  EXPECT_FALSE(fs::exists(dir + ".tmp"));

  const ModelFolder m = ModelFolder::open(dir);
  EXPECT_EQ(m.config().hidden_size, 64);
  EXPECT_EQ(m.config().torch_dtype, "float32");
  expect_tensors(m, tensors, DType::F32);
  EXPECT_EQ(m.file_of("lm_head.weight").metadata().at("format"), "pt");
  // Stored in the given order, so a reader streaming the file sees the model's order.
  const auto& entries = m.file_of("model.norm.weight").entries();
  for (size_t i = 0; i < tensors.size(); ++i) EXPECT_EQ(entries[i].name, tensors[i].first);
}

TEST(ModelFolder, Bf16AndF16ConvertFloatsOnly) {
  const std::string root = test::temp_dir("mf");
  Named tensors = some_tensors(2);
  Tensor steps = Tensor::empty({3}, DType::I64);  // non-float tensors are stored as they are
  const int64_t v[3] = {1, 2, 1LL << 40};
  std::memcpy(steps.raw(), v, sizeof(v));
  Named with_int = tensors;
  with_int.emplace_back("extra.steps", steps);
  for (DType dt : {DType::BF16, DType::F16}) {
    const std::string dir = root + "/" + dtype_name(dt);
    save_model_folder(dir, tiny_config(), with_int, dt);
    const ModelFolder m = ModelFolder::open(dir);
    EXPECT_EQ(m.config().torch_dtype, dtype_name(dt));
    EXPECT_EQ(read_json(dir + "/config.json")["torch_dtype"], dtype_name(dt));
    EXPECT_EQ(m.info("extra.steps").dtype, DType::I64);
    EXPECT_EQ(std::memcmp(m.file_of("extra.steps").view("extra.steps").raw(), v, sizeof(v)), 0);
    Named floats(with_int.begin(), with_int.end() - 1);
    ModelFolder copy = m;
    EXPECT_EQ(copy.info("model.norm.weight").dtype, dt);
    for (const auto& [name, t] : floats) {
      Tensor got = m.file_of(name).read_f32(name);
      EXPECT_LT(test::rel_error(got, t), dt == DType::BF16 ? 4e-3 : 1e-3) << name;
    }
  }
  EXPECT_ERROR(save_model_folder(root + "/i32", tiny_config(), tensors, DType::I32), "i32",
               "cannot save weights as int32");
}

TEST(ModelFolder, ShardedRoundTrip) {
  const std::string dir = test::temp_dir("mf") + "/sharded";
  const Named tensors = some_tensors(3);
  // Sizes (bf16): embed 32768, q 8192, down 16384, ln 128, norm 128, lm_head 32768.
  // Greedy with a 40000-byte limit: {embed}, {q, down, ln, norm}, {lm_head}.
  save_model_folder(dir, tiny_config(), tensors, DType::BF16, 40000);
  EXPECT_FALSE(fs::exists(dir + "/model.safetensors"));
  for (const char* shard : {"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                            "model-00003-of-00003.safetensors"})
    EXPECT_TRUE(fs::exists(dir + "/" + shard)) << shard;
  EXPECT_EQ(count_entries(dir), 5u);

  const json index = read_json(dir + "/model.safetensors.index.json");
  EXPECT_EQ(index["metadata"]["total_size"], 32768 + 8192 + 16384 + 128 + 128 + 32768);
  const json& wm = index["weight_map"];
  ASSERT_EQ(wm.size(), tensors.size());
  EXPECT_EQ(wm["model.embed_tokens.weight"], "model-00001-of-00003.safetensors");
  EXPECT_EQ(wm["model.layers.0.self_attn.q_proj.weight"], "model-00002-of-00003.safetensors");
  EXPECT_EQ(wm["model.norm.weight"], "model-00002-of-00003.safetensors");
  EXPECT_EQ(wm["lm_head.weight"], "model-00003-of-00003.safetensors");

  const ModelFolder m = ModelFolder::open(dir);
  expect_tensors(m, tensors, DType::BF16);
  EXPECT_EQ(&m.file_of("model.norm.weight"), &m.file_of("model.layers.0.mlp.down_proj.weight"))
      << "each shard is opened once";
  EXPECT_NE(&m.file_of("model.norm.weight"), &m.file_of("lm_head.weight"));
  EXPECT_ERROR(m.info("model.layers.9.mlp.up_proj.weight"), dir, "no tensor 'model.layers.9.mlp.up_proj.weight'");
}

TEST(ModelFolder, ReplacesExistingFolderAtomically) {
  const std::string dir = test::temp_dir("mf") + "/m";
  save_model_folder(dir, tiny_config(), some_tensors(10), DType::F32, 40000);  // sharded
  fs::create_directories(dir + ".tmp");                                          // stale leftovers
  std::ofstream(dir + ".tmp/junk") << "x";
  const Named second = some_tensors(20);
  save_model_folder(dir + "/", tiny_config(), second, DType::F32);  // now a single file; trailing slash ok
  EXPECT_FALSE(fs::exists(dir + ".tmp"));
  EXPECT_FALSE(fs::exists(dir + ".old"));
  EXPECT_FALSE(fs::exists(dir + "/model.safetensors.index.json")) << "old shards must not linger";
  EXPECT_EQ(count_entries(dir), 2u);
  expect_tensors(ModelFolder::open(dir), second, DType::F32);
}

TEST(ModelFolder, ConfigKeepsItsLayout) {
  const std::string root = test::temp_dir("mf");
  ModelConfig c = tiny_config();
  c.raw.erase("torch_dtype");
  c.raw["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}};  // transformers 5.x layout
  c.raw.erase("rope_theta");
  c.raw.erase("rope_scaling");
  c.raw["custom_field"] = "kept";
  save_model_folder(root + "/v5", c, some_tensors(1), DType::BF16);
  const json j = read_json(root + "/v5/config.json");
  EXPECT_EQ(j["dtype"], "bfloat16");
  EXPECT_FALSE(j.contains("torch_dtype"));
  EXPECT_FALSE(j.contains("rope_scaling"));
  EXPECT_EQ(j["rope_parameters"]["rope_theta"], 10000.0);
  EXPECT_EQ(j["custom_field"], "kept");
  EXPECT_EQ(ModelFolder::open(root + "/v5").config().torch_dtype, "bfloat16");
}

// Simulates a full disk (see io_test.cpp): the failed save must leave the old folder intact.
TEST(ModelFolder, FailedSaveKeepsOldFolder) {
  const std::string dir = test::temp_dir("mf") + "/keep";
  const Named first = some_tensors(5);
  save_model_folder(dir, tiny_config(), first, DType::F32);
  {
    auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
    rlimit old{};
    getrlimit(RLIMIT_FSIZE, &old);
    rlimit lim = old;
    lim.rlim_cur = 20000;  // config.json fits, the 65 KB embedding does not
    setrlimit(RLIMIT_FSIZE, &lim);
    EXPECT_ERROR(save_model_folder(dir, tiny_config(), some_tensors(6), DType::F32), "keep", "write failed");
    setrlimit(RLIMIT_FSIZE, &old);
    std::signal(SIGXFSZ, old_handler);
  }
  EXPECT_FALSE(fs::exists(dir + ".tmp"));
  EXPECT_FALSE(fs::exists(dir + ".old"));
  expect_tensors(ModelFolder::open(dir), first, DType::F32);

  Named dup = first;
  dup.push_back(first[0]);
  EXPECT_ERROR(save_model_folder(dir, tiny_config(), dup, DType::F32), "given twice");
  expect_tensors(ModelFolder::open(dir), first, DType::F32);
}

// ---- broken folders ----------------------------------------------------------

class BrokenFolder : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::temp_dir("mf_bad") + "/m";
    save_model_folder(dir_, tiny_config(), some_tensors(7), DType::BF16, 40000);  // three shards
  }
  void write_index(const json& j) { std::ofstream(dir_ + "/model.safetensors.index.json") << j.dump(); }
  json index() { return read_json(dir_ + "/model.safetensors.index.json"); }
  std::string dir_;
};

TEST_F(BrokenFolder, MissingFolderAndFiles) {
  EXPECT_ERROR(ModelFolder::open(dir_ + "/nope"), dir_ + "/nope", "does not exist");
  EXPECT_ERROR(ModelFolder::open(dir_ + "/config.json"), "config.json", "not a directory");
  fs::remove(dir_ + "/model.safetensors.index.json");
  EXPECT_ERROR(ModelFolder::open(dir_), dir_ + ": no model.safetensors or model.safetensors.index.json");
  fs::remove(dir_ + "/config.json");
  EXPECT_ERROR(ModelFolder::open(dir_), dir_ + ": no config.json");
}

TEST_F(BrokenFolder, BadConfigNamesFile) {
  std::ofstream(dir_ + "/config.json") << R"({"architectures": ["GPT2LMHeadModel"]})";
  EXPECT_ERROR(ModelFolder::open(dir_), dir_ + "/config.json", "GPT2LMHeadModel", "LlamaForCausalLM");
}

TEST_F(BrokenFolder, MissingShardFile) {
  fs::remove(dir_ + "/model-00002-of-00003.safetensors");
  EXPECT_ERROR(ModelFolder::open(dir_), "model.safetensors.index.json", "shard 'model-00002-of-00003.safetensors'",
               "does not exist");
}

TEST_F(BrokenFolder, TensorMissingFromItsShard) {
  json j = index();
  j["weight_map"]["lm_head.weight"] = "model-00001-of-00003.safetensors";
  write_index(j);
  EXPECT_ERROR(ModelFolder::open(dir_), "tensor 'lm_head.weight'", "model-00001-of-00003.safetensors",
               "does not contain it");
}

TEST_F(BrokenFolder, MalformedIndex) {
  std::ofstream(dir_ + "/model.safetensors.index.json") << "{\"weight_map\": ";
  EXPECT_ERROR(ModelFolder::open(dir_), "model.safetensors.index.json", "malformed JSON");
  write_index(json{{"metadata", {{"total_size", 1}}}});
  EXPECT_ERROR(ModelFolder::open(dir_), "model.safetensors.index.json", "'weight_map'");
  write_index(json{{"weight_map", json::object()}});
  EXPECT_ERROR(ModelFolder::open(dir_), "model.safetensors.index.json", "'weight_map' is empty");
  write_index(json{{"weight_map", {{"model.norm.weight", "../elsewhere.safetensors"}}}});
  EXPECT_ERROR(ModelFolder::open(dir_), "'model.norm.weight'", "names '../elsewhere.safetensors', which is not a file in");
  write_index(json{{"weight_map", {{"model.norm.weight", "/etc/passwd"}}}});
  EXPECT_ERROR(ModelFolder::open(dir_), "'model.norm.weight'", "names '/etc/passwd', which is not a file in");
  write_index(json{{"weight_map", {{"model.norm.weight", 3}}}});
  EXPECT_ERROR(ModelFolder::open(dir_), "'model.norm.weight'", "must be a file name");
}

TEST_F(BrokenFolder, CorruptShardNamesIt) {
  const std::string shard = dir_ + "/model-00003-of-00003.safetensors";
  fs::resize_file(shard, fs::file_size(shard) - 100);
  EXPECT_ERROR(ModelFolder::open(dir_), "model-00003-of-00003.safetensors", "tensor 'lm_head.weight'", "overrun");
}

}  // namespace
}  // namespace ulysses
