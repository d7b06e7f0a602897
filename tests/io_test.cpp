// safetensors reader and writer: round trips, the byte layout, a file written by
// the reference implementation, and every malformed-file error.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "io/safetensors.h"
#include "expect_error.h"
#include "test_util.h"

namespace ulysses {
namespace {

namespace fs = std::filesystem;

// EXPECT that `stmt` throws ulysses::Error whose message contains every one of `parts`.

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good());
}

// A file assembled by hand: 8-byte length (the header's size unless overridden), header, data.
std::string make_file(const std::string& header, size_t data_bytes, int64_t header_len = -1) {
  const uint64_t len = header_len < 0 ? header.size() : static_cast<uint64_t>(header_len);
  std::string s(8, '\0');
  std::memcpy(s.data(), &len, 8);
  return s + header + std::string(data_bytes, '\x01');
}

Tensor f32_tensor(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::F32);
  auto v = test::random_vector_f(static_cast<size_t>(t.numel()), seed);
  std::memcpy(t.raw(), v.data(), t.nbytes());
  return t;
}

Tensor converted(const Tensor& f32, DType dt) {
  Tensor t = Tensor::empty(f32.shape(), dt);
  convert_from_f32(t.raw(), dt, f32.data<float>(), static_cast<size_t>(f32.numel()));
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

TEST(Safetensors, RoundTripAllDtypesAndMetadata) {
  const std::string path = test::temp_dir("st") + "/m.safetensors";
  Tensor a = f32_tensor({3, 5}, 1);
  Tensor b = converted(f32_tensor({7}, 2), DType::BF16);
  Tensor c = converted(f32_tensor({2, 2, 3}, 3), DType::F16);
  Tensor d = Tensor::empty({4}, DType::I64);
  const int64_t ids[4] = {0, -5, 2147483647, -2147483648LL};
  std::memcpy(d.raw(), ids, sizeof(ids));
  Tensor e = Tensor::empty({2}, DType::F64);
  e.data<double>()[0] = 1.0 / 3.0;
  e.data<double>()[1] = -1e300;
  Tensor empty = Tensor::empty({0, 4}, DType::F32);
  Tensor big = Tensor::empty({1}, DType::I64);
  big.data<int64_t>()[0] = 123456789012LL;
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "ulysses test"}};
  // Deliberately not alphabetical: the file must keep the given order.
  write_safetensors(
      path, {{"z.weight", a}, {"b16", b}, {"f16", c}, {"ids", d}, {"f64", e}, {"empty", empty}, {"big", big}}, meta);
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.metadata(), meta);
  ASSERT_EQ(f.entries().size(), 7u);
  const std::vector<std::string> order = {"z.weight", "b16", "f16", "ids", "f64", "empty", "big"};
  for (size_t i = 0; i < order.size(); ++i) EXPECT_EQ(f.entries()[i].name, order[i]);
  EXPECT_TRUE(same_bytes(f.view("z.weight"), a));
  EXPECT_TRUE(same_bytes(f.view("b16"), b));
  EXPECT_TRUE(same_bytes(f.view("f16"), c));
  EXPECT_TRUE(same_bytes(f.view("ids"), d));
  EXPECT_TRUE(same_bytes(f.view("f64"), e));
  EXPECT_EQ(f.view("empty").shape(), (Shape{0, 4}));
  EXPECT_EQ(f.info("f16").dtype, DType::F16);
  EXPECT_EQ(f.info("f16").shape, (Shape{2, 2, 3}));
  EXPECT_EQ(f.info("f16").end - f.info("f16").begin, 24u);
  EXPECT_FALSE(f.contains("missing"));

  // read_f32 / read_f64 convert every float dtype exactly as dtype.h does.
  Tensor b32 = f.read_f32("b16");
  for (int i = 0; i < 7; ++i) EXPECT_EQ(b32.data<float>()[i], bf16_to_float(b.data<uint16_t>()[i]));
  Tensor c64 = f.read_f64("f16");
  for (int i = 0; i < 12; ++i) EXPECT_EQ(c64.data<double>()[i], fp16_to_float(c.data<uint16_t>()[i]));
  EXPECT_EQ(f.read_f64("f64").data<double>()[0], 1.0 / 3.0);
  EXPECT_EQ(f.read_f32("z.weight").data<float>()[14], a.data<float>()[14]);
  Tensor i32 = f.read_i32("ids");
  ASSERT_EQ(i32.dtype(), DType::I32);
  EXPECT_EQ(std::vector<int32_t>(i32.data<int32_t>(), i32.data<int32_t>() + 4),
            (std::vector<int32_t>{0, -5, 2147483647, -2147483647 - 1}));
  EXPECT_ERROR(f.read_i32("big"), "m.safetensors", "'big' element 0 (123456789012) does not fit in int32");
}

