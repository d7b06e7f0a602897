// The random initialisation made where the weights live (Backend::init_uniform) gives the values
// the host generator gave before it (the loop below is that generator, as it was in
// LlamaWeights::init_random), whole or from a shard's offset, and LlamaWeights::init_random keeps
// every parameter's values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "core/counter_uniform.h"
#include "io/hf_config.h"
#include "model/llama_weights.h"

namespace ulysses {
namespace {

// The host generator of LlamaWeights::init_random before the values moved to the device.
float old_generator(uint64_t seed, uint64_t t, int64_t i) {
  const float a = 0.02f * std::sqrt(3.0f);
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + (t << 40) + static_cast<uint64_t>(i);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  const float u = static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
  return (2.0f * u - 1.0f) * a;
}

std::vector<float> values(Backend& be, const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  Tensor host = Tensor::borrow(out.data(), {t.numel()}, DType::F32);
  be.copy(host, t.reshape({t.numel()}));
  return out;
}

TEST(CounterUniform, KeepsTheOldGeneratorsValues) {
  // Anchors: the first values of seed 1, tensor 0, so that a change to both copies still fails.
  EXPECT_FLOAT_EQ(counter_uniform(1, 0, 0, 0.02f * std::sqrt(3.0f)), old_generator(1, 0, 0));
  const float anchors[] = {old_generator(1, 0, 0), old_generator(1, 0, 1), old_generator(1, 3, 7)};
  const float frozen[] = {0x1.b31a4p-6f, 0x1.2e386cp-8f, 0x1.e47132p-7f};  // printed with %a before the move
  for (int k = 0; k < 3; ++k) EXPECT_EQ(anchors[k], frozen[k]) << "anchor " << k;
  for (uint64_t t : {0ull, 5ull, 300ull})
    for (int64_t i : {int64_t{0}, int64_t{1}, int64_t{65535}, int64_t{1} << 33})
      EXPECT_EQ(counter_uniform(42, t, static_cast<uint64_t>(i), 0.02f * std::sqrt(3.0f)), old_generator(42, t, i));
}

TEST(CounterUniform, TheBackendOpMakesTheSameValuesWholeOrFromAnOffset) {
  auto be = make_cpu_backend();
  const float bound = 0.02f * std::sqrt(3.0f);
  Tensor whole = be->empty({100, 70}, DType::F32);
  be->init_uniform(whole, 9, 4, 0, bound);
  const std::vector<float> w = values(*be, whole);
  for (int64_t i = 0; i < 7000; ++i) ASSERT_EQ(w[i], old_generator(9, 4, i)) << "element " << i;
  Tensor part = be->empty({1000}, DType::F32);
  be->init_uniform(part, 9, 4, 3000, bound);  // a shard that starts at element 3000
  const std::vector<float> p = values(*be, part);
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(p[i], w[3000 + i]) << "shard element " << i;
}

TEST(CounterUniform, InitRandomKeepsEveryParametersValues) {
  ModelConfig c;
  ASSERT_TRUE(named_model_config("tiny", &c));
  c.num_hidden_layers = 2;
  auto be = make_cpu_backend();
  LlamaWeights w(c);
  w.init_random(*be, 77);
  for (size_t t = 0; t < w.params().size(); ++t) {
    const Parameter& p = w.params()[t];
    const std::vector<float> v = values(*be, p.value);
    const bool norm = p.shape.size() == 1;
    for (size_t i = 0; i < v.size(); ++i)
      ASSERT_EQ(v[i], norm ? 1.0f : old_generator(77, t, static_cast<int64_t>(i))) << p.name << " element " << i;
  }
}

TEST(CounterUniform, RefusesAStreamPastTheGeneratorsBits) {
  auto be = make_cpu_backend();
  Tensor x = be->empty({4}, DType::F32);
  EXPECT_THROW(be->init_uniform(x, 1, uint64_t{1} << 24, 0, 1.0f), Error);
  EXPECT_THROW(be->init_uniform(x, 1, 0, -1, 1.0f), Error);
}

}  // namespace
}  // namespace ulysses
