// TensorBoard event files, written without TensorFlow or protobuf: a file of
// TFRecord frames (length, masked CRC32C of the length, data, masked CRC32C of
// the data), each holding one tensorflow.Event message encoded by hand: the
// first one says file_version "brain.Event:2", the others carry scalar
// summaries (Summary.Value with tag and simple_value) or a SessionLog START.
// TensorBoard reads every file in a folder whose name contains "tfevents".
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ulysses {

class AppendFile;

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), continuing from `crc`.
uint32_t crc32c(const void* data, size_t bytes, uint32_t crc = 0);
// TFRecord's masked form: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t bytes);
// One TFRecord: u64 length (little-endian), u32 masked CRC of those 8 bytes, the data,
// u32 masked CRC of the data.
std::string tfrecord_frame(std::string_view data);

// The Event messages (serialized protobuf).
std::string event_file_version(double wall_time);
std::string event_scalars(double wall_time, int64_t step, const std::vector<std::pair<std::string, double>>& values);
std::string event_session_start(double wall_time, int64_t step);

// An event file in `dir` named events.out.tfevents.<unix seconds>.<host>.<pid>.ulysses,
// appended to with every write checked and flushed (AppendFile).
class EventFileWriter {
 public:
  explicit EventFileWriter(const std::string& dir);
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // Non-finite values are left out (TensorBoard would draw them as gaps anyway).
  void scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values);
  // Tells TensorBoard that the run restarted at `step`: it drops what older files hold
  // for this step and later (a resumed run rewrites them).
  void session_start(int64_t step);
  void sync();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::unique_ptr<AppendFile> file_;
};

// Removes the event files that a previous run left in `dir` (a fresh run over an old one).
void remove_event_files(const std::string& dir);

}  // namespace ulysses
