// A small PNG writer: 8-bit RGB, one IDAT chunk holding the scanlines deflated by
// zlib. Enough for plots; not a general-purpose image library.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ulysses {

// zlib's compression levels: 0 stores the scanlines uncompressed, 9 is the smallest.
// Plots are mostly flat colour, so the default level already shrinks them ~50x.
inline constexpr int kPngDefaultLevel = 6;

// The bytes of a PNG file for an RGB8 image. rgb: [height, width, 3], row-major, top row first.
std::vector<uint8_t> encode_png_rgb8(const uint8_t* rgb, int width, int height, int level = kPngDefaultLevel);

// Encodes and writes `path`; throws ulysses::Error naming the path when it cannot be written.
void write_png_rgb8(const std::string& path, const uint8_t* rgb, int width, int height,
                    int level = kPngDefaultLevel);

}  // namespace ulysses
