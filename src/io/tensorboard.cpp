#include "io/tensorboard.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "io/atomic_file.h"

namespace ulysses {

namespace {

namespace fs = std::filesystem;

const std::array<uint32_t, 256>& crc_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

// ---- protobuf wire format: the few pieces Event needs ----

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}

void put_tag(std::string& out, int field, int wire_type) { put_varint(out, (static_cast<uint64_t>(field) << 3) | wire_type); }

template <class T>
void put_fixed(std::string& out, T v) {  // little-endian, as on every machine we build for
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

void put_bytes(std::string& out, int field, std::string_view bytes) {
  put_tag(out, field, 2);
  put_varint(out, bytes.size());
  out.append(bytes);
}

// Event: wall_time = 1 (double), step = 2 (int64), file_version = 3, summary = 5, session_log = 7.
std::string event_head(double wall_time, int64_t step) {
  std::string e;
  put_tag(e, 1, 1);
  put_fixed(e, wall_time);
  if (step != 0) {
    put_tag(e, 2, 0);
    put_varint(e, static_cast<uint64_t>(step));
  }
  return e;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint32_t crc32c(const void* data, size_t bytes, uint32_t crc) {
  const auto& t = crc_table();
  const auto* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
  for (size_t i = 0; i < bytes; ++i) crc = t[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

uint32_t masked_crc32c(const void* data, size_t bytes) {
  const uint32_t c = crc32c(data, bytes);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string tfrecord_frame(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  put_fixed(out, static_cast<uint64_t>(data.size()));
  put_fixed(out, masked_crc32c(out.data(), 8));
  out.append(data);
  put_fixed(out, masked_crc32c(data.data(), data.size()));
  return out;
}

std::string event_file_version(double wall_time) {
  std::string e = event_head(wall_time, 0);
  put_bytes(e, 3, "brain.Event:2");
  return e;
}

std::string event_scalars(double wall_time, int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  std::string summary;
  for (const auto& [tag, v] : values) {
    std::string value;  // Summary.Value: tag = 1, simple_value = 2 (float)
    put_bytes(value, 1, tag);
    put_tag(value, 2, 5);
    put_fixed(value, static_cast<float>(v));
    put_bytes(summary, 1, value);  // Summary: repeated Value value = 1
  }
  std::string e = event_head(wall_time, step);
  put_bytes(e, 5, summary);
  return e;
}

std::string event_session_start(double wall_time, int64_t step) {
  std::string log;  // SessionLog: status = 1 (START = 1)
  put_tag(log, 1, 0);
  put_varint(log, 1);
  std::string e = event_head(wall_time, step);
  put_bytes(e, 7, log);
  return e;
}

EventFileWriter::EventFileWriter(const std::string& dir) {
  char host[256] = "localhost";
  if (gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "localhost");
  host[sizeof host - 1] = '\0';
  for (char* c = host; *c; ++c)
    if (*c == '/') *c = '_';
  const double t = now_seconds();
  // TensorBoard reads a folder's event files in name order: this one must sort after any
  // already there (a resumed run's SessionLog START then supersedes their later steps).
  long long secs = static_cast<long long>(t);
  std::error_code ec;
  const std::string prefix = "events.out.tfevents.";
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const size_t dot = name.find('.', prefix.size());
    const std::string digits = name.substr(prefix.size(), dot == std::string::npos ? std::string::npos : dot - prefix.size());
    if (!digits.empty() && digits.size() < 19 && digits.find_first_not_of("0123456789") == std::string::npos)
      secs = std::max(secs, std::stoll(digits) + 1);
  }
  path_ = (fs::path(dir) / (prefix + std::to_string(secs) + "." + host + "." +
                            std::to_string(static_cast<long long>(getpid())) + ".ulysses"))
              .string();
  file_ = std::make_unique<AppendFile>(path_);
  file_->append(tfrecord_frame(event_file_version(t)));
}

EventFileWriter::~EventFileWriter() = default;

void EventFileWriter::scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  std::vector<std::pair<std::string, double>> finite;
  for (const auto& v : values)
    if (std::isfinite(v.second)) finite.push_back(v);
  if (!finite.empty()) file_->append(tfrecord_frame(event_scalars(now_seconds(), step, finite)));
}

void EventFileWriter::session_start(int64_t step) {
  file_->append(tfrecord_frame(event_session_start(now_seconds(), step)));
}

void EventFileWriter::sync() { file_->sync(); }

void remove_event_files(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("events.out.tfevents.", 0) == 0 && e.is_regular_file(ec)) {
      fs::remove(e.path(), ec);
      ULY_CHECK(!ec, e.path().string() << ": cannot remove the previous run's event file (" << ec.message() << ")");
    }
  }
}

}  // namespace ulysses
