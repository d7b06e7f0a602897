#include "io/png.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/error.h"
#include "io/atomic_file.h"

namespace ulysses {

namespace {

std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t n = 0; n < 256; ++n) {
    uint32_t c = n;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    t[n] = c;
  }
  return t;
}

// ---- deflate bit output -------------------------------------------------------

// Deflate packs bits LSB-first; Huffman codes go in most-significant-bit first,
// hence put_code reverses them.
class BitWriter {
 public:
  explicit BitWriter(std::vector<uint8_t>& out) : out_(out) {}
  void put(uint32_t value, int nbits) {
    acc_ |= uint64_t(value) << nbits_;
    nbits_ += nbits;
    while (nbits_ >= 8) {
      out_.push_back(uint8_t(acc_ & 0xFF));
      acc_ >>= 8;
      nbits_ -= 8;
    }
  }
  void put_code(uint32_t code, int len) {
    uint32_t rev = 0;
    for (int i = 0; i < len; ++i) rev |= ((code >> i) & 1u) << (len - 1 - i);
    put(rev, len);
  }
  void align() {
    if (nbits_ > 0) put(0, 8 - nbits_);
  }

 private:
  std::vector<uint8_t>& out_;
  uint64_t acc_ = 0;
  int nbits_ = 0;
};

// RFC 1951 3.2.5: length codes 257..285 and distance codes 0..29.
constexpr uint16_t kLenBase[29] = {3,  4,  5,  6,  7,  8,  9,  10, 11,  13,  15,  17,  19,  23, 27,
                                   31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
constexpr uint8_t kLenExtra[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                   2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
constexpr uint16_t kDistBase[30] = {1,    2,    3,    4,    5,    7,     9,     13,    17,  25,
                                    33,   49,   65,   97,   129,  193,   257,   385,   513, 769,
                                    1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
constexpr uint8_t kDistExtra[30] = {0, 0, 0, 0, 1, 1, 2, 2, 3,  3,  4,  4,  5,  5,  6,
                                    6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};

// The fixed literal/length code of RFC 1951 3.2.6.
void put_litlen(BitWriter& bw, int sym) {
  if (sym < 144) bw.put_code(0x30 + sym, 8);
  else if (sym < 256) bw.put_code(0x190 + (sym - 144), 9);
  else if (sym < 280) bw.put_code(sym - 256, 7);
  else bw.put_code(0xC0 + (sym - 280), 8);
}

void put_match(BitWriter& bw, int len, int dist) {
  const int li = int(std::upper_bound(kLenBase, kLenBase + 29, len) - kLenBase) - 1;
  put_litlen(bw, 257 + li);
  if (kLenExtra[li]) bw.put(uint32_t(len - kLenBase[li]), kLenExtra[li]);
  const int di = int(std::upper_bound(kDistBase, kDistBase + 30, dist) - kDistBase) - 1;
  bw.put_code(uint32_t(di), 5);  // fixed distance codes are plain 5-bit numbers
  if (kDistExtra[di]) bw.put(uint32_t(dist - kDistBase[di]), kDistExtra[di]);
}

void deflate_stored(const uint8_t* data, size_t n, std::vector<uint8_t>& out) {
  size_t pos = 0;
  do {
    const size_t len = std::min<size_t>(65535, n - pos);
    const bool last = pos + len == n;
    out.push_back(last ? 1 : 0);  // BFINAL, BTYPE=00, then padding to the byte boundary
    out.push_back(uint8_t(len & 0xFF));
    out.push_back(uint8_t(len >> 8));
    out.push_back(uint8_t(~len & 0xFF));
    out.push_back(uint8_t((~len >> 8) & 0xFF));
    out.insert(out.end(), data + pos, data + pos + len);
    pos += len;
  } while (pos < n);
}

// One final fixed-Huffman block; greedy LZ77 over hash chains of 3-byte prefixes.
void deflate_fixed(const uint8_t* data, size_t n, std::vector<uint8_t>& out) {
  constexpr size_t kWindow = 32768;
  constexpr int kHashBits = 15;
  constexpr int kMaxChain = 48;
  constexpr size_t kMinMatch = 3, kMaxMatch = 258;
  BitWriter bw(out);
  bw.put(1, 1);  // BFINAL
  bw.put(1, 2);  // BTYPE = 01 (fixed Huffman)
  std::vector<int64_t> head(size_t(1) << kHashBits, -1);
  std::vector<int64_t> prev(kWindow, -1);
  auto hash = [&](size_t p) {
    const uint32_t v = uint32_t(data[p]) << 16 | uint32_t(data[p + 1]) << 8 | data[p + 2];
    return (v * 2654435761u) >> (32 - kHashBits);
  };
  auto insert = [&](size_t p) {
    if (p + kMinMatch > n) return;
    const uint32_t h = hash(p);
    prev[p & (kWindow - 1)] = head[h];
    head[h] = int64_t(p);
  };
  size_t i = 0;
  while (i < n) {
    size_t best_len = 0, best_dist = 0;
    if (i + kMinMatch <= n) {
      const size_t max_len = std::min(kMaxMatch, n - i);
      int64_t cand = head[hash(i)];
      for (int chain = kMaxChain; cand >= 0 && i - size_t(cand) <= kWindow && chain > 0; --chain) {
        const size_t c = size_t(cand);
        if (data[c + best_len] == data[i + best_len] || best_len == 0) {
          size_t len = 0;
          while (len < max_len && data[c + len] == data[i + len]) ++len;
          if (len > best_len) {
            best_len = len;
            best_dist = i - c;
            if (len == max_len) break;
          }
        }
        const int64_t next = prev[c & (kWindow - 1)];
        if (next >= cand) break;  // the slot was reused by a newer position: chain ends
        cand = next;
      }
    }
    if (best_len >= kMinMatch) {
      put_match(bw, int(best_len), int(best_dist));
      for (size_t j = i; j < i + best_len; ++j) insert(j);
      i += best_len;
    } else {
      put_litlen(bw, data[i]);
      insert(i);
      ++i;
    }
  }
  put_litlen(bw, 256);  // end of block
  bw.align();
}

void put_be32(std::vector<uint8_t>& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(uint8_t(v >> s));
}

void put_chunk(std::vector<uint8_t>& out, const char type[4], const std::vector<uint8_t>& body) {
  put_be32(out, uint32_t(body.size()));
  const size_t start = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), body.begin(), body.end());
  put_be32(out, crc32(out.data() + start, out.size() - start));  // covers type and data, not length
}

}  // namespace

