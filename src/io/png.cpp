#include "io/png.h"

#include <zlib.h>

#include <cstring>

#include "core/error.h"
#include "io/atomic_file.h"

namespace ulysses {

namespace {

void put_be32(std::vector<uint8_t>& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(uint8_t(v >> s));
}

void put_chunk(std::vector<uint8_t>& out, const char type[4], const std::vector<uint8_t>& body) {
  put_be32(out, uint32_t(body.size()));
  const size_t start = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), body.begin(), body.end());
  // The CRC covers the type and the data, not the length.
  put_be32(out, uint32_t(::crc32(0L, out.data() + start, uInt(out.size() - start))));
}

// A whole zlib stream (RFC 1950) of `raw`, as the IDAT chunk holds it.
std::vector<uint8_t> zlib_stream(const std::vector<uint8_t>& raw, int level) {
  uLongf size = compressBound(uLong(raw.size()));
  std::vector<uint8_t> z(size);
  const int rc = compress2(z.data(), &size, raw.data(), uLong(raw.size()), level);
  ULY_CHECK(rc == Z_OK, "png: zlib compress2 failed (" << rc << ")");
  z.resize(size);
  return z;
}

}  // namespace

std::vector<uint8_t> encode_png_rgb8(const uint8_t* rgb, int width, int height, int level) {
  // 2^28 pixels keep every size below zlib's 32-bit lengths (uLong is 32 bits on some platforms).
  ULY_CHECK(width > 0 && height > 0 && int64_t(width) * height <= (int64_t(1) << 28),
            "png: image size " << width << "x" << height << " is empty or too large (at most 2^28 pixels)");
  ULY_CHECK(level >= 0 && level <= 9, "png: compression level " << level << " is not in [0, 9]");
  // Every row is prefixed with its filter type; 0 (none) keeps it simple, and deflate
  // still finds the repeats (within a row and from the row above).
  const size_t row = size_t(width) * 3;
  std::vector<uint8_t> raw((row + 1) * size_t(height));
  for (int y = 0; y < height; ++y) {
    raw[size_t(y) * (row + 1)] = 0;
    std::memcpy(&raw[size_t(y) * (row + 1) + 1], rgb + size_t(y) * row, row);
  }
  std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  std::vector<uint8_t> ihdr;
  put_be32(ihdr, uint32_t(width));
  put_be32(ihdr, uint32_t(height));
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});  // bit depth 8, colour type 2 (RGB), deflate, filter 0, no interlace
  put_chunk(png, "IHDR", ihdr);
  put_chunk(png, "IDAT", zlib_stream(raw, level));
  put_chunk(png, "IEND", {});
  return png;
}

void write_png_rgb8(const std::string& path, const uint8_t* rgb, int width, int height, int level) {
  const std::vector<uint8_t> bytes = encode_png_rgb8(rgb, width, height, level);
  AtomicFile out(path);  // whole or not at all, and only over a regular file
  out.write(bytes.data(), bytes.size(), bytes.size());
  out.commit(bytes.size());
}

}  // namespace ulysses
