// core/host_exchange.h — small host values exchanged between the ranks of a communicator
// (per-step counters, group names, checkpoint indices, trace events). The values travel
// through device buffers, so the same call works on the CPU backend (Local, MPI) and on CUDA
// (NCCL needs device memory). Each call synchronises `stream` once per all-gather: for
// step-level bookkeeping, never per op.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace moezero {

class Communicator;
class Device;
class Stream;

// [in] mine: this rank's words; every rank of `comm` must pass the same count. Returns
// comm.size() * mine.size() words, rank-major.
std::vector<int64_t> all_gather_words(Device& device, Stream& stream, Communicator& comm,
                                      std::span<const int64_t> mine);

// The element-wise sum over the ranks of `comm` of every rank's `mine` (same count on every
// rank): one all-reduce, so its cost does not grow with the group's size as an all-gather's does.
std::vector<int64_t> all_reduce_words(Device& device, Stream& stream, Communicator& comm,
                                      std::span<const int64_t> mine);

// Every rank's string, in group-rank order, on every rank (lengths may differ): two
// all-gathers, the lengths then the bytes padded to the longest.
std::vector<std::string> all_gather_strings(Device& device, Stream& stream, Communicator& comm,
                                            const std::string& mine);

}  // namespace moezero
