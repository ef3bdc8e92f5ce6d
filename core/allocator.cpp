// core/allocator.cpp — the caching allocator (blocks reused once their streams passed their
// release) and Buffer, its RAII handle (see allocator.h).
#include "core/allocator.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"

namespace moezero {

namespace {
constexpr size_t kGranularityBytes = 512;
size_t round_block(size_t bytes) {
  return (bytes + kGranularityBytes - 1) / kGranularityBytes * kGranularityBytes;
}
// A cached block may serve a smaller request when the waste is modest.
bool fits(size_t cached, size_t wanted) { return cached <= wanted + wanted / 4 + 4096; }
}  // namespace

std::string format_bytes(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, kUnits[u]);
  return buf;
}

std::string top_tags_text(const std::array<size_t, kMemTagCount>& bytes_by_tag) {
  std::array<size_t, kMemTagCount> order;
  for (size_t t = 0; t < kMemTagCount; ++t) order[t] = t;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return bytes_by_tag[a] > bytes_by_tag[b]; });
  std::string out;
  for (size_t t : order) {
    if (bytes_by_tag[t] == 0) break;
    if (!out.empty()) out += ", ";
    out += std::string(mem_tag_name(static_cast<MemTag>(t))) + " " + format_bytes(bytes_by_tag[t]);
  }
  return out.empty() ? "nothing" : out;
}

// Resident copies that a smaller budget gives back: the shard cache (its default, `auto`,
// sizes it from an estimate of the rest of the run) and the dense keep.
static std::string cache_hint(size_t cache_bytes) {
  if (cache_bytes == 0) return "";
  return "; the cache holds " + format_bytes(cache_bytes) +
         ": a smaller shard_cache.capacity_bytes (or zero.keep_dense_bytes) gives it back";
}

const char* mem_tag_name(MemTag t) {
  switch (t) {
    case MemTag::ParamShard: return "param_shard";
    case MemTag::FullParam: return "full_param";
    case MemTag::Grad: return "grad";
    case MemTag::OptimState: return "optim_state";
    case MemTag::Activation: return "activation";
    case MemTag::Cache: return "cache";
    case MemTag::CommBuffer: return "comm_buffer";
    case MemTag::Secondary: return "secondary_shard";
    case MemTag::Other: return "other";
    case MemTag::kCount: break;
  }
  return "?";
}

// ---- Buffer ----------------------------------------------------------------------------

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    reset();
    allocator_ = o.allocator_;
    device_ = o.device_;
    ptr_ = o.ptr_;
    size_bytes_ = o.size_bytes_;
    block_bytes_ = o.block_bytes_;
    tag_ = o.tag_;
    pool_ = o.pool_;
    home_ = o.home_;
    extra_streams_ = std::move(o.extra_streams_);
    o.allocator_ = nullptr;
    o.ptr_ = nullptr;
    o.size_bytes_ = o.block_bytes_ = 0;
    o.home_ = nullptr;
    o.extra_streams_.clear();
  }
  return *this;
}

void Buffer::record_stream(Stream& stream) {
  if (!allocator_ || &stream == home_) return;
  if (std::find(extra_streams_.begin(), extra_streams_.end(), &stream) == extra_streams_.end())
    extra_streams_.push_back(&stream);
}

void Buffer::reset() {
  if (allocator_) allocator_->free_block(*this);
  allocator_ = nullptr;
  ptr_ = nullptr;
  size_bytes_ = block_bytes_ = 0;
  home_ = nullptr;
  extra_streams_.clear();
}

void Buffer::retag(MemTag tag) {
  if (allocator_ && tag != tag_) allocator_->retag(*this, tag);
  tag_ = tag;
}

// ---- Allocator -------------------------------------------------------------------------

void Allocator::retag(Buffer& b, MemTag tag) {
  std::lock_guard lock(mu_);
  auto from = static_cast<size_t>(b.tag_), to = static_cast<size_t>(tag);
  stats_.current_bytes[from] -= b.size_bytes_;
  stats_.current_bytes[to] += b.size_bytes_;
  stats_.peak_bytes[to] = std::max(stats_.peak_bytes[to], stats_.current_bytes[to]);
  if (is_state_tag(b.tag_)) stats_.state_current_bytes -= b.size_bytes_;
  if (is_state_tag(tag)) add_state_locked(b.size_bytes_);
}

