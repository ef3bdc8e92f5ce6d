// zero/fetch_value.cpp — the fetch coordinator's side of the shard cache's value policy
// (shard_cache.eviction=value): the inputs of prefetch/budget_planner.h's keep_density for each
// resident expert, refreshed before every admission, and the freeing of entries no use is left
// for (the "re-gather" decision). Every input is agreed state: the frequency model's probability
// (set_keep_score), the step's micro-batch index, the group's acquires, Needed hints and
// gradient requests in it (the same calls on every rank of its sharding group), its sizes, the
// codec and the configured link (PrefetchPlanner::costs); no timings.
//
// A group's next use (budget_planner.h NextUse): Backward when it was used (acquired, used
// held, or declared Needed) in this micro-batch and its gradient was not asked for yet;
// otherwise a forward: this micro-batch's still counts until its layer's routing is known (a
// Needed hint naming any group of that layer) or the clock is past it, then only the later
// micro-batches' do. The step clock (budget_planner.h StepClock): the layer of the latest
// acquire or Needed hint in this micro-batch, in backward once a gradient was asked for in it.
// Evaluation passes (forward only, no set_keep_score) may leave a group marked used in the
// next step's first micro-batch; set_keep_score (the training routing) clears the mark.
#include <algorithm>

#include "prefetch/budget_planner.h"
#include "zero/fetch_coordinator.h"

namespace moezero {

using zero_detail::GroupState;

bool FetchCoordinator::values_keep() const {
  return cache_ && cache_->score_kind() == KeepScore::Density;
}

prefetch::StepClock FetchCoordinator::step_clock() const {
  prefetch::StepClock c;
  c.layers = layers_;
  c.micro_batches = std::max<int64_t>(1, m_.options.micro_batches_per_step);
  c.micro_batch = std::clamp<int64_t>(m_.micro_batch, 0, c.micro_batches - 1);
  const int64_t now = m_.pass();
  const int layer = cur_layer_pass_ == now ? cur_layer_ : 0;
  c.phase = m_.backward_pass == now ? 2 * layers_ - 1 - layer : layer;
  return c;
}

void FetchCoordinator::note_layer(int layer) {
  if (layer < 0) return;  // embedding, head
  cur_layer_ = layer;
  cur_layer_pass_ = m_.pass();
}

double FetchCoordinator::keep_value(int g) const {
  const GroupState& st = group(g);
  const int64_t now = m_.pass();
  const DType dt = m_.options.compute_dtype;
  const prefetch::StepClock clock = step_clock();
  prefetch::KeepInputs in;
  in.p = std::clamp(st.keep_score, 0.0, 1.0);
  in.layer = std::clamp(st.layout.spec().layer, 0, layers_ - 1);
  const bool used = st.used_pass == now;
  in.next = used && st.grad_pass != now ? prefetch::NextUse::Backward : prefetch::NextUse::Forward;
  in.forward_done = used || st.routed_pass == now || clock.phase > in.layer;
  in.bytes = st.full_bytes(dt);
  in.wire_bytes = codec_->wire_shape(st.shard_elems, dt).bytes() * static_cast<uint64_t>(st.n);
  return prefetch::keep_density(in, clock, planner_->costs());
}

void FetchCoordinator::refresh_values() {
  std::vector<int> worthless;  // group order: the same on every rank
  for (size_t i = 0; i < m_.groups.size(); ++i) {
    const int g = static_cast<int>(i);
    const GroupState& st = *m_.groups[i];
    if (!st.expert || !cache_->contains(g)) continue;
    const double v = keep_value(g);
    if (v == 0.0 && st.state != State::HeldFull)  // HeldFull: pinned, in use
      worthless.push_back(g);
    else
      cache_->set_score(g, v);
  }
  for (int g : worthless) {
    cache_->evict(g);
    trace_cache("evict", g);
    drop_resident(g, Secondary::Skip);  // no use left in the step: no re-gather to speed up
    m_.counters.cache_evictions += 1;
  }
  if (!worthless.empty() && m_.tracing())
    m_.trace->counter("cache_bytes", cache_->counters().bytes_resident);
}

void FetchCoordinator::note_needed(std::span<const int> ids, ParamProvider::FetchReason reason) {
  if (reason != ParamProvider::FetchReason::Needed || !values_keep()) return;
  const int64_t now = m_.pass();
  std::vector<int> layers;
  for (int g : ids) {
    GroupState& st = group(g);
    if (!st.expert) continue;
    st.used_pass = now;
    layers.push_back(st.layout.spec().layer);
  }
  if (layers.empty()) return;
  note_layer(layers.back());
  for (auto& p : m_.groups)
    if (p->expert &&
        std::find(layers.begin(), layers.end(), p->layout.spec().layer) != layers.end())
      p->routed_pass = now;
  refresh_values();  // frees what this layer's routing left without a use in the step
}

}  // namespace moezero
