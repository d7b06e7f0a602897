// A minimal PNG reader for the tests, written independently of src/io/png.cpp: a
// bit-by-bit CRC-32 of every chunk, the chunk order, and all five PNG row filters;
// the IDAT stream is inflated by zlib. Any structural fault throws
// std::runtime_error with what was wrong, so a test that decodes fails loudly.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include <zlib.h>

namespace ulysses::test {

struct DecodedPng {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;                // [height, width, 3]
  std::vector<std::string> chunks;         // chunk types in file order
  std::vector<uint8_t> inflated;           // the filtered scanlines as stored
  const uint8_t* at(int x, int y) const { return &rgb[(size_t(y) * width + x) * 3]; }
};

inline uint32_t slow_crc32(const uint8_t* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return ~c;
}

inline void png_expect(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("png decode: " + what);
}

// The IDAT's zlib stream inflated by zlib itself (which checks its header and Adler-32);
// throws when the stream is damaged, truncated, or followed by stray bytes.
inline std::vector<uint8_t> zlib_inflate(const std::vector<uint8_t>& z) {
  z_stream s{};
  png_expect(inflateInit(&s) == Z_OK, "inflateInit failed");
  s.next_in = const_cast<Bytef*>(z.data());
  s.avail_in = uInt(z.size());
  std::vector<uint8_t> out;
  int rc = Z_OK;
  while (rc == Z_OK) {  // Z_BUF_ERROR: the input ended before the stream did
    uint8_t buf[1 << 16];
    s.next_out = buf;
    s.avail_out = sizeof buf;
    rc = inflate(&s, Z_NO_FLUSH);
    out.insert(out.end(), buf, buf + (sizeof buf - s.avail_out));
  }
  const uInt left = s.avail_in;
  inflateEnd(&s);
  png_expect(rc == Z_STREAM_END, "zlib stream damaged or truncated (inflate returned " + std::to_string(rc) + ")");
  png_expect(left == 0, "bytes left after the zlib stream");
  return out;
}

inline uint32_t png_be32(const uint8_t* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3];
}

inline DecodedPng decode_png(const std::vector<uint8_t>& f) {
  static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  png_expect(f.size() >= 8 && std::equal(sig, sig + 8, f.begin()), "bad signature");
  DecodedPng img;
  std::vector<uint8_t> idat;
  size_t pos = 8;
  while (pos < f.size()) {
    png_expect(pos + 12 <= f.size(), "truncated chunk header");
    const uint32_t len = png_be32(&f[pos]);
    png_expect(pos + 12 + len <= f.size(), "chunk runs past the end of the file");
    const std::string type(f.begin() + long(pos) + 4, f.begin() + long(pos) + 8);
    const uint8_t* body = &f[pos + 8];
    png_expect(png_be32(body + len) == slow_crc32(&f[pos + 4], len + 4), "CRC mismatch in chunk " + type);
    png_expect(img.chunks.empty() == (type == "IHDR"), "IHDR must be first and only once");
    img.chunks.push_back(type);
    if (type == "IHDR") {
      png_expect(len == 13, "IHDR length is not 13");
      img.width = int(png_be32(body));
      img.height = int(png_be32(body + 4));
      png_expect(img.width > 0 && img.height > 0, "zero image size");
      png_expect(body[8] == 8 && body[9] == 2, "not 8-bit RGB (depth/colour type)");
      png_expect(body[10] == 0 && body[11] == 0 && body[12] == 0, "compression/filter/interlace not 0");
    } else if (type == "IDAT") {
      idat.insert(idat.end(), body, body + len);
    } else if (type == "IEND") {
      png_expect(len == 0 && pos + 12 == f.size(), "IEND not empty or not last");
    }
    pos += 12 + len;
  }
  png_expect(!img.chunks.empty() && img.chunks.back() == "IEND", "no IEND chunk");
  img.inflated = zlib_inflate(idat);
  const size_t row = size_t(img.width) * 3;
  png_expect(img.inflated.size() == (row + 1) * img.height, "inflated size is not height x (1 + 3 x width)");
  img.rgb.assign(row * img.height, 0);
  for (int y = 0; y < img.height; ++y) {
    const uint8_t ft = img.inflated[y * (row + 1)];
    const uint8_t* src = &img.inflated[y * (row + 1) + 1];
    uint8_t* cur = &img.rgb[y * row];
    const uint8_t* up = y > 0 ? &img.rgb[(y - 1) * row] : nullptr;
    for (size_t i = 0; i < row; ++i) {
      const int a = i >= 3 ? cur[i - 3] : 0, b = up ? up[i] : 0, c = (up && i >= 3) ? up[i - 3] : 0;
      int pred = 0;
      switch (ft) {
        case 0: pred = 0; break;
        case 1: pred = a; break;
        case 2: pred = b; break;
        case 3: pred = (a + b) / 2; break;
        case 4: {
          const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
          pred = (pa <= pb && pa <= pc) ? a : (pb <= pc ? b : c);
          break;
        }
        default: png_expect(false, "unknown filter type " + std::to_string(ft));
      }
      cur[i] = uint8_t(src[i] + pred);
    }
  }
  return img;
}

inline DecodedPng decode_png_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  png_expect(bool(in), "cannot open " + path);
  return decode_png(std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {}));
}

}  // namespace ulysses::test