TEST(Safetensors, ByteLayoutIsAlignedLittleEndianInGivenOrder) {
  const std::string path = test::temp_dir("st") + "/layout.safetensors";
  Tensor odd = Tensor::empty({3}, DType::U8);  // 3 bytes, so the next tensor starts misaligned
  std::memset(odd.raw(), 7, 3);
  Tensor t = Tensor::empty({2}, DType::F32);
  t.data<float>()[0] = 1.0f;
  t.data<float>()[1] = -2.0f;
  write_safetensors(path, {{"zz", odd}, {"aa", t}});
  const std::string bytes = read_bytes(path);
  uint64_t len = 0;
  std::memcpy(&len, bytes.data(), 8);
  EXPECT_EQ(len % 8, 0u) << "header must be padded to a multiple of 8";
  ASSERT_EQ(bytes.size(), 8 + len + 3 + 8);
  const std::string header = bytes.substr(8, len);
  EXPECT_LT(header.find("\"zz\""), header.find("\"aa\""));
  const size_t last = header.find_last_not_of(' ');
  EXPECT_EQ(header[last], '}');
  EXPECT_LT(header.size() - (last + 1), 8u) << "padding beyond alignment: '" << header << "'";
  const unsigned char one_le[4] = {0x00, 0x00, 0x80, 0x3f};  // 1.0f little-endian
  EXPECT_EQ(std::memcmp(bytes.data() + 8 + len + 3, one_le, 4), 0);
  // A misaligned tensor still reads correctly (view() copies it).
  SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_TRUE(same_bytes(f.view("aa"), t));
  EXPECT_EQ(f.read_f32("aa").data<float>()[1], -2.0f);
}

// Written by the Python safetensors package: save_file({"w": f32 [2,2], "b": bf16 [3],
// "ids": i64 [2]}, metadata={"format": "pt"}). It sorts and pads its own way.
TEST(Safetensors, ReadsFileWrittenByReferenceImplementation) {
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},)"
      R"("w":{"dtype":"F32","shape":[2,2],"data_offsets":[16,32]},)"
      R"("b":{"dtype":"BF16","shape":[3],"data_offsets":[32,38]}}       )";
  ASSERT_EQ(header.size(), 208u);
  const unsigned char data[38] = {0x07, 0, 0, 0, 0, 0, 0, 0, 0xfd, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                  0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0, 0, 0, 0, 0x3f, 0, 0, 0x50, 0x40,
                                  0x80, 0x3f, 0x00, 0xbf, 0x00, 0x40};
  const std::string path = test::temp_dir("st") + "/ref.safetensors";
  write_bytes(path, make_file(header, 0) + std::string(reinterpret_cast<const char*>(data), 38));
  SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  Tensor w = f.read_f32("w");
  EXPECT_EQ(std::vector<float>(w.data<float>(), w.data<float>() + 4), (std::vector<float>{1.0f, -2.0f, 0.5f, 3.25f}));
  Tensor b = f.read_f32("b");
  EXPECT_EQ(std::vector<float>(b.data<float>(), b.data<float>() + 3), (std::vector<float>{1.0f, -0.5f, 2.0f}));
  Tensor ids = f.read_i32("ids");
  EXPECT_EQ(ids.data<int32_t>()[0], 7);
  EXPECT_EQ(ids.data<int32_t>()[1], -3);
}

TEST(Safetensors, ViewOutlivesFileObjectAndUnlink) {
  const std::string path = test::temp_dir("st") + "/v.safetensors";
  Tensor a = f32_tensor({64}, 9);
  write_safetensors(path, {{"a", a}});
  Tensor v;
  {
    SafetensorsFile f = SafetensorsFile::open(path);
    v = f.view("a");
  }
  fs::remove(path);  // the mapping, not the name, keeps the bytes
  EXPECT_TRUE(same_bytes(v, a));
  Tensor copy = v;
  v = Tensor();
  EXPECT_EQ(copy.data<float>()[63], a.data<float>()[63]);
}

TEST(Safetensors, ReadErrorsNameFileAndTensor) {
  const std::string path = test::temp_dir("st") + "/r.safetensors";
  Tensor ids = Tensor::zeros({2}, DType::I64);
  write_safetensors(path, {{"ids", ids}, {"w", f32_tensor({2}, 1)}});
  SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_ERROR(f.read_f32("ids"), "r.safetensors", "'ids'", "not a float type");
  EXPECT_ERROR(f.read_f64("ids"), "r.safetensors", "'ids'", "not a float type");
  EXPECT_ERROR(f.read_i32("w"), "r.safetensors", "'w'", "expected an integer tensor");
  EXPECT_ERROR(f.info("nope"), "r.safetensors", "no tensor 'nope'");
  EXPECT_ERROR(f.view("nope"), "no tensor 'nope'");
}

