// Element types and the conversions between the float formats we store.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace ulysses {

enum class DType : uint8_t { F32, F64, BF16, F16, I32, I64, U8 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);        // "float32", "bfloat16", ...
const char* safetensors_dtype(DType t);  // "F32", "BF16", ...
// Parses a safetensors dtype string ("F32", "BF16", ...); false when unknown.
bool parse_safetensors_dtype(const std::string& s, DType* out);
bool is_float(DType t);

enum class Device : uint8_t { CPU, CUDA };
const char* device_name(Device d);

// bf16: the top 16 bits of an IEEE float32 (round to nearest even on the way in).
inline float bf16_to_float(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float fp16_to_float(uint16_t h);
uint16_t float_to_fp16(float f);

// Converts n elements of a float dtype (F32/F64/BF16/F16) into float/double.
void convert_to_f32(float* dst, const void* src, DType src_type, size_t n);
void convert_to_f64(double* dst, const void* src, DType src_type, size_t n);
// Converts n float32 values into dst_type (F32/F64/BF16/F16).
void convert_from_f32(void* dst, DType dst_type, const float* src, size_t n);

}  // namespace ulysses
