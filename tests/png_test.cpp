// PNG writer: whole files decoded pixel for pixel (chunk CRCs checked bit by bit,
// independently of zlib's crc32) at every compression level, the exact bytes of a
// tiny stored image, plots compressed, and corruption detected.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "core/error.h"
#include "io/png.h"
#include "png_decode.h"
#include "test_util.h"

namespace ulysses {
namespace {

std::vector<uint8_t> gradient_image(int w, int h) {
  std::vector<uint8_t> rgb(size_t(w) * h * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      uint8_t* p = &rgb[(size_t(y) * w + x) * 3];
      p[0] = uint8_t(x * 7 + y), p[1] = uint8_t(y * 13), p[2] = uint8_t((x ^ y) * 3);
    }
  return rgb;
}

TEST(Png, EncodedFilesDecodeToTheSamePixels) {
  for (int level : {0, 1, kPngDefaultLevel, 9}) {
    for (auto [w, h] : {std::pair{1, 1}, std::pair{3, 2}, std::pair{257, 31}, std::pair{640, 120}}) {
      const auto rgb = gradient_image(w, h);
      const auto png = encode_png_rgb8(rgb.data(), w, h, level);
      test::DecodedPng d;
      ASSERT_NO_THROW(d = test::decode_png(png)) << w << "x" << h;
      EXPECT_EQ(d.width, w);
      EXPECT_EQ(d.height, h);
      EXPECT_EQ(d.chunks, (std::vector<std::string>{"IHDR", "IDAT", "IEND"}));
      EXPECT_EQ(d.rgb, rgb) << w << "x" << h << " level " << level;
    }
  }
}

TEST(Png, ExactBytesOfATinyStoredImage) {
  const uint8_t px[3] = {0xFF, 0x00, 0x80};
  const auto png = encode_png_rgb8(px, 1, 1, /*level=*/0);
  // signature 8 + IHDR 25 + IDAT (12 + 2 + 5 + 4 scanline bytes + 4 adler) + IEND 12
  ASSERT_EQ(png.size(), 8u + 25u + 27u + 12u);
  const std::vector<uint8_t> ihdr_body(png.begin() + 16, png.begin() + 29);
  EXPECT_EQ(ihdr_body, (std::vector<uint8_t>{0, 0, 0, 1, 0, 0, 0, 1, 8, 2, 0, 0, 0}));
  const std::vector<uint8_t> zlib(png.begin() + 41, png.begin() + 56);
  EXPECT_EQ(zlib, (std::vector<uint8_t>{0x78, 0x01, 0x01, 0x04, 0x00, 0xFB, 0xFF, 0x00, 0xFF, 0x00, 0x80,
                                        0x03, 0x81, 0x01, 0x80}));
  const std::vector<uint8_t> iend(png.end() - 12, png.end());
  EXPECT_EQ(iend, (std::vector<uint8_t>{0, 0, 0, 0, 'I', 'E', 'N', 'D', 0xAE, 0x42, 0x60, 0x82}));
}

TEST(Png, TheTestDecoderRejectsCorruption) {
  // Guards the guard: if the decoder accepted damaged files, the tests above would prove nothing.
  const auto rgb = gradient_image(40, 20);
  const auto good = encode_png_rgb8(rgb.data(), 40, 20);
  ASSERT_NO_THROW(test::decode_png(good));
  auto bad = good;
  bad[50] ^= 0x10;  // inside IDAT: its CRC no longer matches
  EXPECT_THROW(test::decode_png(bad), std::runtime_error);
  auto sig = good;
  sig[1] = 'Q';
  EXPECT_THROW(test::decode_png(sig), std::runtime_error);
  // Damage the zlib stream's Adler-32 trailer and fix the chunk CRC: only the zlib check can catch it.
  auto adler = good;
  const size_t idat_crc = adler.size() - 12 - 4;  // IEND is the last 12 bytes
  adler[idat_crc - 1] ^= 1;
  const uint32_t crc = test::slow_crc32(&adler[37], idat_crc - 37);  // IDAT's type and data
  for (int k = 0; k < 4; ++k) adler[idat_crc + k] = uint8_t(crc >> (24 - 8 * k));
  EXPECT_THROW(test::decode_png(adler), std::runtime_error);
  // A zlib stream cut short.
  const std::vector<uint8_t> idat(good.begin() + 41, good.begin() + long(idat_crc));
  EXPECT_THROW(test::zlib_inflate(std::vector<uint8_t>(idat.begin(), idat.end() - 8)), std::runtime_error);
  EXPECT_NO_THROW(test::zlib_inflate(idat));
}

TEST(Png, PlotLikeImagesCompressWell) {
  // White page, grey grid, one coloured line: what `ulysses plot` writes.
  const int w = 900, h = 500;
  std::vector<uint8_t> rgb(size_t(w) * h * 3, 255);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      uint8_t* p = &rgb[(size_t(y) * w + x) * 3];
      if (x % 100 == 0 || y % 50 == 0) p[0] = p[1] = p[2] = 220;
      if (std::abs(y - (400 - x * 300 / w)) <= 1) p[0] = 31, p[1] = 119, p[2] = 180;
    }
  const auto png = encode_png_rgb8(rgb.data(), w, h);
  EXPECT_LT(png.size(), rgb.size() / 20);
  EXPECT_EQ(test::decode_png(png).rgb, rgb);
}

TEST(Png, ErrorsNameTheProblem) {
  const uint8_t px[3] = {0, 0, 0};
  EXPECT_THROW(encode_png_rgb8(px, 0, 1), Error);
  EXPECT_THROW(encode_png_rgb8(px, 1, -3), Error);
  EXPECT_THROW(encode_png_rgb8(px, 1, 1, 10), Error);  // zlib's levels are 0..9
  const std::string path = "/nonexistent-dir-for-png-test/x.png";
  try {
    write_png_rgb8(path, px, 1, 1);
    ADD_FAILURE() << "no error writing into a missing directory";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find(path), std::string::npos) << e.message();
  }
  const std::string ok = test::temp_dir("png_test") + "/one.png";
  write_png_rgb8(ok, px, 1, 1);
  EXPECT_EQ(test::decode_png_file(ok).rgb, std::vector<uint8_t>(px, px + 3));
}

}  // namespace
}  // namespace ulysses
