#include "core/dtype.h"

#include <cmath>

#include "core/error.h"

namespace ulysses {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::BF16: return 2;
    case DType::F16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::U8: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "float32";
    case DType::F64: return "float64";
    case DType::BF16: return "bfloat16";
    case DType::F16: return "float16";
    case DType::I32: return "int32";
    case DType::I64: return "int64";
    case DType::U8: return "uint8";
  }
  return "?";
}

const char* safetensors_dtype(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F64: return "F64";
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::U8: return "U8";
  }
  return "?";
}

bool parse_safetensors_dtype(const std::string& s, DType* out) {
  static const struct { const char* name; DType t; } table[] = {
      {"F32", DType::F32}, {"F64", DType::F64}, {"BF16", DType::BF16}, {"F16", DType::F16},
      {"I32", DType::I32}, {"I64", DType::I64}, {"U8", DType::U8}};
  for (const auto& e : table)
    if (s == e.name) {
      *out = e.t;
      return true;
    }
  return false;
}

bool is_float(DType t) { return t == DType::F32 || t == DType::F64 || t == DType::BF16 || t == DType::F16; }

const char* device_name(Device d) { return d == Device::CPU ? "cpu" : "cuda"; }

float fp16_to_float(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1u, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  float v;
  if (exp == 0) v = std::ldexp(static_cast<float>(mant), -24);
  else if (exp == 31) v = mant ? NAN : INFINITY;
  else v = std::ldexp(static_cast<float>(mant | 0x400u), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

uint16_t float_to_fp16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const float a = std::fabs(f);
  if (std::isnan(f)) return static_cast<uint16_t>(sign | 0x7e00u);
  if (a >= 65520.0f) return static_cast<uint16_t>(sign | 0x7c00u);
  if (a < 6.103515625e-05f) {  // subnormal: units of 2^-24, round to nearest even
    const float q = std::nearbyint(a * 16777216.0f);
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(q));
  }
  int e;
  const float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  uint32_t mant = static_cast<uint32_t>(std::nearbyint((m * 2.0f - 1.0f) * 1024.0f));
  uint32_t exp = static_cast<uint32_t>(e - 1 + 15);
  if (mant == 1024) {
    mant = 0;
    ++exp;
  }
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  return static_cast<uint16_t>(sign | (exp << 10) | mant);
}

template <class Out>
static void convert_to(Out* dst, const void* src, DType t, size_t n) {
  switch (t) {
    case DType::F32: {
      const float* s = static_cast<const float*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<Out>(s[i]);
      return;
    }
    case DType::F64: {
      const double* s = static_cast<const double*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<Out>(s[i]);
      return;
    }
    case DType::BF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<Out>(bf16_to_float(s[i]));
      return;
    }
    case DType::F16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<Out>(fp16_to_float(s[i]));
      return;
    }
    default: ULY_FAIL("cannot convert " << dtype_name(t) << " to a float type");
  }
}

void convert_to_f32(float* dst, const void* src, DType t, size_t n) { convert_to(dst, src, t, n); }
void convert_to_f64(double* dst, const void* src, DType t, size_t n) { convert_to(dst, src, t, n); }

void convert_from_f32(void* dst, DType t, const float* src, size_t n) {
  switch (t) {
    case DType::F32: std::memcpy(dst, src, n * 4); return;
    case DType::F64: {
      double* d = static_cast<double*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = src[i];
      return;
    }
    case DType::BF16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = float_to_bf16(src[i]);
      return;
    }
    case DType::F16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = float_to_fp16(src[i]);
      return;
    }
    default: ULY_FAIL("cannot convert float32 to " << dtype_name(t));
  }
}

}  // namespace ulysses
