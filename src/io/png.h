// A small, dependency-free PNG writer: 8-bit RGB, one IDAT chunk holding a zlib
// stream of either stored (uncompressed) deflate blocks or one fixed-Huffman
// block with a greedy LZ77 matcher. Enough for plots (large flat areas compress
// ~50x with the fixed code); not a general-purpose image library.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ulysses {

// CRC-32 as PNG chunks use it (ISO 3309 / ITU-T V.42, polynomial 0xEDB88320).
// Pass the previous result as `crc` to continue a running checksum.
uint32_t crc32(const uint8_t* data, size_t n, uint32_t crc = 0);

// Adler-32 as the zlib trailer uses it; continue with the previous result.
uint32_t adler32(const uint8_t* data, size_t n, uint32_t adler = 1);

enum class Deflate {
  Stored,        // no compression: 65535-byte stored blocks (fast, large)
  FixedHuffman,  // LZ77 + the fixed Huffman code of RFC 1951 section 3.2.6
};

// A complete zlib stream (RFC 1950): header, deflate blocks, Adler-32 of `data`.
std::vector<uint8_t> zlib_compress(const uint8_t* data, size_t n, Deflate mode = Deflate::FixedHuffman);

// The bytes of a PNG file for an RGB8 image. rgb: [height, width, 3], row-major, top row first.
std::vector<uint8_t> encode_png_rgb8(const uint8_t* rgb, int width, int height,
                                     Deflate mode = Deflate::FixedHuffman);

// Encodes and writes `path`; throws ulysses::Error naming the path when it cannot be written.
void write_png_rgb8(const std::string& path, const uint8_t* rgb, int width, int height,
                    Deflate mode = Deflate::FixedHuffman);

}  // namespace ulysses
