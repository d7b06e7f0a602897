#include "core/tensor.h"

#include <cstring>
#include <sstream>

namespace ulysses {

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Storage::Storage(Allocator* alloc, size_t bytes)
    : alloc_(alloc), ptr_(alloc->allocate(bytes)), bytes_(bytes), device_(alloc->device()) {}
Storage::Storage(void* borrowed, size_t bytes, Device device)
    : alloc_(nullptr), ptr_(borrowed), bytes_(bytes), device_(device) {}
Storage::~Storage() {
  if (alloc_ != nullptr) alloc_->deallocate(ptr_, bytes_);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Allocator& alloc) {
  for (int64_t d : shape) ULY_CHECK(d >= 0, "negative dimension in shape " << shape_str(shape));
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(&alloc, t.nbytes());
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  t.zero_();
  return t;
}

Tensor Tensor::borrow(void* data, const Shape& shape, DType dtype, Device device) {
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(data, t.nbytes(), device);
  return t;
}

int64_t Tensor::dim(int i) const {
  const int n = ndim();
  const int j = i < 0 ? i + n : i;
  ULY_CHECK(j >= 0 && j < n, "dimension " << i << " out of range for shape " << shape_str(shape_));
  return shape_[j];
}

Tensor Tensor::reshape(const Shape& shape) const {
  ULY_CHECK(shape_numel(shape) == numel(), "cannot reshape " << shape_str(shape_) << " to " << shape_str(shape));
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
  ULY_CHECK(ndim() >= 1 && begin >= 0 && begin <= end && end <= shape_[0],
            "slice [" << begin << ", " << end << ") out of range for shape " << shape_str(shape_));
  Tensor t = *this;
  const int64_t row = numel() / (shape_[0] == 0 ? 1 : shape_[0]);
  t.offset_ = offset_ + static_cast<size_t>(begin * row) * dtype_size(dtype_);
  t.shape_[0] = end - begin;
  return t;
}

void Tensor::zero_() {
  ULY_CHECK(device() == Device::CPU, "Tensor::zero_ on a " << device_name(device()) << " tensor");
  if (defined()) std::memset(raw(), 0, nbytes());
}

Tensor Tensor::clone() const {
  ULY_CHECK(device() == Device::CPU, "Tensor::clone on a " << device_name(device()) << " tensor");
  Tensor t = empty(shape_, dtype_);
  std::memcpy(t.raw(), raw(), nbytes());
  return t;
}

std::string Tensor::describe() const {
  std::ostringstream os;
  os << dtype_name(dtype_) << shape_str(shape_) << " " << device_name(device());
  return os.str();
}

}  // namespace ulysses