uint32_t crc32(const uint8_t* data, size_t n, uint32_t crc) {
  static const std::array<uint32_t, 256> table = make_crc_table();
  uint32_t c = crc ^ 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ data[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t adler32(const uint8_t* data, size_t n, uint32_t adler) {
  constexpr uint32_t kMod = 65521;
  uint32_t a = adler & 0xFFFF, b = adler >> 16;
  while (n > 0) {
    // 5552 is the largest run for which b cannot overflow 32 bits before the modulo.
    const size_t run = std::min<size_t>(n, 5552);
    for (size_t i = 0; i < run; ++i) {
      a += data[i];
      b += a;
    }
    a %= kMod;
    b %= kMod;
    data += run;
    n -= run;
  }
  return b << 16 | a;
}

std::vector<uint8_t> zlib_compress(const uint8_t* data, size_t n, Deflate mode) {
  std::vector<uint8_t> out;
  out.reserve(mode == Deflate::Stored ? n + n / 65535 * 5 + 16 : n / 8 + 64);
  // CMF 0x78: deflate with a 32 KiB window; FLG 0x01 makes CMF*256+FLG a multiple of 31.
  out.push_back(0x78);
  out.push_back(0x01);
  if (mode == Deflate::Stored) deflate_stored(data, n, out);
  else deflate_fixed(data, n, out);
  put_be32(out, adler32(data, n));
  return out;
}

std::vector<uint8_t> encode_png_rgb8(const uint8_t* rgb, int width, int height, Deflate mode) {
  ULY_CHECK(width > 0 && height > 0 && int64_t(width) * height <= (int64_t(1) << 28),
            "png: image size " << width << "x" << height << " is empty or too large (at most 2^28 pixels)");
  // Every row is prefixed with its filter type; 0 (none) keeps it simple and the
  // LZ77 stage still finds the repeats (within a row and from the row above).
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
  put_chunk(png, "IDAT", zlib_compress(raw.data(), raw.size(), mode));
  put_chunk(png, "IEND", {});
  return png;
}

void write_png_rgb8(const std::string& path, const uint8_t* rgb, int width, int height, Deflate mode) {
  const std::vector<uint8_t> bytes = encode_png_rgb8(rgb, width, height, mode);
  AtomicFile out(path);  // whole or not at all, and only over a regular file
  out.write(bytes.data(), bytes.size(), bytes.size());
  out.commit(bytes.size());
}

}  // namespace ulysses
