// TensorBoard event files: CRC-32C against published check values, the TFRecord
// framing, and the hand-encoded Event messages, byte for byte.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "io/tensorboard.h"
#include "test_util.h"

using namespace ulysses;
namespace fs = std::filesystem;

namespace {

uint64_t u64_at(const std::string& s, size_t at) {
  uint64_t v;
  std::memcpy(&v, s.data() + at, 8);
  return v;
}
uint32_t u32_at(const std::string& s, size_t at) {
  uint32_t v;
  std::memcpy(&v, s.data() + at, 4);
  return v;
}

// Splits a file of TFRecords, checking both CRCs of each.
std::vector<std::string> read_records(const std::string& bytes) {
  std::vector<std::string> out;
  size_t p = 0;
  while (p < bytes.size()) {
    EXPECT_LE(p + 12, bytes.size());
    const uint64_t n = u64_at(bytes, p);
    EXPECT_EQ(u32_at(bytes, p + 8), masked_crc32c(bytes.data() + p, 8));
    const std::string data = bytes.substr(p + 12, n);
    EXPECT_EQ(u32_at(bytes, p + 12 + n), masked_crc32c(data.data(), data.size()));
    out.push_back(data);
    p += 16 + n;
  }
  EXPECT_EQ(p, bytes.size());
  return out;
}

}  // namespace

TEST(TensorBoard, Crc32cCheckValues) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);  // the CRC catalogue's check value for CRC-32C
  const std::string zeros(32, '\0'), ones(32, '\xFF');
  EXPECT_EQ(crc32c(zeros.data(), 32), 0x8A9136AAu);  // RFC 3720, B.4
  EXPECT_EQ(crc32c(ones.data(), 32), 0x62A8AB43u);
  std::string inc(32, '\0');
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<char>(i);
  EXPECT_EQ(crc32c(inc.data(), 32), 0x46DD794Eu);
  EXPECT_EQ(crc32c(inc.data() + 5, 27, crc32c(inc.data(), 5)), 0x46DD794Eu);  // continued
  const uint32_t c = crc32c("abc", 3);
  EXPECT_EQ(masked_crc32c("abc", 3), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

TEST(TensorBoard, RecordFraming) {
  const std::string data = "hello";
  const std::string f = tfrecord_frame(data);
  ASSERT_EQ(f.size(), 8 + 4 + data.size() + 4);
  EXPECT_EQ(u64_at(f, 0), data.size());
  EXPECT_EQ(f.substr(12, 5), data);
  EXPECT_EQ(read_records(f + tfrecord_frame("")), (std::vector<std::string>{"hello", ""}));
}

TEST(TensorBoard, EventMessages) {
  // Event{wall_time: 1.5, file_version: "brain.Event:2"}: tag 0x09 + 8-byte double, tag 0x1A + length.
  std::string want = "\x09";
  const double t = 1.5;
  want.append(reinterpret_cast<const char*>(&t), 8);
  want += "\x1A\x0D" "brain.Event:2";
  EXPECT_EQ(event_file_version(1.5), want);
  // Event{wall_time, step: 300, summary {value {tag: "a", simple_value: 2.0}}}.
  const std::string e = event_scalars(1.5, 300, {{"a", 2.0}});
  std::string v = "\x0A\x01" "a" "\x15";
  const float two = 2.0f;
  v.append(reinterpret_cast<const char*>(&two), 4);
  std::string expect = want.substr(0, 9) + "\x10\xAC\x02" + "\x2A" + static_cast<char>(v.size() + 2) + "\x0A" +
                       static_cast<char>(v.size()) + v;
  EXPECT_EQ(e, expect);
  // SessionLog{status: START} as field 7 (tag 0x3A).
  EXPECT_EQ(event_session_start(1.5, 7), want.substr(0, 9) + "\x10\x07" "\x3A\x02\x08\x01");
}

TEST(TensorBoard, WriterFiles) {
  const std::string dir = test::temp_dir("tb_writer");
  std::string first_path;
  {
    EventFileWriter w(dir);
    first_path = w.path();
    w.scalars(1, {{"train/loss", 2.5}, {"train/nan", std::nan("")}});
    w.scalars(2, {{"train/nan", std::nan("")}});  // nothing finite: no record
    w.sync();
  }
  EXPECT_NE(fs::path(first_path).filename().string().find("tfevents"), std::string::npos);
  std::ifstream f(first_path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const auto records = read_records(bytes);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_NE(records[0].find("brain.Event:2"), std::string::npos);
  EXPECT_NE(records[1].find("train/loss"), std::string::npos);
  EXPECT_EQ(records[1].find("train/nan"), std::string::npos);  // non-finite values are left out
  // A second writer's file sorts after the first, even within the same second.
  EventFileWriter w2(dir);
  EXPECT_LT(fs::path(first_path).filename().string(), fs::path(w2.path()).filename().string());
  remove_event_files(dir);
  EXPECT_TRUE(fs::is_empty(dir));
}