// ---- malformed files ---------------------------------------------------------

class Malformed : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::temp_dir("st_bad"); }
  std::string put(const std::string& name, const std::string& bytes) {
    const std::string p = dir_ + "/" + name;
    write_bytes(p, bytes);
    return p;
  }
  std::string dir_;
};

TEST_F(Malformed, MissingFile) {
  EXPECT_ERROR(SafetensorsFile::open(dir_ + "/absent.safetensors"), "absent.safetensors", "cannot open");
}

TEST_F(Malformed, ShorterThanEightBytes) {
  EXPECT_ERROR(SafetensorsFile::open(put("short.safetensors", "abc")), "short.safetensors", "3 bytes",
               "shorter than the 8-byte header length");
  EXPECT_ERROR(SafetensorsFile::open(put("zero.safetensors", "")), "zero.safetensors", "0 bytes");
}

// Found by the fuzzer (tests/fuzz/safetensors_fuzz): a number too large for a double is an
// out_of_range error of the JSON parser, not a parse_error; it must still be one clear line.
TEST_F(Malformed, NumberOverflowInHeader) {
  const std::string hdr = R"({"s": 1.0E99999999})";
  EXPECT_ERROR(SafetensorsFile::open(put("overflow.safetensors", make_file(hdr, 0))), "overflow.safetensors",
               "malformed JSON header");
}

TEST_F(Malformed, HeaderLengthLargerThanFile) {
  const std::string hdr = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  EXPECT_ERROR(SafetensorsFile::open(put("len.safetensors", make_file(hdr, 4, 1000))), "len.safetensors",
               "header length 1000", "larger than the rest of the file");
  EXPECT_ERROR(SafetensorsFile::open(put("huge.safetensors", make_file(hdr, 4, int64_t(1) << 62))),
               "huge.safetensors", "header length");
}

TEST_F(Malformed, BadJson) {
  EXPECT_ERROR(SafetensorsFile::open(put("json.safetensors", make_file(R"({"a": {"dtype": "F32",)", 0))),
               "json.safetensors", "malformed JSON header");
  EXPECT_ERROR(SafetensorsFile::open(put("arr.safetensors", make_file("[1, 2]", 0))), "arr.safetensors",
               "must be an object");
  EXPECT_ERROR(SafetensorsFile::open(put("entry.safetensors", make_file(R"({"a": 5})", 0))), "entry.safetensors",
               "tensor 'a'", "must be an object");
}

TEST_F(Malformed, MissingFields) {
  EXPECT_ERROR(SafetensorsFile::open(put("nodt.safetensors",
                                         make_file(R"({"x.w":{"shape":[1],"data_offsets":[0,4]}})", 4))),
               "nodt.safetensors", "tensor 'x.w'", "no 'dtype' field");
  EXPECT_ERROR(SafetensorsFile::open(put("nosh.safetensors",
                                         make_file(R"({"x.w":{"dtype":"F32","data_offsets":[0,4]}})", 4))),
               "nosh.safetensors", "tensor 'x.w'", "no 'shape' field");
  EXPECT_ERROR(SafetensorsFile::open(put("nooff.safetensors", make_file(R"({"x.w":{"dtype":"F32","shape":[1]}})", 4))),
               "nooff.safetensors", "tensor 'x.w'", "no 'data_offsets' field");
}

