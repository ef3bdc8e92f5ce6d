// core/tensor.cpp — Shape and the Tensor views (reshape, slices) of tensor.h.
#include "core/tensor.h"

#include <sstream>

namespace moezero {

Shape::Shape(std::initializer_list<int64_t> dims) : Shape(std::vector<int64_t>(dims)) {}

Shape::Shape(const std::vector<int64_t>& dims) {
  MOEZERO_CHECK(dims.size() <= static_cast<size_t>(kMaxDims), "shape has ", dims.size(),
                " dims, at most ", kMaxDims, " are supported");
  rank_ = static_cast<int>(dims.size());
  for (int i = 0; i < rank_; ++i) {
    MOEZERO_CHECK(dims[i] >= 0, "negative dimension ", dims[i], " at index ", i);
    dims_[i] = dims[i];
  }
}

int64_t Shape::operator[](int i) const {
  int j = i < 0 ? rank_ + i : i;
  MOEZERO_CHECK(j >= 0 && j < rank_, "dimension index ", i, " out of range for shape ", str());
  return dims_[j];
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[i];
  return n;
}

bool Shape::operator==(const Shape& o) const {
  if (rank_ != o.rank_) return false;
  for (int i = 0; i < rank_; ++i)
    if (dims_[i] != o.dims_[i]) return false;
  return true;
}

std::string Shape::str() const {
  std::ostringstream os;
  os << '(';
  for (int i = 0; i < rank_; ++i) os << (i ? ", " : "") << dims_[i];
  os << ')';
  return os.str();
}

Tensor Tensor::reshape(Shape s) const {
  MOEZERO_CHECK(s.numel() == numel(), "reshape of ", str(), " to ", s.str(),
                ": element counts differ");
  return Tensor(data_, dtype_, s, device_);
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  MOEZERO_CHECK(rank() >= 1 && 0 <= begin && begin <= end && end <= dim(0), "slice_rows [", begin,
                ", ", end, ") of ", str());
  std::vector<int64_t> d = shape_.dims();
  int64_t row_elems = d[0] == 0 ? 0 : numel() / d[0];
  d[0] = end - begin;
  return Tensor(static_cast<char*>(data_) + begin * row_elems * dtype_size_bytes(dtype_), dtype_,
                Shape(d), device_);
}

Tensor Tensor::view_elems(int64_t offset_elems, Shape s) const {
  MOEZERO_CHECK(offset_elems >= 0 && offset_elems + s.numel() <= numel(), "view_elems at ",
                offset_elems, " of ", s.str(), " exceeds ", str());
  return Tensor(static_cast<char*>(data_) + offset_elems * dtype_size_bytes(dtype_), dtype_, s,
                device_);
}

Tensor Tensor::view_bytes(int64_t offset_bytes, DType dtype, Shape s) const {
  const auto es = static_cast<int64_t>(dtype_size_bytes(dtype));
  MOEZERO_CHECK(offset_bytes >= 0 && offset_bytes % es == 0, "view_bytes at byte ", offset_bytes,
                " of ", str(), ": not a multiple of ", dtype_name(dtype), "'s ", es, " bytes");
  MOEZERO_CHECK(offset_bytes + s.numel() * es <= static_cast<int64_t>(size_bytes()),
                "view_bytes at byte ", offset_bytes, " of ", dtype_name(dtype), s.str(),
                " exceeds ", str(), " (", size_bytes(), " bytes)");
  return Tensor(static_cast<char*>(data_) + offset_bytes, dtype, s, device_);
}

std::string Tensor::str() const {
  std::ostringstream os;
  os << dtype_name(dtype_) << shape_.str();
  if (device_) os << '@' << device_->name();
  return os.str();
}

TensorBuffer::TensorBuffer(Device& device, DType dtype, Shape shape, MemTag tag, Stream& stream,
                           const char* what, HostRead host_read) {
  size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size_bytes(dtype);
  buffer_ = device.allocator().allocate(bytes, tag, stream, what, host_read);
  view_ = Tensor(buffer_.data(), dtype, shape, &device);
}

}  // namespace moezero
