// zero/zero_engine.cpp — ZeroEngine: the ParamProvider calls (fetching is the FetchCoordinator's,
// fetch_coordinator.h) and the gradient side: accumulation, checks and reduction buckets. The
// optimizer step and parameter initialisation live in zero_step.cpp.
#include <algorithm>

#include "core/error.h"
#include "core/ops.h"
#include "core/trace.h"
#include "zero/int8_codec.h"
#include "zero/zero_engine_impl.h"

namespace moezero {

using zero_detail::GroupState;

namespace {

// The gathers' wire format: the options' own codec, else zero.quantized_weights' int8 blocks,
// else null (the identity).
std::shared_ptr<const GatherCodec> gather_codec_of(const ZeroOptions& o) {
  if (o.gather_codec) return o.gather_codec;
  if (o.zero.quantized_weights) return std::make_shared<BlockInt8Codec>(o.zero.quantization_block);
  return nullptr;
}

}  // namespace

ZeroOptions ZeroOptions::of(const Config& c) {
  ZeroOptions o;
  o.zero = c.zero;
  o.compute_dtype = c.train.dtype;
  o.micro_batches_per_step = c.train.grad_accum_steps;
  o.seed = static_cast<uint64_t>(c.train.seed);
  o.check_finite = c.profile.check_finite;
  return o;
}

ZeroEngine::ZeroEngine(Device& device, EngineStreams streams, std::vector<GroupSpec> groups,
                       const std::function<GroupComms(const GroupSpec&)>& comms_of,
                       Communicator& world_misc, ZeroOptions options,
                       std::unique_ptr<ResidencyCache> expert_cache,
                       prefetch::PrefetchPlanner* planner)
    : impl_(std::make_unique<Impl>(device, streams, world_misc, options, std::move(expert_cache),
                                   planner)),
      options_(options) {
  MOEZERO_CHECK(options.stage() >= 0 && options.stage() <= 3, "zero stage must be 0..3, got ",
                options.stage());
  MOEZERO_CHECK(options.compute_dtype == DType::F32 || options.compute_dtype == DType::BF16,
                "compute dtype must be f32 or bf16, got ", dtype_name(options.compute_dtype));
  MOEZERO_CHECK(streams.compute && streams.gather && streams.reduce,
                "ZeroEngine needs compute, gather and reduce streams");
  for (auto& spec : groups) {
    GroupComms comms = comms_of(spec);
    MOEZERO_CHECK(comms.gather && comms.reduce, "group '", spec.name, "' has no communicators");
    impl_->add_group(std::move(spec), comms);
  }
  impl_->initialise();
}

ZeroEngine::~ZeroEngine() = default;

int ZeroEngine::group_count() const { return static_cast<int>(impl_->groups.size()); }
const GroupLayout& ZeroEngine::layout(int group) const { return impl_->group(group).layout; }
EngineCounters ZeroEngine::counters() const { return impl_->counters; }
GroupCounters ZeroEngine::group_counters(int group) const {
  impl_->group(group);  // range check
  return impl_->group_counters[static_cast<size_t>(group)];
}
void ZeroEngine::set_trace(TraceRecorder* trace) { impl_->trace = trace; }
int64_t ZeroEngine::step_count() const { return impl_->step; }

// ParamProvider: fetching is the coordinator's, gradients the engine's.
Tensor ZeroEngine::acquire(int group, Stream& compute) {
  return impl_->fetch.acquire(group, compute);
}
void ZeroEngine::release(int group, Stream&) { impl_->fetch.release(group); }
Tensor ZeroEngine::grad(int group, Stream& compute) { return impl_->grad(group, compute); }
void ZeroEngine::grad_ready(int group, Stream& compute) { impl_->grad_ready(group, compute); }
void ZeroEngine::prefetch(int group, Stream&, FetchReason reason) {
  impl_->fetch.prefetch(group, reason);
}
void ZeroEngine::prefetch_block(std::span<const int> groups, Stream&, FetchReason reason) {
  impl_->fetch.prefetch_block(groups, reason);
}
void ZeroEngine::prefetch_set(std::span<const int> groups, Stream&, FetchReason reason) {
  impl_->fetch.prefetch_set(groups, reason);
}
void ZeroEngine::discard_prefetch(int group) { impl_->fetch.discard_prefetch(group); }
void ZeroEngine::set_keep_score(int group, double score) {
  impl_->fetch.set_keep_score(group, score);
}
uint64_t ZeroEngine::fetch_ticket(int group) const { return impl_->fetch.fetch_ticket(group); }
bool ZeroEngine::cached(int group) const { return impl_->fetch.cached(group); }
bool ZeroEngine::needs_fetch(int group) const { return impl_->fetch.needs_fetch(group); }
bool ZeroEngine::may_hold(int group) const { return impl_->fetch.may_hold(group); }
void ZeroEngine::use_held(int group) { impl_->fetch.use_held(group); }
void ZeroEngine::hold(int group) { impl_->fetch.hold(group); }
void ZeroEngine::finish_backward() {
  impl_->flush_buckets();
  impl_->micro_batch += 1;
}
StepResult ZeroEngine::step(const AdamWHyper& hyper) { return impl_->optimizer_step(hyper); }
std::vector<float> ZeroEngine::full_params_host(int group) {
  return impl_->full_params_host(group);
}

void ZeroEngine::set_full_params_host(int group, std::span<const float> values) {
  impl_->set_full_params_host(group, values);
}

ZeroEngine::Impl::Impl(Device& d, EngineStreams s, Communicator& misc, ZeroOptions o,
                       std::unique_ptr<ResidencyCache> expert_cache,
                       prefetch::PrefetchPlanner* planner)
    : EngineShared(d, s, std::move(o)),
      world_misc(misc),
      fetch(*this, std::move(expert_cache), gather_codec_of(options), planner) {
  reduce_done = device.create_event();
}

// ---- Impl: gradients --------------------------------------------------------------------

Tensor ZeroEngine::Impl::grad(int g, Stream& compute) {
  GroupState& st = group(g);
  st.grad_pass = backward_pass = pass();  // its backward (the shard cache's value policy)
  if (st.grad_direct) return st.grad_acc.view();
  if (!st.grad_full && reduced_alone(st) && !st.grads_deferred && micro_batch == 0 &&
      options.compute_dtype == DType::F32) {
    // One rank, fp32, first micro-batch: the accumulator is zero (filled at the last step), so
    // accumulating into it gives the bits of 0 + grad_full, with no buffer, fill or axpy.
    st.grad_direct = true;
    return st.grad_acc.view();
  }
  if (!st.grad_full) {
    st.grad_full = TensorBuffer(device, DType::F32, Shape{st.padded}, MemTag::Grad, compute,
                                st.layout.spec().name.c_str());
    device.ops().fill(compute, st.grad_full, 0.0);
  }
  return st.grad_full.view();
}

void ZeroEngine::Impl::grad_ready(int g, Stream& compute) {
  GroupState& st = group(g);
  MOEZERO_CHECK(st.grad_direct || static_cast<bool>(st.grad_full), "grad_ready of group '",
                st.layout.spec().name, "' without grad() in this backward pass");
  check_gradient(g, compute);  // hook and non-finite scan, before anything reads it
  if (st.grad_direct) {        // already where the reduction would put it (grad())
    st.grad_direct = false;
    return;
  }
  if (st.grads_deferred && micro_batch + 1 < options.micro_batches_per_step) {
    accumulate_local(g, compute);
    return;
  }
  if (st.grad_local) {  // stage 1, last micro-batch: this rank's sum of the whole step
    device.ops().axpy(compute, 1.0f, st.grad_local, st.grad_full);
    st.grad_local.reset();
  }
  enqueue_reduction(g);
}

void ZeroEngine::Impl::accumulate_local(int g, Stream& compute) {
  GroupState& st = group(g);
  if (!st.grad_local && options.grad_accum_dtype() == DType::F32) {
    st.grad_local = std::move(st.grad_full);  // the first micro-batch's gradient is the sum
    st.grad_full.reset();                     // a moved-from TensorBuffer keeps its view
    return;
  }
  if (!st.grad_local) {  // the sum in the compute dtype: the first gradient, rounded
    st.grad_local = TensorBuffer(device, options.grad_accum_dtype(), Shape{st.padded}, MemTag::Grad,
                                 compute, st.layout.spec().name.c_str());
    device.ops().cast(compute, st.grad_full, st.grad_local);
    st.grad_full.reset();
    return;
  }
  device.ops().axpy(compute, 1.0f, st.grad_full, st.grad_local);
  st.grad_full.reset();
}

void ZeroEngine::Impl::enqueue_reduction(int g) {
  GroupState& st = group(g);
  // One bucket per reduce communicator: a bucket's composition (hence the size of its
  // collective) must be a function of that communicator's groups only, never of how other
  // groups (experts of other EDP groups) interleave on this rank.
  st.grad_full.buffer().record_stream(*streams.reduce);
  Bucket& b = buckets[comm_key(st.comms.reduce)];
  b.groups.push_back(g);
  b.bytes += static_cast<uint64_t>(st.padded) * dtype_size_bytes(options.compute_dtype);
  if (b.bytes >= options.zero.reduce_bucket_size) flush_bucket(b);
}

void ZeroEngine::Impl::reduce_local_leftovers() {
  // Group order: the same on every rank of each reduce communicator.
  for (size_t i = 0; i < groups.size(); ++i) {
    GroupState& st = *groups[i];
    if (!st.grad_local) continue;
    st.grad_full = std::move(st.grad_local);
    st.grad_local.reset();  // a moved-from TensorBuffer keeps its view
    enqueue_reduction(static_cast<int>(i));
  }
}

void ZeroEngine::Impl::check_gradient(int g, Stream& compute) {
  GroupState& st = group(g);
  if (options.grad_hook)
    options.grad_hook(
        GradReadyInfo{g, &st.layout, st.grad_now(), &compute, step_calls, micro_batch});
  if (!options.check_finite) return;
  // One i64 (3) result per check, in chunks that live as long as the engine; read at the step.
  const auto k = static_cast<int64_t>(checks.size());
  const auto chunk = static_cast<size_t>(k / kChecksPerChunk);
  if (chunk == check_chunks.size())
    check_chunks.emplace_back(device, DType::I64, Shape{kChecksPerChunk, 3}, MemTag::Other, compute,
                              "non-finite checks");
  // Scanned at the step, and only if the global norm is non-finite, when the step's gradient
  // accumulator will hold exactly this gradient: one rank and one micro-batch, with the
  // gradient accumulated in place (fp32) or copied into the zero accumulator (flush_bucket: in
  // bf16, rounded: NaN and infinities keep their places; an fp32 value that overflows bf16
  // becomes an infinity the optimizer would see, and is reported as one). grad_direct is the
  // fp32 case.
  if (reduced_alone(st) && !st.grads_deferred && options.micro_batches_per_step == 1) {
    checks.push_back({g, micro_batch, true});
    return;
  }
  device.ops().find_nonfinite(
      compute, st.grad_now(),
      check_chunks[chunk].view().view_elems((k % kChecksPerChunk) * 3, Shape{3}));
  checks.push_back({g, micro_batch});
}

void ZeroEngine::Impl::flush_buckets() {
  for (auto& [key, b] : buckets) flush_bucket(b);  // key order: the same on every rank
}

namespace {
// "grads layers.3.experts.5 +2": the first group of a gradient bucket and how many follow.
std::string bucket_label(const std::string& first, size_t groups) {
  return "grads " + first + (groups > 1 ? " +" + std::to_string(groups - 1) : std::string());
}
}  // namespace

void ZeroEngine::Impl::flush_bucket(Bucket& b) {
  if (b.groups.empty()) return;
  const std::vector<int>& bucket = b.groups;
  Ops& ops = device.ops();
  Stream& rs = *streams.reduce;
  auto ready = device.create_event();
  ready->record(*streams.compute);         // every grad write of the bucket is before this point
  rs.wait(*ready);                         // the wait holds what it needs; the event may go
  const DType dt = options.compute_dtype;  // gradients travel in the compute dtype
  const GroupState& first = group(bucket.front());
  const int n = first.n;
  Communicator* comm = first.comms.reduce;

  const bool acc_zero = micro_batch == 0 && !first.grads_deferred;  // since the last step
  if (reduced_alone(first) && (dt == DType::F32 || acc_zero)) {
    // One rank: the sum over the group is this gradient; no bucket copy, no collective. The
    // same bits as the paths below: their copies are exact and the accumulation is this axpy
    // (fp32), or, into a zero accumulator, 0 + round(grad) = round(grad) (bf16).
    for (int g : bucket) {
      GroupState& st = group(g);
      if (dt == DType::F32)
        ops.axpy(rs, 1.0f, st.grad_full, st.grad_acc);
      else
        ops.cast(rs, st.grad_full, st.grad_acc);
    }
  } else if (first.grads_sharded && (n > 1 || options.zero.shard_single_rank)) {
    int64_t cols = 0;
    for (int g : bucket) cols += group(g).shard_elems;
    TensorBuffer send(device, dt, Shape{n * cols}, MemTag::CommBuffer, rs, "reduce bucket");
    TensorBuffer recv(device, dt, Shape{cols}, MemTag::CommBuffer, rs, "reduce bucket");
    const std::optional<TwoHopReduce>& hop = first.two_hop;  // rows permuted for two hops
    int64_t c = 0;
    for (int g : bucket) {  // layout (n, cols): rank r's part of every group, side by side
      GroupState& st = group(g);
      for (int r = 0; r < n; ++r)
        ops.cast(
            rs, st.grad_full.view().view_elems(r * st.shard_elems, Shape{st.shard_elems}),
            send.view().view_elems((hop ? hop->send_row(r) : r) * cols + c, Shape{st.shard_elems}));
      c += st.shard_elems;
    }
    if (tracing())
      trace->label_next_collective(bucket_label(first.layout.spec().name, bucket.size()));
    if (hop) {
      counters.reduce_wire_bytes += hop->reduce_scatter(device, rs, send.view(), recv.view());
    } else {
      comm->reduce_scatter(send.view().data(), recv.view().data(), static_cast<size_t>(cols), dt,
                           ReduceOp::Sum, rs);
      counters.reduce_wire_bytes += static_cast<uint64_t>(n - 1) * recv.view().size_bytes();
    }
    counters.reduce_scattered_bytes += send.view().size_bytes();
    c = 0;
    for (int g : bucket) {
      GroupState& st = group(g);
      ops.axpy(rs, 1.0f, recv.view().view_elems(c, Shape{st.shard_elems}), st.grad_acc);
      c += st.shard_elems;
    }
  } else {
    int64_t total = 0;
    for (int g : bucket) total += group(g).padded;
    TensorBuffer buf(device, dt, Shape{total}, MemTag::CommBuffer, rs, "all-reduce bucket");
    int64_t c = 0;
    for (int g : bucket) {
      GroupState& st = group(g);
      ops.cast(rs, st.grad_full, buf.view().view_elems(c, Shape{st.padded}));
      c += st.padded;
    }
    if (n > 1) {
      if (tracing())
        trace->label_next_collective(bucket_label(first.layout.spec().name, bucket.size()));
      comm->all_reduce(buf.view().data(), buf.view().data(), static_cast<size_t>(total), dt,
                       ReduceOp::Sum, rs);
      counters.all_reduced_bytes += buf.view().size_bytes();
    }
    c = 0;
    for (int g : bucket) {
      GroupState& st = group(g);
      ops.axpy(rs, 1.0f, buf.view().view_elems(c, Shape{st.padded}), st.grad_acc);
      c += st.padded;
    }
  }
  for (int g : bucket) group(g).grad_full.reset();  // freed once the reduce stream passes
  reduce_done->record(rs);
  reduce_recorded = true;
  b.groups.clear();
  b.bytes = 0;
}

}  // namespace moezero