TEST_F(Malformed, BadFieldValues) {
  EXPECT_ERROR(SafetensorsFile::open(put("dt.safetensors",
                                         make_file(R"({"q":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4]}})", 4))),
               "dt.safetensors", "tensor 'q'", "unsupported dtype 'F8_E4M3'", "supported: F32");
  EXPECT_ERROR(SafetensorsFile::open(put("dtn.safetensors",
                                         make_file(R"({"q":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})", 4))),
               "dtn.safetensors", "tensor 'q'", "'dtype' must be a string");
  EXPECT_ERROR(SafetensorsFile::open(put("sh.safetensors",
                                         make_file(R"({"q":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4))),
               "sh.safetensors", "tensor 'q'", "'shape' must be an array of non-negative integers");
  EXPECT_ERROR(SafetensorsFile::open(put("off.safetensors",
                                         make_file(R"({"q":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4))),
               "off.safetensors", "tensor 'q'", "'data_offsets' must be [begin, end]");
  EXPECT_ERROR(SafetensorsFile::open(put("meta.safetensors", make_file(R"({"__metadata__":{"n":1}})", 0))),
               "meta.safetensors", "'__metadata__' entry 'n' must be a string");
}

TEST_F(Malformed, BeginAfterEnd) {
  EXPECT_ERROR(SafetensorsFile::open(put("be.safetensors",
                                         make_file(R"({"q":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8))),
               "be.safetensors", "tensor 'q'", "[8, 4]", "begin > end");
}

TEST_F(Malformed, OffsetsOverrunDataSection) {
  const std::string hdr = R"({"model.norm.weight":{"dtype":"F32","shape":[100],"data_offsets":[0,400]}})";
  EXPECT_ERROR(SafetensorsFile::open(put("model.safetensors", make_file(hdr, 256))), "model.safetensors",
               "tensor 'model.norm.weight' data_offsets [0, 400] overrun the data section (256 bytes)",
               "truncated or corrupt");
}

TEST_F(Malformed, TruncatedRealFile) {
  const std::string good = dir_ + "/good.safetensors";
  write_safetensors(good, {{"a", f32_tensor({16}, 1)}, {"b", f32_tensor({16}, 2)}});
  const std::string bytes = read_bytes(good);
  EXPECT_ERROR(SafetensorsFile::open(put("cut.safetensors", bytes.substr(0, bytes.size() - 10))), "cut.safetensors",
               "tensor 'b'", "overrun the data section");
  EXPECT_ERROR(SafetensorsFile::open(put("cut2.safetensors", bytes.substr(0, 20))), "cut2.safetensors",
               "header length");
}

TEST_F(Malformed, SizeDoesNotMatchDtypeTimesShape) {
  EXPECT_ERROR(SafetensorsFile::open(put("size.safetensors",
                                         make_file(R"({"k":{"dtype":"BF16","shape":[2,4],"data_offsets":[0,12]}})", 16))),
               "size.safetensors", "tensor 'k'", "hold 12 bytes", "needs 16 bytes");
  EXPECT_ERROR(
      SafetensorsFile::open(put("ovf.safetensors",
                                make_file(R"({"k":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
                                          8))),
      "ovf.safetensors", "tensor 'k'", "needs more than 2^64 bytes");
  // A zero dimension makes the tensor empty however large the others are.
  const std::string zero =
      R"({"k":{"dtype":"F64","shape":[4294967296,0,4294967296],"data_offsets":[0,0]}})";
  EXPECT_EQ(SafetensorsFile::open(put("zero.safetensors", make_file(zero, 0))).info("k").shape,
            (Shape{4294967296LL, 0, 4294967296LL}));
}

TEST_F(Malformed, OverlappingRanges) {
  const std::string hdr = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                          R"("b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})";
  EXPECT_ERROR(SafetensorsFile::open(put("ov.safetensors", make_file(hdr, 20))), "ov.safetensors", "'a' [0, 16)",
               "'b' [12, 20)", "overlap");
  // Two tensors on the same bytes; an empty tensor anywhere is fine.
  const std::string same = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"I32","shape":[2],"data_offsets":[0,8]},)"
                           R"("e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})";
  EXPECT_ERROR(SafetensorsFile::open(put("same.safetensors", make_file(same, 8))), "same.safetensors", "overlap");
  const std::string ok = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})";
  EXPECT_NO_THROW(SafetensorsFile::open(put("ok.safetensors", make_file(ok, 8))));
}

// ---- writer errors -----------------------------------------------------------

TEST(SafetensorsWrite, RejectsBadInput) {
  const std::string dir = test::temp_dir("st_w");
  Tensor a = f32_tensor({2}, 1);
  EXPECT_ERROR(write_safetensors(dir + "/d.safetensors", {{"a", a}, {"a", a}}), "d.safetensors", "'a' given twice");
  EXPECT_ERROR(write_safetensors(dir + "/u.safetensors", {{"a", Tensor()}}), "u.safetensors", "undefined");
  EXPECT_ERROR(write_safetensors(dir + "/m.safetensors", {{"__metadata__", a}}), "m.safetensors", "reserved");
  EXPECT_ERROR(write_safetensors(dir + "/no/such/dir/x.safetensors", {{"a", a}}), "x.safetensors", "cannot create");
  EXPECT_TRUE(fs::is_empty(dir)) << "failed writes must leave nothing behind";
}

TEST(SafetensorsWrite, WriteFailureRemovesTmpAndKeepsOldFile) {
  const std::string dir = test::temp_dir("st_full");
  const std::string path = dir + "/w.safetensors";
  Tensor small = f32_tensor({4}, 1);
  write_safetensors(path, {{"a", small}});
  const std::string before = read_bytes(path);
  {
    test::FileSizeLimit limit(4096);
    EXPECT_ERROR(write_safetensors(path, {{"a", f32_tensor({1 << 16}, 2)}}), "w.safetensors", "failed after",
                 "nothing was written");
  }
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_TRUE(same_bytes(SafetensorsFile::open(path).view("a"), small));
}

}  // namespace
}  // namespace ulysses
