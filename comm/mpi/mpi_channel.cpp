// comm/mpi/mpi_channel.cpp — call agreement, bounded waits and failure of one MPI channel.
#include "comm/mpi/mpi_channel.h"

#include <algorithm>
#include <climits>
#include <sstream>
#include <thread>

namespace moezero::comm {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kAgreeTag = 7001;   // signature messages; data moves in MPI collectives
constexpr size_t kHeadWords = 5;  // op, dtype, elems, reduce, root; then 2 x size counts

MPI_Datatype make_bytes_type(int bytes) {
  MPI_Datatype t;
  MOEZERO_MPI_CHECK(MPI_Type_contiguous(bytes, MPI_BYTE, &t));
  MOEZERO_MPI_CHECK(MPI_Type_commit(&t));
  return t;
}

}  // namespace

void mpi_check(int code, const char* expr, const char* file, int line) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) len = 0;
  throw Error(detail::concat("MPI call failed: ", expr, ": ", std::string(text, size_t(len)),
                             " (code ", code, ")"),
              file, line);
}

MPI_Datatype mpi_elem_type(DType dtype) {
  // Committed once, on first use (MPI is initialised by then); never freed: MPI_Finalize
  // releases them.
  static const MPI_Datatype b2 = make_bytes_type(2), b4 = make_bytes_type(4),
                            b8 = make_bytes_type(8);
  switch (dtype_size_bytes(dtype)) {
    case 1: return MPI_BYTE;
    case 2: return b2;
    case 4: return b4;
    case 8: return b8;
  }
  MOEZERO_THROW("mpi: unsupported dtype ", dtype_name(dtype));
}

int mpi_count(size_t elems, const char* op) {
  MOEZERO_CHECK(elems <= static_cast<size_t>(INT_MAX), op, ": ", elems,
                " elements exceed MPI's int count (", INT_MAX,
                "); split the buffer or use the threads/NCCL backends");
  return static_cast<int>(elems);
}

MpiChannel::MpiChannel(ProcessGroup group, std::string name, MPI_Comm comm, int group_rank,
                       CommOptions options)
    : group_(std::move(group)),
      name_(std::move(name)),
      comm_(comm),
      rank_(group_rank),
      options_(options) {}

MpiChannel::~MpiChannel() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  // A communicator with abandoned requests stays allocated (MPI frees it after they end).
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

uint64_t MpiChannel::take_seq() {
  std::lock_guard<std::mutex> lock(mu_);
  return next_seq_++;
}

std::string MpiChannel::where(const CallSignature& sig, uint64_t seq) const {
  return sig.str() + " on group " + group_.str() + " channel '" + name_ + "' seq " +
         std::to_string(seq);
}

void MpiChannel::throw_failure(const Failure& f) const {
  if (f.timeout) throw TimeoutError(f.message, __FILE__, __LINE__);
  throw Error(f.message, __FILE__, __LINE__);
}

void MpiChannel::throw_if_failed() {
  std::lock_guard<std::mutex> lock(mu_);
  if (failure_) throw_failure(*failure_);
}

void MpiChannel::fail(bool timeout, const std::string& message) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!failure_) failure_ = Failure{timeout, message};
  throw_failure(*failure_);
}

void MpiChannel::wait(std::span<MPI_Request> reqs, const std::string& what, Deadline deadline,
                      std::shared_ptr<void> keep, const std::string& detail) {
  // MPI progresses non-blocking collectives only inside MPI calls: poll, spinning briefly
  // (latency), then sleeping with a growing interval (no CPU burn while a peer is late).
  auto pause = std::chrono::microseconds(0);
  for (int polls = 0;; ++polls) {
    int done = 0;
    MOEZERO_MPI_CHECK(
        MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE));
    if (done) return;
    if (Clock::now() >= deadline) break;
    if (polls > 200) {
      pause = std::min(std::chrono::microseconds(1000), pause + std::chrono::microseconds(20));
      std::this_thread::sleep_for(pause);
    } else {
      std::this_thread::yield();
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (keep) orphans_.push_back(std::move(keep));
  }
  fail(true,
       what + ": timed out after " + std::to_string(options_.timeout.count()) + " ms" + detail);
}

