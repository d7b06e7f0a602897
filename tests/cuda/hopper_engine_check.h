// The engine's opt-in to the Hopper attention kernels, checked end to end: a CUDA backend made
// while the given environment is set (restored afterwards) runs attention forward and backward
// against the CPU backend on the same bf16-rounded inputs (S 700, 8 query / 2 KV heads, d 128,
// two packed documents). Shared by the forward's and the backward's tests.
#pragma once
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/documents.h"
#include "cuda/cuda_test_util.h"
#include "test_util.h"

namespace ulysses::cuda_test {

// env: (name, value) pairs set while the CUDA backend is made. seed: the first of four seeds of
// q, k, v, dout. check_forward: also compare out (2e-2) and lse (1e-3); the gradients at 5e-2.
inline void expect_engine_attention_matches_cpu(const std::vector<std::pair<const char*, const char*>>& env,
                                                uint64_t seed, bool check_forward) {
  std::vector<std::pair<bool, std::string>> saved;
  for (const auto& [name, value] : env) {
    const char* old = std::getenv(name);
    saved.emplace_back(old != nullptr, old ? old : "");
    setenv(name, value, 1);
  }
  std::unique_ptr<Backend> gpu = make_cuda_backend(0);
  for (size_t i = 0; i < env.size(); ++i) {
    if (saved[i].first) setenv(env[i].first, saved[i].second.c_str(), 1);
    else unsetenv(env[i].first);
  }
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  const int64_t S = 700, H = 8, Hkv = 2, d = 128, split = 290;
  const double scale = 1.0 / std::sqrt(double(d));
  auto host = [&](const Shape& shape, uint64_t s) {  // bf16-rounded random values, float32 on the host
    Tensor t = Tensor::empty(shape, DType::F32);
    const auto v = rounded<__nv_bfloat16>(test::random_vector_f(static_cast<size_t>(t.numel()), s, -1.0, 1.0));
    std::memcpy(t.raw(), v.data(), t.nbytes());
    return t;
  };
  auto dev = [&](const Tensor& h) {
    Tensor t = gpu->empty(h.shape(), DType::BF16);
    gpu->copy(t, h);
    return t;
  };
  auto to_host = [&](const Tensor& x) {
    Tensor t = Tensor::empty(x.shape(), DType::F32);
    gpu->copy(t, x);
    return t;
  };
  std::vector<int32_t> ds(S);
  for (int64_t i = 0; i < S; ++i) ds[i] = i < split ? 0 : static_cast<int32_t>(split);
  const Tensor q = host({S, H, d}, seed), k = host({S, Hkv, d}, seed + 1), v = host({S, Hkv, d}, seed + 2),
               dout = host({S, H, d}, seed + 3);
  Tensor gq = dev(q), gk = dev(k), gv = dev(v);
  Tensor out = gpu->empty({S, H, d}, DType::BF16), lse = gpu->empty({H, S}, DType::F32);
  const Documents gdocs = make_documents(*gpu, ds), cdocs = make_documents(*cpu, ds);
  gpu->attention_forward(out, lse, gq, gk, gv, gdocs, scale);
  Tensor rout = Tensor::empty({S, H, d}, DType::F32), rlse = Tensor::empty({H, S}, DType::F32);
  cpu->attention_forward(rout, rlse, q, k, v, cdocs, scale);
  if (check_forward) {
    EXPECT_LE(test::rel_error(to_host(out), rout), 2e-2) << "out";
    EXPECT_LE(test::rel_error(to_host(lse), rlse), 1e-3) << "lse";
  }
  Tensor dq = gpu->empty({S, H, d}, DType::BF16), dk = gpu->empty({S, Hkv, d}, DType::BF16),
         dv = gpu->empty({S, Hkv, d}, DType::BF16);
  gpu->attention_backward(dq, dk, dv, dev(dout), out, lse, gq, gk, gv, gdocs, scale);
  Tensor rq = Tensor::empty({S, H, d}, DType::F32), rk = Tensor::empty({S, Hkv, d}, DType::F32),
         rv = Tensor::empty({S, Hkv, d}, DType::F32);
  cpu->attention_backward(rq, rk, rv, dout, rout, rlse, q, k, v, cdocs, scale);
  EXPECT_LE(test::rel_error(to_host(dq), rq), 5e-2) << "dq";
  EXPECT_LE(test::rel_error(to_host(dk), rk), 5e-2) << "dk";
  EXPECT_LE(test::rel_error(to_host(dv), rv), 5e-2) << "dv";
}

}  // namespace ulysses::cuda_test
