// Host-side argument checks shared by attention_forward.cu and attention_backward.cu.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/error.h"

namespace ulysses::cuda::attn_host {

inline void check_shapes(const char* op, int64_t S, int64_t H, int64_t Hkv, int64_t d, double scale) {
  ULY_CHECK(d == 16 || d == 32 || d == 64 || d == 128,
            op << ": head_dim d = " << d << " is not supported by the CUDA attention kernels; supported: 16, 32, 64, "
               << "128 (pick a model whose hidden_size / num_attention_heads is one of these)");
  ULY_CHECK(S >= 0 && S <= 2147483647LL - 256, op << ": sequence length S = " << S << " must be in [0, 2^31 - 256)");
  ULY_CHECK(H >= 1 && Hkv >= 1, op << ": head counts must be positive, got H = " << H << ", Hkv = " << Hkv);
  ULY_CHECK(H % Hkv == 0, op << ": H = " << H << " query heads is not a multiple of Hkv = " << Hkv
                             << " kv heads (grouped-query attention needs H % Hkv == 0)");
  ULY_CHECK(H <= 65535, op << ": H = " << H << " exceeds the 65535 heads a grid dimension can cover");
  ULY_CHECK(std::isfinite(scale), op << ": scale = " << scale << " is not finite");
}

// Block offsets (ring attention): global rows q0 + Sq and k0 + Sk stay in the int32 range.
inline void check_offsets(const char* op, int64_t Sq, int64_t Sk, int64_t q0, int64_t k0) {
  ULY_CHECK(q0 >= 0 && k0 >= 0 && q0 + Sq <= 2147483647LL - 256 && k0 + Sk <= 2147483647LL - 256,
            op << ": block offsets q0 = " << q0 << ", k0 = " << k0 << " (rows " << Sq << ", " << Sk
               << ") must be >= 0 and keep the global rows below 2^31 - 256");
}

// cp.async and vector loads move 16 bytes at a time.
inline void check_ptr(const void* p, const char* name, const char* op) {
  ULY_CHECK(p != nullptr, op << ": " << name << " is null");
  ULY_CHECK(reinterpret_cast<uintptr_t>(p) % 16 == 0,
            op << ": " << name << " = " << p << " is not 16-byte aligned (cudaMalloc'd buffers are)");
}

}  // namespace ulysses::cuda::attn_host
