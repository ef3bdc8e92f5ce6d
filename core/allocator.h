// core/allocator.h — per-device caching allocator that counts bytes by tag, and Buffer,
// the RAII owner of one allocation.
//
// Stream safety (the rule of DESIGN.md "Tensor"): a Buffer is allocated for a home stream.
// Other streams that use it must be declared with Buffer::record_stream(). When the Buffer is
// freed, the allocator records an event on the home stream and on every recorded stream; the
// block is reused only after all those events have completed, i.e. after every stream has
// passed the release point. So the host may free a buffer while a kernel still reads it.
//
// Accounting: bytes are counted per tag from allocation to free (the user's view, exact and
// machine independent); blocks still waiting for their streams are counted in
// `pending_bytes`; `reserved_bytes` is everything held from the device.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/device.h"

namespace moezero {

enum class MemTag : uint8_t {
  ParamShard,  // this rank's shard of a parameter group (master copy)
  FullParam,   // gathered full parameters
  Grad,        // gradients (full or sharded)
  OptimState,  // AdamW moments, fp32 master weights
  Activation,  // forward activations and backward temporaries
  Cache,       // shard-cache resident experts
  CommBuffer,  // staging buffers of collectives
  Secondary,   // hpZ secondary shards: this rank's slices of gathered groups over its partition
  Other,
  kCount
};
constexpr size_t kMemTagCount = static_cast<size_t>(MemTag::kCount);
const char* mem_tag_name(MemTag t);
// Parameters, gradients, optimizer states, cache and communication buffers: what ZeRO shards
// and gathers (not activations, not other).
constexpr bool is_state_tag(MemTag t) { return t != MemTag::Activation && t != MemTag::Other; }
// "1.5 MiB" (binary units, one decimal; "512 B" below 1 KiB).
std::string format_bytes(uint64_t bytes);
// Non-zero tags, largest first: "full_param 1.5 MiB, activation 200.0 KiB" ("nothing" if none).
std::string top_tags_text(const std::array<size_t, kMemTagCount>& bytes_by_tag);

struct MemStats {
  std::array<size_t, kMemTagCount> current_bytes{};
  std::array<size_t, kMemTagCount> peak_bytes{};
  size_t total_current_bytes = 0;
  size_t total_peak_bytes = 0;
  // Model state: every tag but activation and other (is_state_tag), summed at each moment; its
  // peak is the simultaneous peak (not the sum of the tags' own peaks, taken at other moments).
  size_t state_current_bytes = 0;
  size_t state_peak_bytes = 0;
  size_t reserved_bytes = 0;  // held from the device (in use + cached + pending)
  size_t pending_bytes = 0;   // freed by the user, waiting for streams to pass
  uint64_t alloc_count = 0;
  uint64_t device_alloc_count = 0;  // allocations that went to the device (cache misses)
};

class Allocator;

// Owning handle of one allocation. Move-only; frees on destruction (stream-safe, see above).
class Buffer {
 public:
  Buffer() = default;
  ~Buffer() { reset(); }
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return ptr_; }
  size_t size_bytes() const { return size_bytes_; }
  MemTag tag() const { return tag_; }
  Device* device() const { return device_; }
  explicit operator bool() const { return ptr_ != nullptr; }

  // Declares that `stream` (other than the home stream) uses this buffer, so freeing waits
  // for it too.
  void record_stream(Stream& stream);
  // Frees now (stream-safe). Idempotent.
  void reset();
  // Moves this buffer's bytes to another accounting tag (e.g. gathered parameters kept by the
  // shard cache count as `cache` while resident, as `full_param` while in use).
  void retag(MemTag tag);

 private:
  friend class Allocator;
  Allocator* allocator_ = nullptr;
  Device* device_ = nullptr;
  void* ptr_ = nullptr;
  size_t size_bytes_ = 0;   // what the user asked for
  size_t block_bytes_ = 0;  // what the block holds (rounded up)
  MemTag tag_ = MemTag::Other;
  uint8_t pool_ = 0;  // Allocator::pool_of
  Stream* home_ = nullptr;
  std::vector<Stream*> extra_streams_;
};

class Allocator {
 public:
  // capacity_bytes: 0 = unlimited (up to what the device gives); otherwise allocations that
  // would take reserved bytes past it fail with OutOfMemoryError (train.memory_limit; also
  // emulates small devices). Before failing, the allocator returns its cached blocks to the
  // device and waits for pending frees, so the limit applies to bytes really in use. A device
  // refusal (raw_alloc returns nullptr: cudaMalloc out of memory) fails the same way. The
  // error names the tag, the buffer (`what`: the parameter group for gathers, gradients and
  // shards), the request, the limit, and the bytes in use by tag, largest first.
  explicit Allocator(Device& device, size_t capacity_bytes = 0);
  ~Allocator();
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // [in] bytes: size (0 gives an empty Buffer); [in] tag: accounting class; [in] stream: home
  // stream (the first user). `what` names the request in an out-of-memory error. [in]
  // host_read: whether the host reads the contents back (Device::raw_alloc_host_read).
  Buffer allocate(size_t bytes, MemTag tag, Stream& stream, const char* what = "",
                  HostRead host_read = HostRead::No);

  MemStats stats() const;
  void reset_peak();
  // Returns cached blocks whose streams have passed to the device.
  void empty_cache();
  void set_capacity_bytes(size_t bytes);

 private:
  friend class Buffer;
  struct Pending {
    void* ptr;
    size_t block_bytes;
    uint8_t pool;
    std::vector<std::unique_ptr<Event>> events;
  };
  // The cache a request's blocks come from and return to: 1 for host-read blocks of a device
  // that separates them (Device::separates_host_read), else 0.
  uint8_t pool_of(HostRead host_read) const;
  void free_block(Buffer& b);
  void retag(Buffer& b, MemTag tag);
  void reclaim_completed_locked();  // pending -> free pool for blocks whose events completed
  void* take_cached_locked(size_t block_bytes, uint8_t pool, size_t* got_bytes);
  // The steps of allocate, all under mu_.
  // A block for `block_bytes`: cached, else from the device (after returning the free pool,
  // then after waiting for pending frees, which unlocks `lock` meanwhile). nullptr when none;
  // [out] got_bytes: the block's size when found.
  void* obtain_block_locked(size_t block_bytes, uint8_t pool, size_t* got_bytes,
                            std::unique_lock<std::mutex>& lock);
  void release_free_pool_locked();  // every cached block back to the device
  void free_pending_locked(std::unique_lock<std::mutex>& lock);  // waits, unlocked, then frees
  [[noreturn]] void throw_out_of_memory_locked(size_t bytes, size_t block_bytes, MemTag tag,
                                               const char* what) const;
  void count_allocation_locked(size_t bytes, MemTag tag);
  void add_state_locked(size_t bytes);  // state_current_bytes += bytes, and its peak

  Device& device_;
  size_t capacity_bytes_;
  mutable std::mutex mu_;
  std::array<std::multimap<size_t, void*>, 2> free_pool_;  // by pool_of: block size -> ptr
  std::vector<Pending> pending_;
  MemStats stats_;
};

}  // namespace moezero
