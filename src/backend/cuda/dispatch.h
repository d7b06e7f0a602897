// The CUDA backend's dtype dispatch: its ops' arguments were checked by Backend's
// entries (backend/op_checks.cpp); these turn the checked dtypes into kernel types.
#pragma once
#include <cuda_bf16.h>

#include "core/error.h"
#include "core/tensor.h"

namespace ulysses::cuda {

// Calls f.template operator()<T>() with T = float or __nv_bfloat16 per dtype.
template <class F>
void dispatch_act(DType d, const char* op, F&& f) {
  if (d == DType::F32) f.template operator()<float>();
  else if (d == DType::BF16) f.template operator()<__nv_bfloat16>();
  else ULY_FAIL(op << ": unsupported dtype " << dtype_name(d) << " (float32 or bfloat16)");
}

template <class T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.raw());
}

}  // namespace ulysses::cuda
