// core/tensor.h — Tensor: a typed, shaped, contiguous (row-major) view of device memory, and
// TensorBuffer: a Buffer that owns a tensor's memory.
//
// A Tensor never owns memory; it is a small value (pointer, dtype, shape, device) passed by
// value into ops and captured by value into stream tasks. Up to kMaxDims dimensions.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/dtype.h"
#include "core/error.h"

namespace moezero {

constexpr int kMaxDims = 5;

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(const std::vector<int64_t>& dims);

  int rank() const { return rank_; }
  int64_t operator[](int i) const;  // negative i counts from the back
  int64_t numel() const;
  std::vector<int64_t> dims() const { return {dims_.begin(), dims_.begin() + rank_}; }
  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }
  std::string str() const;  // "(3, 4)"

 private:
  std::array<int64_t, kMaxDims> dims_{};
  int rank_ = 0;
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(void* data, DType dtype, Shape shape, Device* device)
      : data_(data), dtype_(dtype), shape_(shape), device_(device) {}

  void* data() const { return data_; }
  template <typename T>
  T* data_as() const {
    MOEZERO_CHECK(dtype_of<T>::value == dtype_, "tensor is ", dtype_name(dtype_), ", accessed as ",
                  dtype_name(dtype_of<T>::value));
    return static_cast<T*>(data_);
  }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return shape_.rank(); }
  int64_t dim(int i) const { return shape_[i]; }
  int64_t numel() const { return shape_.numel(); }
  size_t size_bytes() const { return static_cast<size_t>(numel()) * dtype_size_bytes(dtype_); }
  Device* device() const { return device_; }
  bool defined() const { return data_ != nullptr || (device_ != nullptr && numel() == 0); }

  // Same memory, other shape (numel must match).
  Tensor reshape(Shape s) const;
  // Rows [begin, end) of the first dimension (a contiguous sub-view).
  Tensor slice_rows(int64_t begin, int64_t end) const;
  // Flat elements [offset, offset + count) viewed as `s` (numel(s) == count).
  Tensor view_elems(int64_t offset_elems, Shape s) const;
  // The bytes [offset_bytes, offset_bytes + numel(s) * size(dtype)) of this tensor's memory
  // reinterpreted as a `dtype` tensor of shape `s` (a wire buffer of packed parts: int8 values,
  // then fp32 scales). offset_bytes must be a multiple of dtype's size (its alignment, given
  // an aligned base) and the range inside size_bytes().
  Tensor view_bytes(int64_t offset_bytes, DType dtype, Shape s) const;

  std::string str() const;  // "f32(3, 4)@cpu:0"

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::F32;
  Shape shape_;
  Device* device_ = nullptr;
};

// A Buffer plus the Tensor view of all of it. Move-only.
class TensorBuffer {
 public:
  TensorBuffer() = default;
  TensorBuffer(Device& device, DType dtype, Shape shape, MemTag tag, Stream& stream,
               const char* what = "", HostRead host_read = HostRead::No);
  const Tensor& view() const { return view_; }
  operator const Tensor&() const { return view_; }  // NOLINT: a TensorBuffer is usable as its view
  Buffer& buffer() { return buffer_; }
  // True from construction until reset() (also for a zero-element tensor).
  explicit operator bool() const { return view_.device() != nullptr; }
  void reset() {
    buffer_.reset();
    view_ = Tensor();
  }

 private:
  Buffer buffer_;
  Tensor view_;
};

}  // namespace moezero
