// libFuzzer target: the safetensors reader (header JSON, dtypes, shapes, offsets,
// overlaps, duplicate names) and reading every tensor it accepts as float32.
#include "core/error.h"
#include "fuzz_input.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ulysses;
  const std::string path = fuzz::write_input("input.safetensors", data, size);
  try {
    const SafetensorsFile f = SafetensorsFile::open(path);
    for (const auto& e : f.entries()) {
      if (e.end - e.begin > (size_t{1} << 20)) continue;  // the bytes are checked; reading a huge one proves nothing
      try {
        const Tensor t = is_float(e.dtype) ? f.read_f32(e.name) : f.read_i32(e.name);
        if (t.numel() != f.view(e.name).numel()) std::abort();
      } catch (const Error&) {  // U8 as int32, an int64 that does not fit, ...
      }
    }
  } catch (const Error&) {
  }
  return 0;
}
