// The YAML reader of training configs refuses what a node-tree reader would silently
// hide: a key given twice (top level or nested), a second document, nesting past the
// stated depth (checked before the parser descends: a million '[' is one line, not a
// stack overflow); and it reads what configs hold as before.
#include <gtest/gtest.h>

#include <string>

#include "expect_error.h"
#include "train/yaml_reader.h"

namespace ulysses {
namespace {

using nlohmann::json;

TEST(YamlReader, ReadsConfigsAsBefore) {
  const json j = read_yaml("a: 1\nb:\n  c: 2.5\n  d: \"007\"\n  e: [x, true, null, ~]\nf: nan\ng:\n", "t.yaml");
  EXPECT_EQ(j["a"], 1);
  EXPECT_EQ(j["b"]["c"], 2.5);
  EXPECT_EQ(j["b"]["d"], "007");  // quoted: a string
  EXPECT_EQ(j["b"]["e"], json::parse(R"(["x", true, null, null])"));
  EXPECT_EQ(j["f"], "nan");
  EXPECT_TRUE(j["g"].is_null());
  EXPECT_EQ(read_yaml("", "t.yaml"), json::object());
  EXPECT_EQ(read_yaml("# only a comment\n", "t.yaml"), json::object());
  EXPECT_EQ(read_yaml("a: &x {b: 1}\nc: *x\n", "t.yaml")["c"]["b"], 1);
}

TEST(YamlReader, AKeyGivenTwiceIsRefusedWithBothLines) {
  EXPECT_ERROR(read_yaml("steps: 10\nlr: 1\nsteps: 20\n", "t.yaml"), "t.yaml: key 'steps' is given twice (line 1 and line 3)");
  EXPECT_ERROR(read_yaml("optimizer:\n  lr: 1\n  beta1: 0.9\n  lr: 2\n", "t.yaml"),
               "t.yaml: key 'optimizer.lr' is given twice (line 2 and line 4)");
  EXPECT_ERROR(read_yaml("a: {b: 1, b: 2}\n", "t.yaml"), "key 'a.b' is given twice");
  // The same key in two different mappings is fine.
  EXPECT_EQ(read_yaml("a: {x: 1}\nb: {x: 2}\n", "t.yaml")["b"]["x"], 2);
}

TEST(YamlReader, ASecondDocumentIsRefused) {
  EXPECT_ERROR(read_yaml("steps: 10\n---\nsteps: 20\n", "t.yaml"), "t.yaml: a second YAML document at line 2",
               "a training config is one document");
  EXPECT_ERROR(read_yaml("---\nsteps: 10\n---\n", "t.yaml"), "a second YAML document");
  EXPECT_EQ(read_yaml("---\nsteps: 10\n", "t.yaml")["steps"], 10);  // one document with its marker
}

TEST(YamlReader, NestingIsBoundedBeforeTheParserDescends) {
  auto balanced = [](int n, char open, char close) { return std::string(n, open) + std::string(n, close); };
  std::string maps;  // {a: {a: ... 1}}
  for (int i = 0; i < 200000; ++i) maps += "{a: ";
  maps += "1" + std::string(200000, '}');
  std::string dashes;  // block sequences: "- - - - x"
  for (int i = 0; i < 100000; ++i) dashes += "- ";
  for (const std::string& deep : {balanced(1000000, '[', ']'), "a: " + maps, dashes + "x\n"})
    EXPECT_ERROR(read_yaml(deep, "deep.yaml"), "deep.yaml: nesting deeper than 64 at line 1, column");
  // Unbalanced: refused as soon as it is seen to be wrong or deep, one line either way.
  EXPECT_ERROR(read_yaml(std::string(1000000, '['), "deep.yaml"), "deep.yaml: ");
  const std::string ok = balanced(64, '[', ']');
  EXPECT_NO_THROW(read_yaml(ok, "t.yaml"));
  EXPECT_ERROR(read_yaml("[" + ok + "]", "t.yaml"), "nesting deeper than 64");
}

TEST(YamlReader, KeysArePlainNames) {
  EXPECT_ERROR(read_yaml("? [a]\n: 1\n", "t.yaml"), "t.yaml: a key must be a plain name, got a list");
  EXPECT_ERROR(read_yaml("{a: 1}: 2\n", "t.yaml"), "a key must be a plain name");
}

}  // namespace
}  // namespace ulysses
