// Argument checks shared by the CUDA backend's files: each failure names the
// op, the argument, what it is and what was expected.
#pragma once
#include <cuda_bf16.h>

#include "core/error.h"
#include "core/tensor.h"

namespace ulysses::cuda::checks {

inline void need_device(const Tensor& t, const char* op, const char* arg) {
  ULY_CHECK(t.defined(), op << ": " << arg << " is an undefined tensor");
  ULY_CHECK(t.device() == Device::CUDA, op << ": " << arg << " is " << t.describe()
                                           << "; the CUDA backend needs device tensors (allocate them with "
                                              "backend.empty and fill them with backend.copy)");
}

inline void need_dtype(const Tensor& t, DType d, const char* op, const char* arg) {
  ULY_CHECK(t.dtype() == d, op << ": " << arg << " is " << t.describe() << ", expected " << dtype_name(d));
}

inline void need_shape(const Tensor& t, const Shape& s, const char* op, const char* arg) {
  ULY_CHECK(t.shape() == s, op << ": " << arg << " has shape " << shape_str(t.shape()) << ", expected "
                                  << shape_str(s));
}

inline void need_ndim(const Tensor& t, int nd, const char* op, const char* arg) {
  ULY_CHECK(t.ndim() == nd, op << ": " << arg << " must be " << nd << "-D, got " << t.describe());
}

// A device tensor of the same shape and dtype as `ref`.
inline void need_like(const Tensor& t, const Tensor& ref, const char* op, const char* arg, const char* ref_arg) {
  need_device(t, op, arg);
  ULY_CHECK(t.dtype() == ref.dtype() && t.shape() == ref.shape(),
            op << ": " << arg << " is " << t.describe() << " but " << ref_arg << " is " << ref.describe()
               << "; they must match in shape and dtype");
}

// The element type for activations: float32 or bfloat16.
inline void need_act(const Tensor& t, const char* op, const char* arg) {
  need_device(t, op, arg);
  ULY_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::BF16,
            op << ": " << arg << " is " << t.describe() << "; expected float32 or bfloat16");
}

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

}  // namespace ulysses::cuda::checks
