// ULY_HOST_DEVICE: a small function compiled for the host and, under nvcc, for the device too, so
// that the CPU reference and the CUDA kernels share one definition of the arithmetic.
#pragma once

#if defined(__CUDACC__)
#define ULY_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define ULY_HOST_DEVICE inline
#endif
