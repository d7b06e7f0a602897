#include "io/token_shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "io/regular_file.h"

namespace ulysses {

static_assert(std::endian::native == std::endian::little, "token shards are read in place: little-endian hosts only");

namespace {

constexpr uint32_t kDtypeU32 = 1;

uint64_t align8(uint64_t x) { return (x + 7) / 8 * 8; }

struct Header {
  char magic[8];
  uint32_t version, dtype;
  uint64_t num_tokens, num_documents, vocab_size, tokens_offset, index_offset;
  uint32_t name_length, reserved;
  char name[kTokenShardMaxNameBytes];
};
static_assert(sizeof(Header) == kTokenShardHeaderBytes);

void write_all(std::FILE* f, const void* data, size_t bytes, const std::string& path) {
  ULY_CHECK(bytes == 0 || std::fwrite(data, 1, bytes, f) == bytes,
            path << ": write failed (" << std::strerror(errno) << "); is the disk full?");
}

}  // namespace

// ---- writer -----------------------------------------------------------------------

TokenShardWriter::TokenShardWriter(const std::string& path, int64_t vocab_size, const std::string& tokenizer_name)
    : path_(path), tokenizer_(tokenizer_name), vocab_size_(vocab_size) {
  ULY_CHECK(vocab_size > 0 && vocab_size <= (int64_t{1} << 32),
            path << ": vocabulary size " << vocab_size << " does not fit uint32 tokens");
  ULY_CHECK(tokenizer_name.size() <= kTokenShardMaxNameBytes,
            path << ": tokenizer name '" << tokenizer_name << "' is longer than " << kTokenShardMaxNameBytes << " bytes");
  tmp_path_ = path + ".tmp-" + std::to_string(getpid());
  file_ = std::fopen(tmp_path_.c_str(), "wb");
  ULY_CHECK(file_ != nullptr, tmp_path_ << ": cannot create (" << std::strerror(errno) << ")");
  // Zeros stand for the header until finish(): a crash leaves a file without the magic.
  const Header blank{};
  write_all(file_, &blank, sizeof blank, tmp_path_);
  buffer_.reserve(1 << 16);
}

TokenShardWriter::~TokenShardWriter() {
  if (file_ != nullptr) {
    std::fclose(file_);
    std::remove(tmp_path_.c_str());
  }
}

void TokenShardWriter::add_document(const int32_t* ids, size_t n, const uint8_t* mask) {
  append(ids, n, mask);
  end_document();
}

void TokenShardWriter::end_document() { offsets_.push_back(written_); }

void TokenShardWriter::append(const int32_t* ids, size_t n, const uint8_t* mask) {
  ULY_CHECK(file_ != nullptr, path_ << ": add_document after finish()");
  if (mask != nullptr || !mask_.empty()) {
    mask_.resize(written_, 1);  // tokens before the first masked document are all targets
    for (size_t i = 0; i < n; ++i) mask_.push_back(mask == nullptr || mask[i] != 0 ? 1 : 0);
  }
  written_ += n;
  for (size_t i = 0; i < n; ++i) {
    ULY_CHECK(ids[i] >= 0 && ids[i] < vocab_size_,
              path_ << ": token " << ids[i] << " is outside the vocabulary [0, " << vocab_size_ << ")");
    buffer_.push_back(static_cast<uint32_t>(ids[i]));
    if (buffer_.size() == buffer_.capacity()) {
      write_all(file_, buffer_.data(), buffer_.size() * 4, tmp_path_);
      buffer_.clear();
    }
  }
}

void TokenShardWriter::finish() {
  ULY_CHECK(file_ != nullptr, path_ << ": finish() called twice");
  write_all(file_, buffer_.data(), buffer_.size() * 4, tmp_path_);
  buffer_.clear();
  const uint64_t n = offsets_.back();
  const uint64_t index_offset = align8(kTokenShardHeaderBytes + 4 * n);
  const char pad[8] = {};
  write_all(file_, pad, index_offset - (kTokenShardHeaderBytes + 4 * n), tmp_path_);
  ULY_CHECK(offsets_.back() == written_, path_ << ": finish() inside a document (end_document() not called)");
  write_all(file_, offsets_.data(), offsets_.size() * 8, tmp_path_);
  const bool masked = !mask_.empty();
  if (masked) write_all(file_, mask_.data(), mask_.size(), tmp_path_);  // index_offset + 8(D+1) is 8-aligned

  Header h{};
  std::memcpy(h.magic, kTokenShardMagic, 8);
  h.version = masked ? kTokenShardMaskedVersion : kTokenShardVersion;
  h.reserved = masked ? kTokenShardFlagLossMask : 0;
  h.dtype = kDtypeU32;
  h.num_tokens = n;
  h.num_documents = offsets_.size() - 1;
  h.vocab_size = static_cast<uint64_t>(vocab_size_);
  h.tokens_offset = kTokenShardHeaderBytes;
  h.index_offset = index_offset;
  h.name_length = static_cast<uint32_t>(tokenizer_.size());
  std::memcpy(h.name, tokenizer_.data(), tokenizer_.size());
  ULY_CHECK(std::fseek(file_, 0, SEEK_SET) == 0, tmp_path_ << ": seek failed");
  write_all(file_, &h, sizeof h, tmp_path_);
  const bool flushed = std::fflush(file_) == 0 && fsync(fileno(file_)) == 0;
  const int close_rc = std::fclose(file_);
  file_ = nullptr;
  if (!flushed || close_rc != 0) {
    std::remove(tmp_path_.c_str());
    ULY_FAIL(tmp_path_ << ": flushing to disk failed (" << std::strerror(errno) << ")");
  }
  if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp_path_.c_str());
    ULY_FAIL(path_ << ": cannot rename the finished temporary file into place (" << std::strerror(err) << ")");
  }
}

