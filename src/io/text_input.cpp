#include "io/text_input.h"

#include <zlib.h>
#include <zstd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "io/regular_file.h"

namespace ulysses {

namespace {
constexpr size_t kBlock = 1 << 16;
constexpr size_t kSniffBytes = 1 << 16;
}  // namespace

size_t utf8_valid_bytes(const char* s, size_t n) {
  size_t valid = 0, i = 0;
  const auto* u = reinterpret_cast<const unsigned char*>(s);
  while (i < n) {
    const unsigned char c = u[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 && c >= 0xC2 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E && c <= 0xF4 ? 4 : 0;
    if (len == 0) {
      ++i;
      continue;
    }
    size_t k = 1;
    while (k < len && i + k < n && (u[i + k] & 0xC0) == 0x80) ++k;
    if (k == len || i + k == n) valid += k;  // complete, or cut by the end of the sample
    i += k;
  }
  return valid;
}

struct TextInput::Codec {
  enum Kind { Plain, Gzip, Zstd } kind = Plain;
  std::FILE* file = nullptr;
  gzFile gz = nullptr;
  ZSTD_DStream* zs = nullptr;
  std::vector<char> in;
  ZSTD_inBuffer zin{nullptr, 0, 0};
  bool eof = false;
  bool frame_done = false;
  uint64_t consumed = 0;
  ~Codec() {
    if (file) std::fclose(file);
    if (gz) gzclose(gz);
    if (zs) ZSTD_freeDStream(zs);
  }
};

TextInput::TextInput(const std::string& path) : path_(path), codec_(std::make_unique<Codec>()) {
  require_regular_file(path, "input file");
  Codec& c = *codec_;
  c.file = std::fopen(path.c_str(), "rb");
  ULY_CHECK(c.file, path << ": cannot open the input file (" << std::strerror(errno) << ")");
  unsigned char magic[4] = {};
  const size_t got = std::fread(magic, 1, 4, c.file);
  std::rewind(c.file);
  if (got >= 2 && magic[0] == 0x1f && magic[1] == 0x8b) {
    std::fclose(c.file);
    c.file = nullptr;
    c.kind = Codec::Gzip;
    c.gz = gzopen(path.c_str(), "rb");
    ULY_CHECK(c.gz, path << ": cannot open as gzip");
    gzbuffer(c.gz, kBlock);
  } else if (got == 4 && magic[0] == 0x28 && magic[1] == 0xb5 && magic[2] == 0x2f && magic[3] == 0xfd) {
    c.kind = Codec::Zstd;
    c.zs = ZSTD_createDStream();
    ULY_CHECK(c.zs && !ZSTD_isError(ZSTD_initDStream(c.zs)), path << ": cannot start zstd decompression");
    c.in.resize(ZSTD_DStreamInSize());
  } else if (got == 4 && std::memcmp(magic, "PAR1", 4) == 0) {
    ULY_FAIL(path << ": a Parquet file, not text (ulysses prepare reads Parquet files as records, one a row)");
  }
  // Sniff the start of the (decompressed) text.
  while (buf_.size() < kSniffBytes && fill()) {
  }
  const size_t n = std::min(buf_.size(), kSniffBytes);
  const void* nul = std::memchr(buf_.data(), 0, n);
  ULY_CHECK(nul == nullptr, path << ": looks binary (a NUL byte at offset "
                                 << (static_cast<const char*>(nul) - buf_.data())
                                 << (c.kind == Codec::Plain ? "" : " of the decompressed data")
                                 << "); prepare reads UTF-8 text and JSON Lines (plain, .gz or .zst). "
                                 << "Remove it from the inputs");
  size_t controls = 0;  // C0 controls other than white space: rare in text, common in binary data
  for (size_t i = 0; i < n; ++i) {
    const auto b = static_cast<unsigned char>(buf_[i]);
    controls += (b < 0x20 && b != '\t' && b != '\n' && b != '\r' && b != '\f' && b != '\v' && b != 0x1b) || b == 0x7f;
  }
  const size_t text = utf8_valid_bytes(buf_.data(), n) - std::min(controls, utf8_valid_bytes(buf_.data(), n));
  ULY_CHECK(n == 0 || text * 2 >= n, path << ": looks binary (" << (n - text) << " of the first " << n
                                          << " bytes are not UTF-8 text); prepare reads UTF-8 text and JSON Lines "
                                          << "(plain, .gz or .zst). Remove it from the inputs or convert it to UTF-8");
}

TextInput::~TextInput() = default;

const char* TextInput::compression() const {
  return codec_->kind == Codec::Gzip ? "gzip" : codec_->kind == Codec::Zstd ? "zstd" : "none";
}

uint64_t TextInput::file_bytes_read() const {
  if (codec_->kind == Codec::Gzip) return static_cast<uint64_t>(gzoffset(codec_->gz));
  return codec_->consumed;
}

bool TextInput::fill() {
  Codec& c = *codec_;
  if (c.eof) return false;
  if (pos_ > 0 && pos_ >= buf_.size() / 2) {  // drop what was consumed
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  const size_t old = buf_.size();
  if (c.kind == Codec::Plain) {
    buf_.resize(old + kBlock);
    const size_t got = std::fread(buf_.data() + old, 1, kBlock, c.file);
    buf_.resize(old + got);
    c.consumed += got;
    ULY_CHECK(got > 0 || !std::ferror(c.file), path_ << ": read error (" << std::strerror(errno) << ")");
    if (got == 0) c.eof = true;
    return got > 0;
  }
  if (c.kind == Codec::Gzip) {
    buf_.resize(old + kBlock);
    const int got = gzread(c.gz, buf_.data() + old, kBlock);
    int err = Z_OK;
    const char* msg = got < 0 ? gzerror(c.gz, &err) : "";
    ULY_CHECK(got >= 0, path_ << ": gzip data is corrupt (" << msg << ")");
    buf_.resize(old + static_cast<size_t>(got));
    if (got == 0) {
      c.eof = true;
      gzerror(c.gz, &err);
      ULY_CHECK(err == Z_OK || err == Z_STREAM_END, path_ << ": the gzip data ends early (truncated file?)");
    }
    return got > 0;
  }
  // zstd: decompress until some output or the end of the file (then flush what the decoder holds).
  for (;;) {
    bool input_done = false;
    if (c.zin.pos == c.zin.size) {
      const size_t got = std::fread(c.in.data(), 1, c.in.size(), c.file);
      ULY_CHECK(got > 0 || !std::ferror(c.file), path_ << ": read error (" << std::strerror(errno) << ")");
      c.consumed += got;
      c.zin = {c.in.data(), got, 0};
      input_done = got == 0;
    }
    buf_.resize(old + kBlock);
    ZSTD_outBuffer out{buf_.data() + old, kBlock, 0};
    const size_t rc = ZSTD_decompressStream(c.zs, &out, &c.zin);
    ULY_CHECK(!ZSTD_isError(rc), path_ << ": zstd data is corrupt (" << ZSTD_getErrorName(rc) << ")");
    buf_.resize(old + out.pos);
    if (input_done) {
      if (out.pos > 0) return true;
      c.eof = true;
      ULY_CHECK(c.frame_done, path_ << ": the zstd data ends early (truncated file?)");
      return false;
    }
    c.frame_done = rc == 0;  // a frame ended exactly here
    if (out.pos > 0) return true;
  }
}

size_t TextInput::read(std::string& out, size_t n) {
  while (buf_.size() - pos_ < n && fill()) {
  }
  const size_t take = std::min(n, buf_.size() - pos_);
  out.append(buf_, pos_, take);
  pos_ += take;
  return take;
}

bool TextInput::getline(std::string& line) {
  line.clear();
  for (;;) {
    const size_t nl = buf_.find('\n', pos_);
    if (nl != std::string::npos) {
      line.append(buf_, pos_, nl - pos_);
      pos_ = nl + 1;
      return true;
    }
    line.append(buf_, pos_, std::string::npos);
    pos_ = buf_.size();
    if (!fill()) return !line.empty();
  }
}

}  // namespace ulysses