Allocator::Allocator(Device& device, size_t capacity_bytes)
    : device_(device), capacity_bytes_(capacity_bytes) {}

Allocator::~Allocator() {
  for (auto& p : pending_) {
    for (auto& e : p.events) {
      try {
        e->synchronize();
      } catch (...) {
        // The stream failed; its work is over either way, the memory can go.
      }
    }
    device_.raw_free(p.ptr);
  }
  for (auto& pool : free_pool_)
    for (auto& [size, ptr] : pool) device_.raw_free(ptr);
}

uint8_t Allocator::pool_of(HostRead host_read) const {
  return host_read == HostRead::Yes && device_.separates_host_read() ? 1 : 0;
}

void Allocator::reclaim_completed_locked() {
  auto done = [](const Pending& p) {
    for (auto& e : p.events) {
      try {
        if (!e->query()) return false;
      } catch (...) {
        // Completed with an error: the stream will not touch the memory again.
      }
    }
    return true;
  };
  for (size_t i = 0; i < pending_.size();) {
    if (done(pending_[i])) {
      free_pool_[pending_[i].pool].emplace(pending_[i].block_bytes, pending_[i].ptr);
      stats_.pending_bytes -= pending_[i].block_bytes;
      pending_[i] = std::move(pending_.back());
      pending_.pop_back();
    } else {
      ++i;
    }
  }
}

void* Allocator::take_cached_locked(size_t block_bytes, uint8_t pool, size_t* got_bytes) {
  auto& cache = free_pool_[pool];
  auto it = cache.lower_bound(block_bytes);
  if (it == cache.end() || !fits(it->first, block_bytes)) return nullptr;
  void* p = it->second;
  *got_bytes = it->first;
  cache.erase(it);
  return p;
}

void Allocator::release_free_pool_locked() {
  for (auto& pool : free_pool_) {
    for (auto& [size, p] : pool) {
      device_.raw_free(p);
      stats_.reserved_bytes -= size;
    }
    pool.clear();
  }
}

void Allocator::free_pending_locked(std::unique_lock<std::mutex>& lock) {
  // Wait for pending frees (without holding the lock: a stream task may free memory).
  std::vector<Pending> waiting = std::move(pending_);
  pending_.clear();
  lock.unlock();
  for (auto& p : waiting)
    for (auto& e : p.events) {
      try {
        e->synchronize();
      } catch (...) {
      }
    }
  lock.lock();
  for (auto& p : waiting) {
    device_.raw_free(p.ptr);
    stats_.reserved_bytes -= p.block_bytes;
    stats_.pending_bytes -= p.block_bytes;
  }
}

void* Allocator::obtain_block_locked(size_t block_bytes, uint8_t pool, size_t* got_bytes,
                                     std::unique_lock<std::mutex>& lock) {
  reclaim_completed_locked();
  void* ptr = take_cached_locked(block_bytes, pool, got_bytes);
  for (int attempt = 0; attempt < 3 && !ptr; ++attempt) {
    if (attempt == 1 && device_.raw_free_synchronizes()) {
      // cudaFree waits for the whole device: were a collective of this device in flight
      // (waiting for a peer that waits for us), it would never return. Drain every stream
      // first, a wait bounded by comm.timeout_s, without the lock (stream work may free).
      lock.unlock();
      device_.synchronize();
      lock.lock();
    }
    if (attempt == 1)
      release_free_pool_locked();  // give the cache back to the device and try again
    else if (attempt == 2)
      free_pending_locked(lock);
    if (capacity_bytes_ == 0 || stats_.reserved_bytes + block_bytes <= capacity_bytes_) {
      ptr = pool ? device_.raw_alloc_host_read(block_bytes) : device_.raw_alloc(block_bytes);
      if (ptr) {
        *got_bytes = block_bytes;
        stats_.reserved_bytes += block_bytes;
        ++stats_.device_alloc_count;
      }
    }
  }
  return ptr;
}

