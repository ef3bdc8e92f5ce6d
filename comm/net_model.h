// comm/net_model.h — the cost model of the network: which bytes a collective puts on which
// link, and when it completes while other collectives share those links.
//
// Pure host code, no clock and no threads: times are model seconds given by the caller. The
// LocalCommunicator's emulated link (comm/local/emulated_network.h) maps them to wall time; a
// discrete-event simulator can drive the same object with its own clock.
//
// Assumptions (what the model says about a network):
// - Every rank has one NIC, full duplex: its send side and its receive side each run at
//   link_gbps, independently. With ranks_per_node > 0, ranks r and p are on one node when
//   r / ranks_per_node == p / ranks_per_node; traffic between them uses a second, faster tier
//   (NVLink-like: its own full-duplex port per rank at intra_node_gbps), traffic between nodes
//   the NIC. A bandwidth of 0 means that tier costs no bandwidth time (latency only).
// - A port is shared by every stream and communicator of its rank: the flows active on it get
//   equal shares of its bandwidth (processor sharing, not FIFO), recomputed whenever a flow
//   starts or completes.
// - Collectives move the bytes of NCCL's algorithms. Ring all-gather / reduce-scatter over a
//   gathered size S: each rank sends (n-1)/n * S to its ring successor and receives as much from
//   its predecessor, n-1 latency steps. Ring all-reduce: 2(n-1)/n * S, 2(n-1) steps.
//   Broadcast (pipelined chain from the root): every rank but the last sends S, every rank but
//   the root receives S, n-1 steps. All-to-all(v): every rank's own send and receive volumes to
//   and from its peers (self excluded), on the tier of each peer, 1 step. Barrier: 1 step, no
//   bytes. The ring is the group's ranks in group order.
// - The flows of a collective progress independently; the collective completes when the last of
//   them has, plus its latency steps (each step costs the latency of the slowest tier the
//   collective uses). A ring spanning nodes is therefore as slow as its NIC hops, its slowest;
//   its fast hops finish early rather than being throttled to the ring's pace (they free their
//   port sooner than a real ring would).
// - No congestion inside the switch, no protocol overheads, no chunking or pipelining effects
//   beyond the above.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <vector>

#include "core/communicator.h"

namespace moezero::comm {

enum class Tier : uint8_t { IntraNode, InterNode };
enum class Direction : uint8_t { Send, Recv };

// Bytes one rank has sent by tier, as collective_traffic routes each collective's algorithm
// (its Send flows): with ranks_per_node > 0, bytes to a rank of its own node are
// intra_node_bytes and bytes to another node inter_node_bytes; with one tier (ranks_per_node =
// 0: every rank its own node) every byte is inter_node_bytes and intra_node_bytes stays 0.
struct LinkBytes {
  uint64_t intra_node_bytes = 0;
  uint64_t inter_node_bytes = 0;
};

// One rank's bytes on one port (rank, tier, direction).
struct Flow {
  int rank = 0;  // global rank
  Tier tier = Tier::InterNode;
  Direction dir = Direction::Send;
  double bytes = 0.0;
};

// What one collective puts on the network.
struct Traffic {
  std::vector<Flow> flows;  // zero-byte flows are allowed (they finish at once)
  double latency_s = 0.0;   // added after the last flow completes
};

// One collective as the cost model sees it. [in] ranks: the group's global ranks, in group
// order. size_bytes: nccl-tests size (CommRecord::bytes) for ring ops; a2a_bytes[r][p]: bytes
// group rank r sends to group rank p (all_to_all_v only). root: group rank (broadcast).
struct CollectiveShape {
  CollectiveOp op = CollectiveOp::Barrier;
  std::vector<int> ranks;
  double size_bytes = 0.0;
  int root = 0;
  std::vector<std::vector<double>> a2a_bytes;
};

// The tier between two global ranks under `spec`.
Tier tier_between(const CommEmulation& spec, int a, int b);

// The flows and latency of `shape` under the algorithms above.
Traffic collective_traffic(const CommEmulation& spec, const CollectiveShape& shape);

// Processor-shared ports, event-driven. Times are model seconds, non-decreasing across calls.
class NetworkModel {
 public:
  using Id = uint64_t;
  static constexpr double kNever = std::numeric_limits<double>::infinity();

  explicit NetworkModel(CommEmulation spec) : spec_(spec) {}
  const CommEmulation& spec() const { return spec_; }

  // Advances to `now_s`, then starts `traffic`. Returns its id, valid until release(id).
  Id start(double now_s, const Traffic& traffic);
  // Completes every flow that finishes by `now_s` (in order, re-sharing the ports each time).
  void advance_to(double now_s);
  // When the next active flow completes if nothing new starts; kNever when none is active.
  double next_flow_completion() const;

  // True once every flow of `id` has completed (as of the last advance).
  bool finished(Id id) const;
  // The collective's completion time: last flow + latency. Only when finished(id).
  double completion_s(Id id) const;
  // When `id` would complete if nothing new started: exact when finished.
  double projected_completion_s(Id id) const;
  // When `id` started.
  double start_s(Id id) const;
  // Forgets a finished collective.
  void release(Id id);

  double now_s() const { return now_s_; }
  size_t active_flows() const { return flows_.size(); }

 private:
  struct ActiveFlow {
    Id owner;
    int port;
    double remaining_bytes;
  };
  struct Collective {
    double start_s = 0.0;
    double latency_s = 0.0;
    int open_flows = 0;
    double last_flow_end_s = 0.0;
  };
  int port_index(const Flow& f) const;
  double port_bytes_per_s(int port) const;  // 0: unlimited
  // Rate of every active flow under equal sharing (kNever-like infinity for unlimited ports).
  std::vector<double> rates() const;
  // Moves time forward by at most `until_s`, completing the flows that finish first.
  bool step(double until_s);

  CommEmulation spec_;
  double now_s_ = 0.0;
  Id next_id_ = 1;
  std::vector<ActiveFlow> flows_;
  std::map<Id, Collective> collectives_;
};

}  // namespace moezero::comm
