// The GEMM tuning cache's file (backend/gemm_tuning_cache.h): what one run stores the next
// finds, contexts kept apart, a damaged or foreign file ignored and rewritten, a file that
// cannot be written only warned about, and the environment's choice of file.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "backend/gemm_tuning_cache.h"
#include "test_util.h"

namespace ulysses {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(GemmTuningCache, WhatOneRunStoresTheNextFinds) {
  const std::string path = test::temp_dir("tuning_cache") + "/sub/gemm_tuning.json";
  {
    GemmTuningCache cache(path, "H200 sm_90");
    EXPECT_FALSE(cache.find("1,2,3").has_value());  // no file yet: empty, no error
    cache.store("1,2,3", "abcd");
    EXPECT_EQ(cache.find("1,2,3"), "abcd");
  }
  GemmTuningCache next(path, "H200 sm_90");
  EXPECT_EQ(next.find("1,2,3"), "abcd");
  GemmTuningCache other_gpu(path, "H100 sm_90");
  EXPECT_FALSE(other_gpu.find("1,2,3").has_value());
  other_gpu.store("1,2,3", "ef01");  // merged into the file, the first context kept
  EXPECT_EQ(GemmTuningCache(path, "H200 sm_90").find("1,2,3"), "abcd");
  EXPECT_EQ(GemmTuningCache(path, "H100 sm_90").find("1,2,3"), "ef01");
}

TEST(GemmTuningCache, WritersMergeTheirChoices) {
  const std::string path = test::temp_dir("tuning_merge") + "/gemm_tuning.json";
  GemmTuningCache rank0(path, "ctx"), rank1(path, "ctx");
  rank0.find("x");  // both loaded before either wrote, as two ranks of a run are
  rank1.find("x");
  rank0.store("a", "1");
  rank1.store("b", "2");
  GemmTuningCache later(path, "ctx");
  EXPECT_EQ(later.find("a"), "1");
  EXPECT_EQ(later.find("b"), "2");
}

TEST(GemmTuningCache, DamagedOrForeignFilesAreIgnoredAndRewritten) {
  const std::string dir = test::temp_dir("tuning_damaged");
  for (const std::string text : {"{\"format\": 1, \"contexts\": [", "[1, 2]", "{\"format\": 2, \"contexts\": {}}",
                                 "{\"format\": 1, \"contexts\": {\"ctx\": 5}}", ""}) {
    SCOPED_TRACE(text);
    const std::string path = dir + "/gemm_tuning.json";
    std::ofstream(path, std::ios::trunc) << text;
    GemmTuningCache cache(path, "ctx");
    EXPECT_FALSE(cache.find("k").has_value());
    cache.store("k", "v");
    EXPECT_EQ(GemmTuningCache(path, "ctx").find("k"), "v");
    EXPECT_NE(slurp(path).find("\"format\": 1"), std::string::npos);
  }
}

TEST(GemmTuningCache, AnUnwritableFileIsAWarningNotAnError) {
  const std::string dir = test::temp_dir("tuning_unwritable");
  const std::string blocker = dir + "/file";
  std::ofstream(blocker) << "x";
  GemmTuningCache cache(blocker + "/gemm_tuning.json", "ctx");  // a file where a folder must be
  EXPECT_NO_THROW(cache.store("k", "v"));
  EXPECT_EQ(cache.find("k"), "v");  // this run still uses its choice
  EXPECT_NO_THROW(cache.store("k2", "v2"));
  GemmTuningCache off("", "ctx");
  EXPECT_FALSE(off.enabled());
  EXPECT_NO_THROW(off.store("k", "v"));
}

TEST(GemmTuningCache, EntriesPerContextAreBounded) {
  const std::string path = test::temp_dir("tuning_bound") + "/gemm_tuning.json";
  GemmTuningCache cache(path, "ctx", 3);
  for (int i = 0; i < 5; ++i) cache.store("k" + std::to_string(i), "v");
  GemmTuningCache reread(path, "ctx");
  int kept = 0;
  for (int i = 0; i < 5; ++i) kept += reread.find("k" + std::to_string(i)).has_value() ? 1 : 0;
  EXPECT_EQ(kept, 3);
}

TEST(GemmTuningCache, TheEnvironmentPicksTheFile) {
  const char* vars[] = {"ULYSSES_GEMM_TUNING_CACHE", "ULYSSES_CACHE_DIR", "XDG_CACHE_HOME", "HOME"};
  std::string saved[4];
  bool had[4];
  for (int i = 0; i < 4; ++i) {
    const char* v = std::getenv(vars[i]);
    had[i] = v != nullptr;
    saved[i] = v ? v : "";
    unsetenv(vars[i]);
  }
  EXPECT_EQ(GemmTuningCache::default_path(), "");
  setenv("HOME", "/h", 1);
  EXPECT_EQ(GemmTuningCache::default_path(), "/h/.cache/ulysses/gemm_tuning.json");
  setenv("XDG_CACHE_HOME", "/x", 1);
  EXPECT_EQ(GemmTuningCache::default_path(), "/x/ulysses/gemm_tuning.json");
  setenv("ULYSSES_CACHE_DIR", "/u", 1);
  EXPECT_EQ(GemmTuningCache::default_path(), "/u/gemm_tuning.json");
  setenv("ULYSSES_GEMM_TUNING_CACHE", "/f.json", 1);
  EXPECT_EQ(GemmTuningCache::default_path(), "/f.json");
  setenv("ULYSSES_GEMM_TUNING_CACHE", "0", 1);
  EXPECT_EQ(GemmTuningCache::default_path(), "");
  for (int i = 0; i < 4; ++i) {
    if (had[i]) setenv(vars[i], saved[i].c_str(), 1);
    else unsetenv(vars[i]);
  }
}

}  // namespace
}  // namespace ulysses
