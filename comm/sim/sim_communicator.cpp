// comm/sim/sim_communicator.cpp — rendezvous of the present members in virtual time, the
// modelled completion of the full group, and the values of small backed buffers.
#include "comm/sim/sim_communicator.h"

#include <algorithm>
#include <cstring>

#include "comm/local/link_emulation.h"
#include "comm/local/reduce.h"
#include "core/error.h"
#include "core/virtual_time.h"

namespace moezero::comm {

SimChannel::SimChannel(ProcessGroup group, std::vector<char> present_in_group, std::string name,
                       CommOptions options, std::shared_ptr<AbortState> abort,
                       std::shared_ptr<PortTimelines> timelines)
    : RendezvousCore(std::move(group), std::move(name), options, std::move(abort)),
      present_(std::move(present_in_group)),
      timelines_(std::move(timelines)) {
  present_index_.assign(static_cast<size_t>(group_.size()), -1);
  for (int r = 0; r < group_.size(); ++r)
    if (present_[static_cast<size_t>(r)]) {
      present_index_[static_cast<size_t>(r)] = static_cast<int>(present_gr_.size());
      present_gr_.push_back(r);
    }
  MOEZERO_CHECK(!present_gr_.empty(), "SimChannel: group ", group_.str(), " has no present rank");
  // The i-th absent member (in group order) copies present member i mod P.
  size_t absent = 0;
  for (int r = 0; r < group_.size(); ++r)
    source_.push_back(
        present_[static_cast<size_t>(r)] ? r : present_gr_[absent++ % present_gr_.size()]);
}

int SimChannel::source_of(int p) const { return source_[static_cast<size_t>(p)]; }

const HostCall& SimChannel::call_of(const Slot& slot, int r) const {
  return slot.calls[static_cast<size_t>(present_index_[static_cast<size_t>(r)])];
}

CollectiveShape SimChannel::full_shape(const Slot& slot) const {
  const HostCall& a0 = slot.calls[0];          // every present call has this signature
  if (a0.sig.op != CollectiveOp::AllToAllV) {  // what collective_shape reads: the signature
    CollectiveShape shape;
    shape.op = a0.sig.op;
    shape.ranks = group_.ranks;
    shape.size_bytes = static_cast<double>(call_size_bytes(a0, group_.size()));
    shape.root = std::max(0, a0.sig.root);
    return shape;
  }
  // collective_shape of the full group's calls, without copying them (absent r sends what
  // its source sends).
  const size_t n = static_cast<size_t>(group_.size());
  const double elem_bytes = static_cast<double>(dtype_size_bytes(a0.sig.dtype));
  CollectiveShape shape;
  shape.op = a0.sig.op;
  shape.ranks = group_.ranks;
  shape.size_bytes = static_cast<double>(call_size_bytes(a0, group_.size()));
  shape.root = std::max(0, a0.sig.root);
  shape.a2a_bytes.assign(n, std::vector<double>(n, 0.0));
  for (size_t r = 0; r < n; ++r) {
    const HostCall& c = call_of(slot, source_of(static_cast<int>(r)));
    for (size_t p = 0; p < n; ++p)
      shape.a2a_bytes[r][p] = static_cast<double>(c.send_elems[p]) * elem_bytes;
  }
  return shape;
}

Traffic SimChannel::traffic_locked(const Slot& slot) {
  const HostCall& a0 = slot.calls[0];
  if (a0.sig.op == CollectiveOp::AllToAllV) {
    // The full group's counts follow from the present members' (absent ones copy them).
    std::vector<uint64_t> key{dtype_size_bytes(a0.sig.dtype)};
    for (const HostCall& c : slot.calls)
      key.insert(key.end(), c.send_elems.begin(), c.send_elems.end());
    auto it = a2a_traffic_.find(key);
    if (it == a2a_traffic_.end()) {
      if (a2a_traffic_.size() >= kMaxA2aTraffic) a2a_traffic_.clear();
      const Traffic full = choose_traffic(timelines_->spec(), full_shape(slot), nullptr);
      it = a2a_traffic_.emplace(std::move(key), timelines_->modelled_part(full)).first;
    }
    return it->second;
  }
  const std::tuple<int, uint64_t, int> key{static_cast<int>(a0.sig.op),
                                           call_size_bytes(a0, group_.size()), a0.sig.root};
  auto it = traffic_.find(key);
  if (it == traffic_.end()) {
    if (traffic_.size() >= kMaxTraffic) traffic_.clear();
    const Traffic full = choose_traffic(timelines_->spec(), full_shape(slot), nullptr);
    it = traffic_.emplace(key, timelines_->modelled_part(full)).first;
  }
  return it->second;
}

std::string SimChannel::validate_locked(const Slot& slot, uint64_t seq) const {
  if (slot.calls[0].sig.op != CollectiveOp::AllToAllV) return "";
  std::vector<HostCall> by_rank(static_cast<size_t>(group_.size()));
  for (int r : present_gr_) by_rank[static_cast<size_t>(r)] = call_of(slot, r);
  return validate_counts(by_rank, present_gr_, seq);
}

void SimChannel::move_data(Slot& slot) const {
  const HostCall& a0 = slot.calls[0];
  const CollectiveOp op = a0.sig.op;
  if (op == CollectiveOp::Barrier) return;
  for (const HostCall& c : slot.calls)
    if (is_virtual_address(c.send) || is_virtual_address(c.recv)) return;  // unbacked: no bytes
  const int n = group_.size();
  const size_t eb = dtype_size_bytes(a0.sig.dtype);
  // Snapshot every present send first: in-place calls overwrite them.
  auto send_bytes = [&](const HostCall& c) -> size_t {
    switch (op) {
      case CollectiveOp::AllGather:
      case CollectiveOp::AllReduce:
      case CollectiveOp::Broadcast: return c.sig.elems * eb;
      case CollectiveOp::ReduceScatter: return c.sig.elems * eb * static_cast<size_t>(n);
      case CollectiveOp::AllToAllV: {
        size_t t = 0;
        for (size_t e : c.send_elems) t += e;
        return t * eb;
      }
      case CollectiveOp::Barrier: return 0;
    }
    return 0;
  };
  std::vector<std::vector<std::byte>> sends(present_gr_.size());  // by present index
  for (size_t i = 0; i < present_gr_.size(); ++i) {
    const HostCall& c = slot.calls[i];
    if (op == CollectiveOp::Broadcast && present_gr_[i] != source_of(c.sig.root)) continue;
    const size_t b = send_bytes(c);
    sends[i].resize(b);
    if (b > 0) std::memcpy(sends[i].data(), c.send, b);
  }
  auto src = [&](int p) {
    return sends[static_cast<size_t>(present_index_[static_cast<size_t>(source_of(p))])].data();
  };
  const size_t elems = a0.sig.elems;
  switch (op) {
    case CollectiveOp::AllGather:
      for (int r : present_gr_)
        for (int p = 0; p < n; ++p)
          std::memcpy(
              static_cast<std::byte*>(call_of(slot, r).recv) + static_cast<size_t>(p) * elems * eb,
              src(p), elems * eb);
      break;
    case CollectiveOp::AllReduce: {
      std::vector<std::byte> out(elems * eb);
      std::vector<const void*> in;
      for (int p = 0; p < n; ++p) in.push_back(src(p));
      if (elems > 0) reduce_elems(out.data(), in, elems, a0.sig.dtype, a0.sig.reduce);
      for (int r : present_gr_)
        if (elems > 0) std::memcpy(call_of(slot, r).recv, out.data(), out.size());
      break;
    }
    case CollectiveOp::ReduceScatter:
      for (int r : present_gr_) {
        std::vector<const void*> in;
        for (int p = 0; p < n; ++p) in.push_back(src(p) + static_cast<size_t>(r) * elems * eb);
        if (elems > 0) reduce_elems(call_of(slot, r).recv, in, elems, a0.sig.dtype, a0.sig.reduce);
      }
      break;
    case CollectiveOp::Broadcast:
      for (int r : present_gr_)
        if (elems > 0) std::memcpy(call_of(slot, r).recv, src(a0.sig.root), elems * eb);
      break;
    case CollectiveOp::AllToAllV:
      for (int r : present_gr_) {
        const HostCall& me = call_of(slot, r);
        auto* dst = static_cast<std::byte*>(me.recv);
        for (int p = 0; p < n; ++p) {
          const HostCall& q = call_of(slot, source_of(p));
          size_t offset = 0;  // where block r starts in q's send
          for (int k = 0; k < r; ++k) offset += q.send_elems[static_cast<size_t>(k)];
          const size_t want = me.recv_elems[static_cast<size_t>(p)] * eb;
          const size_t have = std::min(want, q.send_elems[static_cast<size_t>(r)] * eb);
          if (have > 0) std::memcpy(dst, src(p) + offset * eb, have);
          if (want > have) std::memset(dst + have, 0, want - have);
          dst += want;
        }
      }
      break;
    case CollectiveOp::Barrier: break;
  }
}

void SimChannel::await_locked(std::unique_lock<std::mutex>& lock, const Slot& slot,
                              const CallSignature& sig, uint64_t seq) {
  cv_.wait_for(lock, options_.timeout,
               [&] { return slot.done || failed_locked() || abort_->aborted.load(); });
  if (slot.done) return;
  throw_if_broken_locked(sig, seq);
  std::vector<char> arrived(static_cast<size_t>(group_.size()), 0);  // by group rank
  for (size_t i = 0; i < present_gr_.size(); ++i)
    arrived[static_cast<size_t>(present_gr_[i])] = slot.arrived[i];
  fail_timeout_locked(sig, seq, arrived, present_gr_, " ms (wall) waiting for present ranks ");
}

double SimChannel::run(int rank, uint64_t seq, const HostCall& call, double arrival_s) {
  const CallSignature sig = call.sig;
  std::unique_lock lock(mu_);
  throw_if_broken_locked(sig, seq);
  auto& entry = slots_[seq];
  if (!entry) entry = std::make_shared<Slot>(present_gr_.size());
  std::shared_ptr<Slot> slot = entry;
  if (slot->first_rank >= 0)
    check_signature_locked(call_of(*slot, slot->first_rank).sig, slot->first_rank, sig, rank, seq);
  else
    slot->first_rank = rank;
  const auto at = static_cast<size_t>(present_index_[static_cast<size_t>(rank)]);
  slot->calls[at] = call;
  slot->arrived[at] = 1;
  slot->start_s = std::max(slot->start_s, arrival_s);
  const int n_present = static_cast<int>(present_gr_.size());
  if (++slot->n_arrived == n_present) {
    std::string bad = validate_locked(*slot, seq);
    if (!bad.empty()) {
      fail_locked(false, std::move(bad));
      throw_failure_locked();
    }
    slot->end_s = timelines_->reserve(traffic_locked(*slot), slot->start_s);
    move_data(*slot);
    slot->done = true;
    cv_.notify_all();
  } else {
    await_locked(lock, *slot, sig, seq);
  }
  const double end = slot->end_s;
  if (++slot->n_departed == n_present) slots_.erase(seq);
  return end;
}

SimCommunicator::SimCommunicator(std::shared_ptr<SimChannel> channel, int global_rank)
    : HostCommunicator(channel->group(), global_rank, channel->name(), "SimCommunicator",
                       "(the simulated communicator runs on simulated devices)", DeviceKind::Sim),
      channel_(std::move(channel)),
      group_str_(group().str()) {}

void SimCommunicator::submit(HostCall call, Stream& stream) {
  auto* vs = dynamic_cast<VirtualStream*>(&stream);
  MOEZERO_CHECK(vs != nullptr, "SimCommunicator: stream '", stream.name(), "' of ",
                stream.device().name(), " keeps no virtual time");
  const int rank = this->rank();
  const uint64_t seq = channel_->take_seq(rank);
  CommRecord record{
      call.sig.op, group_str_, channel(), stream.name(), seq, call_size_bytes(call, size()),
      {},          {}};
  const ObservedCall observed(*this, record.op, record.bytes, stream);
  vs->enqueue_timed([ch = channel_, log = log(), rank, seq, call = std::move(call),
                     record = std::move(record), vs](double start) mutable {
    record.start = std::chrono::steady_clock::now();
    const double network_end = ch->run(rank, seq, call, start);
    // The rank's own copying and reducing of its call's bytes (a CPU rank's executor; free on
    // a GPU), from when its data is there to send: the collective ends after both.
    const double local_end = vs->reserve_local_work(start, static_cast<double>(record.bytes));
    record.end = std::chrono::steady_clock::now();
    log->add(std::move(record));
    return std::max(network_end, local_end);
  });
}

}  // namespace moezero::comm
