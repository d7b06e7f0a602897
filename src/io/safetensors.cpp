#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "core/json_depth.h"
#include "core/limits.h"
#include "io/atomic_file.h"

namespace ulysses {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host would need byte swapping");

// The whole file mapped read-only; unmapped when the last view lets go.
struct SafetensorsFile::Mapping {
  const char* base = nullptr;
  size_t size = 0;
  size_t data_start = 0;  // 8 + header length

  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (base != nullptr) munmap(const_cast<char*>(base), size);
  }
  const char* data() const { return base + data_start; }
  size_t data_size() const { return size - data_start; }
};

namespace {

// Tensor has no keep-alive hook, but Storage returns its memory through the
// allocator it was made with. This one-shot allocator hands out a pointer into
// the mapping, holds the mapping alive, and deletes itself when the Storage
// gives the memory back, so a view outlives the SafetensorsFile safely.
class MappedViewAllocator final : public Allocator {
 public:
  MappedViewAllocator(std::shared_ptr<const void> owner, const void* ptr)
      : owner_(std::move(owner)), ptr_(const_cast<void*>(ptr)) {}
  void* allocate(size_t) override { return ptr_; }
  void deallocate(void*, size_t) override { delete this; }
  Device device() const override { return Device::CPU; }
  const std::string& name() const override {
    static const std::string n = "safetensors-mmap";
    return n;
  }
  size_t current_bytes() const override { return 0; }
  size_t peak_bytes() const override { return 0; }
  void reset_peak() override {}

 private:
  std::shared_ptr<const void> owner_;
  void* ptr_;
};

std::string errno_text(int e) { return std::strerror(e); }

const char* supported_dtypes() { return "F32, F64, BF16, F16, I32, I64, U8"; }

// A JSON value as a non-negative integer, or false.
bool as_size(const nlohmann::json& v, uint64_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    *out = static_cast<uint64_t>(v.get<int64_t>());
    return true;
  }
  return false;
}

}  // namespace

namespace {

// The events of a JSON text, keeping only the top-level keys: the first one given twice, and the
// count checked against limits::kMaxSafetensorsEntries as each is seen. Malformed JSON ends the
// pass quietly; the parse that follows reports it.
struct TopLevelKeys : nlohmann::json_sax<nlohmann::json> {
  const std::string& path;
  int depth = 0;
  std::unordered_set<std::string> names;
  std::string twice;
  explicit TopLevelKeys(const std::string& p) : path(p) {}
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return ++depth, true; }
  bool end_object() override { return --depth, true; }
  bool start_array(std::size_t) override { return ++depth, true; }
  bool end_array() override { return --depth, true; }
  bool key(string_t& k) override {
    if (depth != 1) return true;
    if (!names.insert(k).second && twice.empty()) twice = k;
    ULY_CHECK(names.size() - names.count("__metadata__") <= limits::kMaxSafetensorsEntries,
              path << ": the header lists more than " << limits::kMaxSafetensorsEntries
                   << " tensors (the limit of one file): the file is corrupt or not a safetensors file");
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }
};

std::string repeated_top_level_key(const char* begin, const char* end, const std::string& path) {
  TopLevelKeys keys(path);
  nlohmann::json::sax_parse(begin, end, &keys);
  return keys.twice;
}

