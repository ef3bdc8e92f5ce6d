// core/communicator.cpp — names, bus factors, link-emulation arithmetic, the trace log.
#include "core/communicator.h"

#include <cmath>

#include "core/config.h"
#include "core/error.h"

namespace moezero {

const char* collective_op_name(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::AllGather: return "all_gather";
    case CollectiveOp::ReduceScatter: return "reduce_scatter";
    case CollectiveOp::AllReduce: return "all_reduce";
    case CollectiveOp::AllToAllV: return "all_to_all_v";
    case CollectiveOp::Broadcast: return "broadcast";
    case CollectiveOp::Barrier: return "barrier";
  }
  return "?";
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
  }
  return "?";
}

double bus_factor(CollectiveOp op, int n) {
  MOEZERO_CHECK(n >= 1, "group size must be >= 1, got ", n);
  switch (op) {
    case CollectiveOp::AllGather:
    case CollectiveOp::ReduceScatter:
    case CollectiveOp::AllToAllV: return static_cast<double>(n - 1) / n;
    case CollectiveOp::AllReduce: return 2.0 * (n - 1) / n;
    case CollectiveOp::Broadcast: return 1.0;
    case CollectiveOp::Barrier: return 0.0;
  }
  return 0.0;
}

CommOptions make_comm_options(const CommEmulationConfig& emulation, const CommConfig& comm) {
  CommOptions o;
  o.timeout = std::chrono::milliseconds(static_cast<int64_t>(std::ceil(comm.timeout_s * 1e3)));
  o.emulation = CommEmulation{emulation.link_gbps,
                              emulation.latency_us,
                              static_cast<int>(emulation.ranks_per_node),
                              emulation.intra_node_gbps,
                              emulation.intra_node_latency_us,
                              static_cast<int>(emulation.nics_per_node)};
  o.call_check = comm.check_divergence ? CallCheck::On : CallCheck::Off;
  return o;
}

void CommTraceLog::add(CommRecord r) {
  std::lock_guard<std::mutex> lock(mu_);
  records_.push_back(std::move(r));
}

std::vector<CommRecord> CommTraceLog::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return records_;
}

void CommTraceLog::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  records_.clear();
}

Communicator::Communicator(ProcessGroup group, int global_rank, std::string channel)
    : group_(std::move(group)), group_rank_(0), channel_(std::move(channel)) {
  MOEZERO_CHECK(group_.size() >= 1, "communicator: group ", group_.str(), " is empty");
  group_rank_ = group_.group_rank(global_rank);
}

}  // namespace moezero
