// core/host_exchange.cpp — host words and strings through device buffers and one communicator.
#include "core/host_exchange.h"

#include <algorithm>
#include <cstring>

#include "core/communicator.h"
#include "core/device.h"
#include "core/tensor.h"

namespace moezero {

std::vector<int64_t> all_gather_words(Device& device, Stream& stream, Communicator& comm,
                                      std::span<const int64_t> mine) {
  const size_t words = mine.size();
  std::vector<int64_t> out(words * static_cast<size_t>(comm.size()));
  if (words == 0) return out;
  TensorBuffer send(device, DType::I64, Shape{static_cast<int64_t>(words)}, MemTag::CommBuffer,
                    stream, "host exchange", HostRead::Yes);
  TensorBuffer recv(device, DType::I64, Shape{static_cast<int64_t>(out.size())}, MemTag::CommBuffer,
                    stream, "host exchange", HostRead::Yes);
  device.memcpy_async(send.view().data(), mine.data(), words * 8, stream);
  comm.all_gather(send.view().data(), recv.view().data(), words, DType::I64, stream);
  device.memcpy_async(out.data(), recv.view().data(), out.size() * 8, stream);
  stream.synchronize();
  return out;
}

std::vector<int64_t> all_reduce_words(Device& device, Stream& stream, Communicator& comm,
                                      std::span<const int64_t> mine) {
  std::vector<int64_t> out(mine.begin(), mine.end());
  if (out.empty() || comm.size() == 1) return out;
  TensorBuffer buf(device, DType::I64, Shape{static_cast<int64_t>(out.size())}, MemTag::CommBuffer,
                   stream, "host exchange", HostRead::Yes);
  device.memcpy_async(buf.view().data(), out.data(), out.size() * 8, stream);
  comm.all_reduce(buf.view().data(), buf.view().data(), out.size(), DType::I64, ReduceOp::Sum,
                  stream);
  device.memcpy_async(out.data(), buf.view().data(), out.size() * 8, stream);
  stream.synchronize();
  return out;
}

std::vector<std::string> all_gather_strings(Device& device, Stream& stream, Communicator& comm,
                                            const std::string& mine) {
  const size_t n = static_cast<size_t>(comm.size());
  const int64_t my_len = static_cast<int64_t>(mine.size());
  const std::vector<int64_t> lens = all_gather_words(device, stream, comm, {&my_len, 1});
  const size_t words = static_cast<size_t>((*std::max_element(lens.begin(), lens.end()) + 7) / 8);
  std::vector<int64_t> padded(words, 0);
  if (!mine.empty()) std::memcpy(padded.data(), mine.data(), mine.size());
  const std::vector<int64_t> all = all_gather_words(device, stream, comm, padded);
  std::vector<std::string> out(n);
  for (size_t r = 0; r < n; ++r)
    out[r].assign(reinterpret_cast<const char*>(all.data() + r * words),
                  static_cast<size_t>(lens[r]));
  return out;
}

}  // namespace moezero