// ---- reader -----------------------------------------------------------------------

struct TokenShard::Mapping {
  void* addr = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (addr != nullptr && addr != MAP_FAILED) munmap(addr, size);
  }
};

TokenShard TokenShard::open(const std::string& path, bool check_tokens) {
  require_regular_file(path, "token shard");
  // O_NONBLOCK: a path swapped for a FIFO after the check must not block the open.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  ULY_CHECK(fd >= 0, path << ": cannot open token shard (" << std::strerror(errno) << ")");
  struct stat st {};
  int stat_rc = fstat(fd, &st);
  if (stat_rc == 0 && !S_ISREG(st.st_mode)) st.st_size = 0;  // refused below as too short
  auto map = std::make_shared<Mapping>();
  map->size = static_cast<size_t>(st.st_size);
  if (stat_rc == 0 && map->size > 0) map->addr = mmap(nullptr, map->size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  ULY_CHECK(stat_rc == 0, path << ": cannot stat the file");
  ULY_CHECK(map->size >= kTokenShardHeaderBytes, path << ": file is " << map->size << " bytes, shorter than the "
                                                      << kTokenShardHeaderBytes << "-byte token shard header: truncated or not a token shard");
  ULY_CHECK(map->addr != MAP_FAILED, path << ": mmap failed (" << std::strerror(errno) << ")");

  Header h;
  std::memcpy(&h, map->addr, sizeof h);
  ULY_CHECK(std::memcmp(h.magic, kTokenShardMagic, 8) == 0,
            path << ": not a token shard (magic '" << std::string(h.magic, strnlen(h.magic, 8))
                 << "', expected 'ULYTOKS1'); an unfinished write leaves zeros here");
  ULY_CHECK(h.version == kTokenShardVersion || h.version == kTokenShardMaskedVersion,
            path << ": token shard version " << h.version << " is not supported (this build reads versions "
                 << kTokenShardVersion << " and " << kTokenShardMaskedVersion << "); re-run 'ulysses prepare'");
  const bool masked = h.version == kTokenShardMaskedVersion && (h.reserved & kTokenShardFlagLossMask) != 0;
  ULY_CHECK(h.version == kTokenShardMaskedVersion ? h.reserved == kTokenShardFlagLossMask : h.reserved == 0,
            path << ": header flags " << h.reserved << " are not valid for version " << h.version << ": corrupt header");
  ULY_CHECK(h.dtype == kDtypeU32, path << ": token dtype code " << h.dtype << " is not supported (1 = uint32)");
  ULY_CHECK(h.name_length <= kTokenShardMaxNameBytes, path << ": tokenizer name length " << h.name_length << " > "
                                                           << kTokenShardMaxNameBytes << ": corrupt header");
  ULY_CHECK(h.num_tokens < (uint64_t{1} << 60) && h.num_documents < (uint64_t{1} << 60),
            path << ": header counts are absurd (" << h.num_tokens << " tokens, " << h.num_documents
                 << " documents): corrupt header");
  ULY_CHECK(h.tokens_offset == kTokenShardHeaderBytes &&
                h.index_offset == align8(kTokenShardHeaderBytes + 4 * h.num_tokens),
            path << ": header offsets (" << h.tokens_offset << ", " << h.index_offset << ") do not match "
                 << h.num_tokens << " tokens: corrupt header");
  const uint64_t expected = h.index_offset + 8 * (h.num_documents + 1) + (masked ? h.num_tokens : 0);
  ULY_CHECK(map->size == expected, path << ": file is " << map->size << " bytes but the header (" << h.num_tokens
                                        << " tokens, " << h.num_documents << " documents) needs " << expected
                                        << (map->size < expected ? ": the file is truncated" : ": trailing bytes"));
  ULY_CHECK(h.vocab_size > 0 && h.vocab_size <= (uint64_t{1} << 32),
            path << ": vocabulary size " << h.vocab_size << " in the header is invalid");

  TokenShard s;
  s.map_ = map;
  s.path_ = path;
  s.tokenizer_.assign(h.name, h.name_length);
  s.num_tokens_ = static_cast<int64_t>(h.num_tokens);
  s.num_documents_ = static_cast<int64_t>(h.num_documents);
  s.vocab_size_ = static_cast<int64_t>(h.vocab_size);
  const auto* base = static_cast<const uint8_t*>(map->addr);
  s.tokens_ = reinterpret_cast<const uint32_t*>(base + h.tokens_offset);
  s.offsets_ = reinterpret_cast<const uint64_t*>(base + h.index_offset);
  if (masked) s.mask_ = base + h.index_offset + 8 * (h.num_documents + 1);

  ULY_CHECK(s.offsets_[0] == 0 && s.offsets_[h.num_documents] == h.num_tokens,
            path << ": document index must run from 0 to " << h.num_tokens << " but runs from " << s.offsets_[0]
                 << " to " << s.offsets_[h.num_documents] << ": corrupt file");
  for (uint64_t d = 0; d < h.num_documents; ++d)
    ULY_CHECK(s.offsets_[d] <= s.offsets_[d + 1],
              path << ": document index decreases at document " << d << ": corrupt file");
  if (check_tokens && masked) {
    const uint8_t* bad = std::find_if(s.mask_, s.mask_ + h.num_tokens, [](uint8_t m) { return m > 1; });
    ULY_CHECK(bad == s.mask_ + h.num_tokens, path << ": loss mask value " << int(*bad) << " at offset "
                                                  << (bad - s.mask_) << " is not 0 or 1: corrupt file");
  }
  if (check_tokens) {
    const uint32_t* bad = std::find_if(s.tokens_, s.tokens_ + h.num_tokens,
                                       [&](uint32_t t) { return t >= h.vocab_size; });
    ULY_CHECK(bad == s.tokens_ + h.num_tokens, path << ": token " << *bad << " at offset " << (bad - s.tokens_)
                                                    << " is outside the vocabulary [0, " << h.vocab_size << ")");
  }
  return s;
}

int64_t TokenShard::document_of(int64_t t) const {
  // The last document whose start is <= t.
  const uint64_t* it = std::upper_bound(offsets_, offsets_ + num_documents_ + 1, static_cast<uint64_t>(t));
  return std::clamp<int64_t>((it - offsets_) - 1, 0, std::max<int64_t>(num_documents_ - 1, 0));
}

}  // namespace ulysses
