// Tensor: a shape, a dtype and a view into reference-counted storage on a device.
// Always contiguous (row-major); views share storage.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/dtype.h"
#include "core/error.h"

namespace ulysses {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);
int64_t shape_numel(const Shape& s);

// Owns (or borrows) one block of memory.
class Storage {
 public:
  Storage(Allocator* alloc, size_t bytes);              // owning
  Storage(void* borrowed, size_t bytes, Device device);  // non-owning
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  Allocator* alloc_;
  void* ptr_;
  size_t bytes_;
  Device device_;
};

class Tensor {
 public:
  Tensor() = default;
  // New uninitialised tensor from an allocator (host by default).
  static Tensor empty(const Shape& shape, DType dtype, Allocator& alloc = host_allocator());
  // New tensor filled with zeros (host only).
  static Tensor zeros(const Shape& shape, DType dtype);
  // A view of memory owned elsewhere; the caller keeps it alive.
  static Tensor borrow(void* data, const Shape& shape, DType dtype, Device device = Device::CPU);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const;  // negative counts from the end
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::CPU; }

  void* raw() const { return static_cast<char*>(storage_->data()) + offset_; }
  template <class T>
  T* data() const;  // checks that T matches dtype

  // Same storage, new shape with the same number of elements.
  Tensor reshape(const Shape& shape) const;
  // Rows [begin, end) of the first dimension, sharing storage.
  Tensor slice(int64_t begin, int64_t end) const;
  // Zero the contents (host tensors only; device backends have their own fill).
  void zero_();
  // Deep copy into a new host tensor.
  Tensor clone() const;

  std::string describe() const;  // "float32[2, 3] cpu"

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;
  Shape shape_;
  DType dtype_ = DType::F32;
};

template <class T>
struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::F32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::F64; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::I32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::I64; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::U8; };
template <> struct dtype_of<uint16_t> { static constexpr DType value = DType::BF16; };  // raw 16-bit storage

template <class T>
T* Tensor::data() const {
  ULY_CHECK(storage_ != nullptr, "use of an undefined tensor");
  ULY_CHECK(dtype_of<T>::value == dtype_ || (sizeof(T) == 2 && dtype_size(dtype_) == 2),
            "tensor is " << dtype_name(dtype_) << ", accessed as " << dtype_name(dtype_of<T>::value));
  return static_cast<T*>(raw());
}

}  // namespace ulysses