std::string MpiChannel::validate(const std::vector<int64_t>& table, uint64_t seq) const {
  const size_t n = static_cast<size_t>(size());
  const size_t row_words = kHeadWords + 2 * n;
  const CallSignature ref = decode_signature(table.data());
  for (size_t r = 1; r < n; ++r) {
    const CallSignature sig = decode_signature(table.data() + r * row_words);
    if (!sig.matches(ref))
      return "collective divergence on group " + group_.str() + " channel '" + name_ + "' seq " +
             std::to_string(seq) + ": rank " + std::to_string(group_.ranks[0]) + " called " +
             ref.str() + " but rank " + std::to_string(group_.ranks[r]) + " called " + sig.str();
  }
  if (ref.op != CollectiveOp::AllToAllV) return "";
  for (size_t r = 0; r < n; ++r) {
    for (size_t p = 0; p < n; ++p) {
      const int64_t sent = table[r * row_words + kHeadWords + p];
      const int64_t expected = table[p * row_words + kHeadWords + n + r];
      if (sent != expected) {
        std::ostringstream os;
        os << "collective divergence in " << where(ref, seq) << ": rank " << group_.ranks[r]
           << " sends " << sent << " elems to rank " << group_.ranks[p] << ", which expects "
           << expected << " from it";
        return os.str();
      }
    }
  }
  return "";
}

std::vector<int64_t> MpiChannel::agree(uint64_t seq, const CallSignature& sig,
                                       std::span<const size_t> send_elems,
                                       std::span<const size_t> recv_elems, Deadline deadline) {
  throw_if_failed();
  const int n = size();
  const size_t row_words = kHeadWords + 2 * static_cast<size_t>(n);
  // The table and this rank's row live on the heap: a timed-out exchange keeps them alive.
  auto table = std::make_shared<std::vector<int64_t>>(row_words * static_cast<size_t>(n), 0);
  int64_t* mine = table->data() + static_cast<size_t>(rank_) * row_words;
  mine[0] = static_cast<int64_t>(sig.op);
  mine[1] = static_cast<int64_t>(sig.dtype);
  mine[2] = static_cast<int64_t>(sig.elems);
  mine[3] = static_cast<int64_t>(sig.reduce);
  mine[4] = sig.root;
  for (size_t p = 0; p < send_elems.size(); ++p) mine[kHeadWords + p] = int64_t(send_elems[p]);
  for (size_t p = 0; p < recv_elems.size(); ++p)
    mine[kHeadWords + size_t(n) + p] = int64_t(recv_elems[p]);
  if (n > 1) {
    const int words = static_cast<int>(row_words);
    std::vector<MPI_Request> reqs;  // receives first (by peer order), then sends
    std::vector<int> peers;
    reqs.reserve(2 * static_cast<size_t>(n));
    for (int p = 0; p < n; ++p) {
      if (p == rank_) continue;
      peers.push_back(p);
      MOEZERO_MPI_CHECK(MPI_Irecv(table->data() + size_t(p) * row_words, words, MPI_INT64_T, p,
                                  kAgreeTag, comm_, &reqs.emplace_back()));
    }
    for (int p : peers)
      MOEZERO_MPI_CHECK(
          MPI_Isend(mine, words, MPI_INT64_T, p, kAgreeTag, comm_, &reqs.emplace_back()));
    const std::string what = where(sig, seq);
    try {
      wait(reqs, what, deadline, table);
    } catch (const TimeoutError&) {
      // Name who never arrived: the peers whose signature did not come.
      std::vector<int> missing, present{group_.ranks[size_t(rank_)]};
      for (size_t i = 0; i < peers.size(); ++i) {
        int got = 0;
        MPI_Test(&reqs[i], &got, MPI_STATUS_IGNORE);
        (got ? present : missing).push_back(group_.ranks[size_t(peers[i])]);
      }
      std::sort(missing.begin(), missing.end());
      std::sort(present.begin(), present.end());
      std::lock_guard<std::mutex> lock(mu_);
      failure_->message +=
          " waiting for ranks " + rank_list(missing) + " (arrived: " + rank_list(present) + ")";
      throw_failure(*failure_);
    }
  }
  const std::string bad = validate(*table, seq);
  if (!bad.empty()) fail(false, bad);
  std::vector<int64_t> counts;
  if (sig.op == CollectiveOp::AllToAllV) {
    counts.resize(size_t(n) * size_t(n));
    for (size_t r = 0; r < size_t(n); ++r)
      for (size_t p = 0; p < size_t(n); ++p)
        counts[r * size_t(n) + p] = (*table)[r * row_words + kHeadWords + p];
  }
  return counts;
}

}  // namespace moezero::comm
