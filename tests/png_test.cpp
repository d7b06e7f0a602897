// PNG writer: checksums against published values, zlib streams that the
// independent test inflater (png_decode.h) decodes back to the input for both
// block kinds, whole PNG files decoded pixel for pixel, and corruption detected.
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

std::vector<uint8_t> bytes_of(const char* s) { return std::vector<uint8_t>(s, s + std::strlen(s)); }

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = uint8_t(rng());
  return v;
}

TEST(Png, Crc32MatchesPublishedCheckValues) {
  const auto a = bytes_of("123456789");
  EXPECT_EQ(crc32(a.data(), a.size()), 0xCBF43926u);  // the CRC-32 "check" value
  const auto iend = bytes_of("IEND");
  EXPECT_EQ(crc32(iend.data(), iend.size()), 0xAE426082u);  // every PNG ends with these bytes
  EXPECT_EQ(crc32(nullptr, 0), 0u);
  // Running continuation equals one pass, and agrees with the bit-by-bit test version.
  const auto r = random_bytes(10007, 1);
  EXPECT_EQ(crc32(r.data() + 5000, r.size() - 5000, crc32(r.data(), 5000)), crc32(r.data(), r.size()));
  EXPECT_EQ(crc32(r.data(), r.size()), test::slow_crc32(r.data(), r.size()));
}

TEST(Png, Adler32MatchesPublishedValuesAndLongInputs) {
  const auto w = bytes_of("Wikipedia");
  EXPECT_EQ(adler32(w.data(), w.size()), 0x11E60398u);
  EXPECT_EQ(adler32(nullptr, 0), 1u);
  // Long runs of 0xFF exercise the deferred modulo (overflow would show here).
  std::vector<uint8_t> ff(1 << 20, 0xFF);
  EXPECT_EQ(adler32(ff.data(), ff.size()), test::slow_adler32(ff));
  const auto r = random_bytes(100003, 2);
  EXPECT_EQ(adler32(r.data() + 777, r.size() - 777, adler32(r.data(), 777)), test::slow_adler32(r));
}

TEST(Png, StoredZlibRoundTripsWithOneBlockPer65535Bytes) {
  for (size_t n : {size_t(0), size_t(1), size_t(65535), size_t(65536), size_t(200000)}) {
    const auto data = random_bytes(n, n + 7);
    const auto z = zlib_compress(data.data(), data.size(), Deflate::Stored);
    std::vector<int> blocks;
    EXPECT_EQ(test::zlib_inflate(z, &blocks), data) << "n=" << n;
    const size_t want_blocks = n == 0 ? 1 : (n + 65534) / 65535;
    EXPECT_EQ(blocks, std::vector<int>(want_blocks, 0)) << "n=" << n;
    EXPECT_EQ(z.size(), 2 + n + 5 * want_blocks + 4) << "n=" << n;
  }
}

TEST(Png, FixedHuffmanZlibRoundTripsAndCompresses) {
  std::vector<std::vector<uint8_t>> inputs;
  inputs.push_back({});
  inputs.push_back({42});
  inputs.push_back(random_bytes(70000, 3));           // incompressible: literals only, all 9-bit codes
  inputs.push_back(std::vector<uint8_t>(300000, 255));  // one long run: max-length matches at distance 1..3
  {
    // A repeat 40000 bytes back is out of the window; one 20000 back is inside it.
    auto v = random_bytes(20000, 4);
    auto w = random_bytes(20000, 5);
    std::vector<uint8_t> x = v;  // v w w v: w repeats 20000 back, v 60000 back
    x.insert(x.end(), w.begin(), w.end());
    x.insert(x.end(), w.begin(), w.end());
    x.insert(x.end(), v.begin(), v.end());
    inputs.push_back(x);
  }
  {
    // Short repeats of every length 3..300 at assorted distances.
    std::mt19937 rng(6);
    std::vector<uint8_t> x = random_bytes(1000, 7);
    while (x.size() < 200000) {
      const size_t len = 3 + rng() % 298, dist = 1 + rng() % std::min<size_t>(x.size(), 32768);
      for (size_t k = 0; k < len; ++k) x.push_back(x[x.size() - dist]);
      x.push_back(uint8_t(rng()));
    }
    inputs.push_back(x);
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& data = inputs[i];
    const auto z = zlib_compress(data.data(), data.size(), Deflate::FixedHuffman);
    std::vector<int> blocks;
    ASSERT_NO_THROW(EXPECT_EQ(test::zlib_inflate(z, &blocks), data) << "input " << i) << "input " << i;
    EXPECT_EQ(blocks, std::vector<int>{1}) << "input " << i;
  }
  const auto& run = inputs[3];
  EXPECT_LT(zlib_compress(run.data(), run.size()).size(), run.size() / 100);
  // Random bytes cost ~8.6 bits as fixed-code literals: only the in-window repeat of w is saved.
  const auto& rep = inputs[4];
  EXPECT_LT(zlib_compress(rep.data(), rep.size()).size(), rep.size() * 85 / 100);
}

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
  for (Deflate mode : {Deflate::Stored, Deflate::FixedHuffman}) {
    for (auto [w, h] : {std::pair{1, 1}, std::pair{3, 2}, std::pair{257, 31}, std::pair{640, 120}}) {
      const auto rgb = gradient_image(w, h);
      const auto png = encode_png_rgb8(rgb.data(), w, h, mode);
      test::DecodedPng d;
      ASSERT_NO_THROW(d = test::decode_png(png)) << w << "x" << h;
      EXPECT_EQ(d.width, w);
      EXPECT_EQ(d.height, h);
      EXPECT_EQ(d.chunks, (std::vector<std::string>{"IHDR", "IDAT", "IEND"}));
      EXPECT_EQ(d.rgb, rgb) << w << "x" << h;
      EXPECT_EQ(d.block_types.front(), mode == Deflate::Stored ? 0 : 1);
    }
  }
}

TEST(Png, ExactBytesOfATinyStoredImage) {
  const uint8_t px[3] = {0xFF, 0x00, 0x80};
  const auto png = encode_png_rgb8(px, 1, 1, Deflate::Stored);
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
  // Damage the Adler-32 trailer and fix the chunk CRC: only the zlib check can catch it.
  auto z = zlib_compress(rgb.data(), rgb.size());
  z.back() ^= 1;
  EXPECT_THROW(test::zlib_inflate(z, nullptr), std::runtime_error);
  auto z2 = zlib_compress(rgb.data(), rgb.size(), Deflate::Stored);
  z2[3] ^= 1;  // LEN no longer the complement of NLEN
  EXPECT_THROW(test::zlib_inflate(z2, nullptr), std::runtime_error);
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