void Allocator::throw_out_of_memory_locked(size_t bytes, size_t block_bytes, MemTag tag,
                                           const char* what) const {
  const bool over_limit =
      capacity_bytes_ != 0 && stats_.reserved_bytes + block_bytes > capacity_bytes_;
  MOEZERO_THROW_AS(
      OutOfMemoryError, "out of memory on ", device_.name(), ": ", mem_tag_name(tag), " buffer",
      (what[0] ? " '" : ""), what, (what[0] ? "'" : ""), " asked for ", bytes, " bytes (",
      format_bytes(bytes), "); ",
      over_limit
          ? "the limit is " + std::to_string(capacity_bytes_) + " bytes (" +
                format_bytes(capacity_bytes_) + ", train.memory_limit)"
          : std::string("the device has no more memory (limit: ") +
                (capacity_bytes_ ? format_bytes(capacity_bytes_) : std::string("none")) + ")",
      ", reserved ", format_bytes(stats_.reserved_bytes), "; in use ",
      format_bytes(stats_.total_current_bytes), ", by tag: ", top_tags_text(stats_.current_bytes),
      cache_hint(stats_.current_bytes[static_cast<size_t>(MemTag::Cache)]));
}

void Allocator::count_allocation_locked(size_t bytes, MemTag tag) {
  auto t = static_cast<size_t>(tag);
  stats_.current_bytes[t] += bytes;
  stats_.peak_bytes[t] = std::max(stats_.peak_bytes[t], stats_.current_bytes[t]);
  stats_.total_current_bytes += bytes;
  stats_.total_peak_bytes = std::max(stats_.total_peak_bytes, stats_.total_current_bytes);
  if (is_state_tag(tag)) add_state_locked(bytes);
  ++stats_.alloc_count;
}

void Allocator::add_state_locked(size_t bytes) {
  stats_.state_current_bytes += bytes;
  stats_.state_peak_bytes = std::max(stats_.state_peak_bytes, stats_.state_current_bytes);
}

Buffer Allocator::allocate(size_t bytes, MemTag tag, Stream& stream, const char* what,
                           HostRead host_read) {
  Buffer b;
  if (bytes == 0) return b;
  const size_t block = round_block(bytes);
  const uint8_t pool = pool_of(host_read);
  void* ptr = nullptr;
  size_t got = block;
  {
    std::unique_lock lock(mu_);
    ptr = obtain_block_locked(block, pool, &got, lock);
    if (!ptr) throw_out_of_memory_locked(bytes, block, tag, what);
    count_allocation_locked(bytes, tag);
  }
  b.allocator_ = this;
  b.device_ = &device_;
  b.ptr_ = ptr;
  b.size_bytes_ = bytes;
  b.block_bytes_ = got;
  b.tag_ = tag;
  b.pool_ = pool;
  b.home_ = &stream;
  return b;
}

void Allocator::free_block(Buffer& b) {
  Pending p{b.ptr_, b.block_bytes_, b.pool_, {}};
  // Mark the release point on every stream that may still use the block.
  auto mark = [&](Stream* s) {
    auto e = device_.create_event();
    e->record(*s);
    p.events.push_back(std::move(e));
  };
  if (b.home_) mark(b.home_);
  for (Stream* s : b.extra_streams_) mark(s);
  std::lock_guard lock(mu_);
  auto t = static_cast<size_t>(b.tag_);
  stats_.current_bytes[t] -= b.size_bytes_;
  stats_.total_current_bytes -= b.size_bytes_;
  if (is_state_tag(b.tag_)) stats_.state_current_bytes -= b.size_bytes_;
  stats_.pending_bytes += p.block_bytes;
  pending_.push_back(std::move(p));
}

MemStats Allocator::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void Allocator::reset_peak() {
  std::lock_guard lock(mu_);
  stats_.peak_bytes = stats_.current_bytes;
  stats_.total_peak_bytes = stats_.total_current_bytes;
  stats_.state_peak_bytes = stats_.state_current_bytes;
}

void Allocator::empty_cache() {
  std::lock_guard lock(mu_);
  reclaim_completed_locked();
  release_free_pool_locked();
}

void Allocator::set_capacity_bytes(size_t bytes) {
  std::lock_guard lock(mu_);
  capacity_bytes_ = bytes;
}

}  // namespace moezero