// One tensor's header entry, checked: its dtype known, its shape of non-negative sizes whose byte
// count does not overflow, its data_offsets inside the data section and exactly that long.
SafetensorsInfo parse_entry(const std::string& path, const std::string& name, const nlohmann::json& e,
                            size_t data_size) {
  const std::string where = path + ": tensor '" + name + "'";
  ULY_CHECK(e.is_object(), where << " must be an object {dtype, shape, data_offsets}, got " << e.type_name());
  for (const char* field : {"dtype", "shape", "data_offsets"})
    ULY_CHECK(e.contains(field), where << " has no '" << field << "' field");

  SafetensorsInfo info;
  info.name = name;
  ULY_CHECK(e["dtype"].is_string(), where << ": 'dtype' must be a string, got " << e["dtype"].dump());
  const std::string dt = e["dtype"].get<std::string>();
  ULY_CHECK(parse_safetensors_dtype(dt, &info.dtype),
            where << " has unsupported dtype '" << dt << "' (supported: " << supported_dtypes() << ")");

  const nlohmann::json& shape = e["shape"];
  ULY_CHECK(shape.is_array(), where << ": 'shape' must be an array of non-negative integers, got " << shape.dump());
  // numel * dtype_size must not overflow before we compare it with the byte range.
  uint64_t numel = 1;
  bool overflow = false, any_zero = false;
  for (const auto& d : shape) {
    uint64_t v = 0;
    ULY_CHECK(as_size(d, &v) && v <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
              where << ": 'shape' must be an array of non-negative integers, got " << shape.dump());
    info.shape.push_back(static_cast<int64_t>(v));
    if (v == 0) any_zero = true;
    else if (numel > std::numeric_limits<uint64_t>::max() / 8 / v) overflow = true;
    numel *= v;
  }
  if (any_zero) {  // a zero dimension makes the tensor empty, whatever the others say
    overflow = false;
    numel = 0;
  }

  const nlohmann::json& off = e["data_offsets"];
  uint64_t begin = 0, end = 0;
  ULY_CHECK(off.is_array() && off.size() == 2 && as_size(off[0], &begin) && as_size(off[1], &end),
            where << ": 'data_offsets' must be [begin, end] with non-negative integers, got " << off.dump());
  ULY_CHECK(begin <= end, where << " data_offsets [" << begin << ", " << end << "] have begin > end");
  ULY_CHECK(end <= data_size, where << " data_offsets [" << begin << ", " << end << "] overrun the data section ("
                                    << data_size << " bytes): the file is truncated or corrupt");
  const uint64_t want = numel * dtype_size(info.dtype);
  ULY_CHECK(!overflow && end - begin == want,
            where << " data_offsets [" << begin << ", " << end << "] hold " << end - begin << " bytes but " << dt
                  << " x shape " << shape_str(info.shape) << " needs "
                  << (overflow ? std::string("more than 2^64") : std::to_string(want)) << " bytes");
  info.begin = static_cast<size_t>(begin);
  info.end = static_cast<size_t>(end);
  return info;
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  auto map = std::make_shared<Mapping>();

  // O_NONBLOCK: opening a FIFO would otherwise block until a writer came; it is refused below.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  ULY_CHECK(fd >= 0, path << ": cannot open safetensors file (" << errno_text(errno) << ")");
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    ULY_FAIL(path << ": cannot stat (" << errno_text(e) << ")");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    ULY_FAIL(path << ": not a regular file (" << (S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO" : "a device or socket") << ")");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    ULY_FAIL(path << ": file is " << size
                  << " bytes, shorter than the 8-byte header length: the file is truncated or not a safetensors file");
  }
  void* p = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);  // the mapping stays valid without the descriptor
  ULY_CHECK(p != MAP_FAILED, path << ": cannot memory-map " << size << " bytes (" << errno_text(map_errno) << ")");
  map->base = static_cast<const char*>(p);
  map->size = size;

  uint64_t header_len = 0;
  std::memcpy(&header_len, map->base, 8);
  ULY_CHECK(header_len <= size - 8, path << ": header length " << header_len << " is larger than the rest of the file ("
                                         << size - 8
                                         << " bytes): the file is truncated or not a safetensors file");
  ULY_CHECK(header_len <= limits::kMaxSafetensorsHeader,
            path << ": header length " << header_len << " is over the " << limits::kMaxSafetensorsHeader
                 << "-byte limit for a safetensors header: the file is corrupt or not a safetensors file");
  map->data_start = 8 + static_cast<size_t>(header_len);

  // A name given twice would silently keep only the last entry, and more entries than the limit
  // are refused before the header is built: a first pass over the text's events collects the
  // top-level names (linear; nlohmann's parse with a callback rescans the parent object at
  // each entry's end, quadratic in the entries), then the plain parse builds the header.
  check_json_depth(std::string_view(map->base + 8, static_cast<size_t>(header_len)),
                   path);
  const std::string twice = repeated_top_level_key(map->base + 8, map->base + map->data_start, path);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(map->base + 8, map->base + map->data_start);
  } catch (const nlohmann::json::exception& e) {
    ULY_FAIL(path << ": malformed JSON header (" << header_len << " bytes): " << e.what());
  }
  ULY_CHECK(twice.empty(), path << ": the header lists tensor '" << twice
                                << "' twice: the file is corrupt (a reader would keep only one of the two)");
  ULY_CHECK(header.is_object(), path << ": the JSON header must be an object {name: {dtype, shape, data_offsets}}, got "
                                     << header.type_name());

  const size_t data_size = map->data_size();
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& e = it.value();
    if (name == "__metadata__") {
      ULY_CHECK(e.is_object() || e.is_null(),
                path << ": '__metadata__' must be an object of strings, got " << e.type_name());
      if (e.is_null()) continue;
      for (auto m = e.begin(); m != e.end(); ++m) {
        ULY_CHECK(m.value().is_string(), path << ": '__metadata__' entry '" << m.key() << "' must be a string, got "
                                              << m.value().type_name());
        f.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    f.entries_.push_back(parse_entry(path, name, e, data_size));
  }

  // File order (by offset) is the natural order to read in; ties are empty tensors.
  std::sort(f.entries_.begin(), f.entries_.end(), [](const SafetensorsInfo& a, const SafetensorsInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const SafetensorsInfo* prev = nullptr;  // the non-empty range reaching furthest so far
  for (const auto& e : f.entries_) {
    if (e.begin == e.end) continue;  // an empty tensor occupies no bytes
    ULY_CHECK(prev == nullptr || e.begin >= prev->end,
              path << ": tensors '" << prev->name << "' [" << prev->begin << ", " << prev->end << ") and '" << e.name
                   << "' [" << e.begin << ", " << e.end << ") overlap: the header is corrupt");
    prev = &e;
  }
  for (size_t i = 0; i < f.entries_.size(); ++i) f.index_[f.entries_[i].name] = i;
  f.map_ = std::move(map);
  return f;
}

bool SafetensorsFile::contains(const std::string& name) const { return index_.count(name) != 0; }

const SafetensorsInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = index_.find(name);
  ULY_CHECK(it != index_.end(), path_ << ": no tensor '" << name << "' (the file holds " << entries_.size()
                                      << " tensors" << (entries_.empty() ? "" : ", e.g. '" + entries_[0].name + "'")
                                      << ")");
  return entries_[it->second];
}

void SafetensorsFile::read_ahead() const {
  if (map_ && map_->base != nullptr) madvise(const_cast<char*>(map_->base), map_->size, MADV_WILLNEED);
}

Tensor SafetensorsFile::view(const std::string& name) const {
  const SafetensorsInfo& e = info(name);
  const char* p = map_->data() + e.begin;
  // The format does not promise alignment; a misaligned tensor is copied so typed
  // access through Tensor::data<T>() stays well defined.
  if (reinterpret_cast<uintptr_t>(p) % dtype_size(e.dtype) != 0) {
    Tensor t = Tensor::empty(e.shape, e.dtype);
    std::memcpy(t.raw(), p, e.end - e.begin);
    return t;
  }
  auto* alloc = new MappedViewAllocator(map_, p);
  try {
    return Tensor::empty(e.shape, e.dtype, *alloc);
  } catch (...) {
    delete alloc;  // Storage was never made, so nobody else will free it
    throw;
  }
}

Tensor SafetensorsFile::read_f32(const std::string& name) const {
  const SafetensorsInfo& e = info(name);
  ULY_CHECK(is_float(e.dtype), path_ << ": tensor '" << name << "' is " << safetensors_dtype(e.dtype)
                                     << ", not a float type; read it with read_i32");
  Tensor src = view(name);
  Tensor out = Tensor::empty(e.shape, DType::F32);
  convert_to_f32(out.data<float>(), src.raw(), e.dtype, static_cast<size_t>(out.numel()));
  return out;
}

Tensor SafetensorsFile::read_f64(const std::string& name) const {
  const SafetensorsInfo& e = info(name);
  ULY_CHECK(is_float(e.dtype), path_ << ": tensor '" << name << "' is " << safetensors_dtype(e.dtype)
                                     << ", not a float type; read it with read_i32");
  Tensor src = view(name);
  Tensor out = Tensor::empty(e.shape, DType::F64);
  convert_to_f64(out.data<double>(), src.raw(), e.dtype, static_cast<size_t>(out.numel()));
  return out;
}

Tensor SafetensorsFile::read_i32(const std::string& name) const {
  const SafetensorsInfo& e = info(name);
  ULY_CHECK(e.dtype == DType::I32 || e.dtype == DType::I64,
            path_ << ": tensor '" << name << "' is " << safetensors_dtype(e.dtype)
                  << ", expected an integer tensor (I32 or I64)");
  Tensor src = view(name);
  Tensor out = Tensor::empty(e.shape, DType::I32);
  const size_t n = static_cast<size_t>(out.numel());
  int32_t* dst = out.data<int32_t>();
  if (e.dtype == DType::I32) {
    std::memcpy(dst, src.raw(), n * 4);
    return out;
  }
  const int64_t* s = src.data<int64_t>();
  for (size_t i = 0; i < n; ++i) {
    ULY_CHECK(s[i] >= std::numeric_limits<int32_t>::min() && s[i] <= std::numeric_limits<int32_t>::max(),
              path_ << ": tensor '" << name << "' element " << i << " (" << s[i] << ") does not fit in int32");
    dst[i] = static_cast<int32_t>(s[i]);
  }
  return out;
}

// ---- writer -------------------------------------------------------------------

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    ULY_CHECK(!name.empty() && name != "__metadata__",
              path << ": invalid tensor name '" << name << "' (empty or reserved)");
    ULY_CHECK(!header.contains(name), path << ": tensor '" << name << "' given twice");
    ULY_CHECK(t.defined(), path << ": tensor '" << name << "' is undefined");
    ULY_CHECK(t.device() == Device::CPU,
              path << ": tensor '" << name << "' is on " << device_name(t.device()) << "; copy it to the host first");
    nlohmann::ordered_json e;
    e["dtype"] = safetensors_dtype(t.dtype());
    e["shape"] = t.shape();
    e["data_offsets"] = {offset, offset + t.nbytes()};
    header[name] = std::move(e);
    offset += t.nbytes();
  }
  std::string text = header.dump();
  // Pad with spaces so the data section starts 8-byte aligned, as the reference writer does.
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t header_len = text.size();
  const size_t total = 8 + text.size() + offset;

  AtomicFile out(path);
  out.write(&header_len, 8, total);
  out.write(text.data(), text.size(), total);
  for (const auto& [name, t] : tensors) out.write(t.raw(), t.nbytes(), total);
  out.commit(total);
}

}  // namespace ulysses
