// A minimal PNG reader for the tests, written independently of src/io/png.cpp:
// bit-by-bit CRC-32, per-byte Adler-32, an inflater for stored and fixed-Huffman
// blocks whose length/distance tables are derived from RFC 1951's rules rather
// than copied, and all five PNG row filters. Any structural fault throws
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

namespace ulysses::test {

struct DecodedPng {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;                // [height, width, 3]
  std::vector<std::string> chunks;         // chunk types in file order
  std::vector<int> block_types;            // BTYPE of every deflate block
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

inline uint32_t slow_adler32(const std::vector<uint8_t>& d) {
  uint32_t a = 1, b = 0;
  for (uint8_t v : d) {
    a = (a + v) % 65521;
    b = (b + a) % 65521;
  }
  return b << 16 | a;
}

inline void png_expect(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("png decode: " + what);
}

class InflateBits {
 public:
  InflateBits(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  uint32_t bit() {
    png_expect(pos_ < n_ * 8, "deflate stream ends early");
    const uint32_t b = (p_[pos_ / 8] >> (pos_ % 8)) & 1u;
    ++pos_;
    return b;
  }
  uint32_t bits(int k) {  // a number stored LSB-first
    uint32_t v = 0;
    for (int i = 0; i < k; ++i) v |= bit() << i;
    return v;
  }
  uint32_t code(int k) {  // a Huffman code stored MSB-first
    uint32_t v = 0;
    for (int i = 0; i < k; ++i) v = (v << 1) | bit();
    return v;
  }
  void align() { pos_ = (pos_ + 7) / 8 * 8; }
  size_t byte_pos() const { return pos_ / 8; }
  uint8_t byte() {
    png_expect(pos_ % 8 == 0 && pos_ / 8 < n_, "stored block runs past the stream");
    const uint8_t v = p_[pos_ / 8];
    pos_ += 8;
    return v;
  }

 private:
  const uint8_t* p_;
  size_t n_;
  size_t pos_ = 0;
};

// Fixed literal/length code: 7-bit codes 0..23 -> 256..279, 8-bit 48..191 -> 0..143,
// 8-bit 192..199 -> 280..287, 9-bit 400..511 -> 144..255.
inline int fixed_litlen(InflateBits& in) {
  uint32_t c = in.code(7);
  if (c <= 23) return 256 + int(c);
  c = (c << 1) | in.bit();
  if (c >= 48 && c <= 191) return int(c) - 48;
  if (c >= 192 && c <= 199) return 280 + int(c) - 192;
  c = (c << 1) | in.bit();
  return 144 + int(c) - 400;
}

// Returns {adler from the trailer checked, data}; fills block_types.
inline std::vector<uint8_t> zlib_inflate(const std::vector<uint8_t>& z, std::vector<int>* block_types) {
  png_expect(z.size() >= 6, "zlib stream shorter than header + trailer");
  png_expect((z[0] & 0x0F) == 8, "zlib CM is not deflate");
  png_expect((z[0] >> 4) <= 7, "zlib window larger than 32 KiB");
  png_expect((z[0] * 256 + z[1]) % 31 == 0, "zlib header check bits wrong");
  png_expect((z[1] & 0x20) == 0, "zlib preset dictionary set");
  // Length and distance tables from RFC 1951's rules: extra bits grow every 4 (2) codes.
  int len_base[29], len_extra[29], dist_base[30], dist_extra[30];
  for (int i = 0, b = 3; i < 28; ++i) {
    len_extra[i] = i < 8 ? 0 : (i - 4) / 4;
    len_base[i] = b;
    b += 1 << len_extra[i];
  }
  len_base[28] = 258, len_extra[28] = 0;
  for (int i = 0, b = 1; i < 30; ++i) {
    dist_extra[i] = i < 4 ? 0 : i / 2 - 1;
    dist_base[i] = b;
    b += 1 << dist_extra[i];
  }
  std::vector<uint8_t> out;
  InflateBits in(z.data() + 2, z.size() - 6);
  bool last = false;
  while (!last) {
    last = in.bit() != 0;
    const int type = int(in.bits(2));
    if (block_types) block_types->push_back(type);
    if (type == 0) {
      in.align();
      uint32_t len = in.byte();
      len |= uint32_t(in.byte()) << 8;
      uint32_t nlen = in.byte();
      nlen |= uint32_t(in.byte()) << 8;
      png_expect((len ^ 0xFFFFu) == nlen, "stored block LEN/NLEN mismatch");
      for (uint32_t i = 0; i < len; ++i) out.push_back(in.byte());
    } else if (type == 1) {
      for (;;) {
        const int sym = fixed_litlen(in);
        if (sym < 256) {
          out.push_back(uint8_t(sym));
          continue;
        }
        if (sym == 256) break;
        png_expect(sym <= 285, "invalid length symbol " + std::to_string(sym));
        const int li = sym - 257;
        const int len = len_base[li] + int(in.bits(len_extra[li]));
        const int di = int(in.code(5));
        png_expect(di < 30, "invalid distance symbol " + std::to_string(di));
        const size_t dist = size_t(dist_base[di]) + in.bits(dist_extra[di]);
        png_expect(dist <= out.size() && dist <= 32768,
                   "distance " + std::to_string(dist) + " reaches before the data");
        for (int k = 0; k < len; ++k) out.push_back(out[out.size() - dist]);
      }
    } else {
      png_expect(false, "block type " + std::to_string(type) + " not supported by the test decoder");
    }
  }
  in.align();
  png_expect(in.byte_pos() == z.size() - 6, "bytes left between the last block and the Adler-32 trailer");
  const size_t t = z.size() - 4;
  const uint32_t adler = uint32_t(z[t]) << 24 | uint32_t(z[t + 1]) << 16 | uint32_t(z[t + 2]) << 8 | z[t + 3];
  png_expect(adler == slow_adler32(out), "Adler-32 trailer does not match the inflated data");
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
  img.inflated = zlib_inflate(idat, &img.block_types);
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
