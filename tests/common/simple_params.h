// tests/common/simple_params.h — a test-only ParamProvider: every group's full parameters and
// gradients in plain device buffers of one device, no sharding, no communication.
//
// It is strict about the protocol so that model tests catch what ZeRO-3 would punish:
// - acquire(g) uploads the group's master values (a host f32 copy) in the compute dtype;
//   release(g) poisons the buffer with NaN, so a use after release shows up as a NaN loss.
//   Acquiring an acquired group, or releasing one that is not, throws.
// - grad(g) opens the group's working gradient (zeroed when it was not open); grad_ready(g)
//   adds it into the group's accumulated gradient (what tests read) and poisons the working
//   buffer with NaN, so a write after grad_ready is lost (and caught by a gradient check).
//   grad_ready of a group that is not open throws.
// - Every call is logged (calls()) for order checks.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/param_group.h"
#include "core/tensor.h"

namespace moezero::test {

class SimpleParams final : public ParamProvider {
 public:
  enum class Call : uint8_t { Acquire, Release, Grad, GradReady };
  struct Event {
    Call call;
    int group;
    bool operator==(const Event&) const = default;
  };

  // [in] groups: the model's groups (index = position); [in] compute: f32 or bf16;
  // [in] seed: parameter values are a pure function of (seed, spec order).
  SimpleParams(Device& dev, Stream& s, const std::vector<GroupSpec>& groups, DType compute,
               uint64_t seed)
      : dev_(dev), s_(s), compute_(compute) {
    std::mt19937_64 rng(seed);
    for (const GroupSpec& spec : groups) {
      layouts_.emplace_back(spec);
      const GroupLayout& lay = layouts_.back();
      std::vector<float> host(static_cast<size_t>(lay.numel()), 0.0f);
      for (size_t i = 0; i < lay.param_count(); ++i) {
        const ParamSpec& p = spec.params[i];
        std::normal_distribution<double> normal(0.0, p.init_std);
        for (int64_t j = 0; j < p.shape.numel(); ++j) {
          float v = 0.0f;
          if (p.init == ParamInit::Normal) v = static_cast<float>(normal(rng));
          if (p.init == ParamInit::Ones) v = 1.0f;
          host[static_cast<size_t>(lay.offset(i) + j)] = v;
        }
      }
      const Shape flat{lay.numel()};
      full_.emplace_back(dev, compute, flat, MemTag::FullParam, s, "simple.full");
      work_.emplace_back(dev, DType::F32, flat, MemTag::Grad, s, "simple.grad");
      accum_.emplace_back(dev, DType::F32, flat, MemTag::Grad, s, "simple.accum");
      staging_.emplace_back();
      master_.push_back(std::move(host));
      acquired_.push_back(false);
      open_.push_back(false);
    }
    for (int g = 0; g < group_count(); ++g) set_params_host(g, master_[static_cast<size_t>(g)]);
    zero_grads();
  }

  // ---- ParamProvider --------------------------------------------------------------------
  int group_count() const override { return static_cast<int>(layouts_.size()); }
  const GroupLayout& layout(int g) const override { return layouts_.at(static_cast<size_t>(g)); }
  DType compute_dtype() const override { return compute_; }

  Tensor acquire(int g, Stream& compute) override {
    check_stream(compute);
    log(Call::Acquire, g);
    MOEZERO_CHECK(!acquired_.at(static_cast<size_t>(g)), "SimpleParams: group ", g,
                  " acquired twice");
    acquired_[static_cast<size_t>(g)] = true;
    const std::vector<uint8_t>& bytes = staging_[static_cast<size_t>(g)];
    dev_.memcpy_async(full(g).data(), bytes.data(), bytes.size(), s_);
    return full(g);
  }
  void release(int g, Stream& compute) override {
    check_stream(compute);
    log(Call::Release, g);
    MOEZERO_CHECK(acquired_.at(static_cast<size_t>(g)), "SimpleParams: group ", g,
                  " released but not acquired");
    acquired_[static_cast<size_t>(g)] = false;
    dev_.ops().fill(s_, full(g), std::numeric_limits<double>::quiet_NaN());
  }
  Tensor grad(int g, Stream& compute) override {
    check_stream(compute);
    log(Call::Grad, g);
    if (!open_.at(static_cast<size_t>(g))) {
      dev_.ops().fill(s_, work(g), 0.0);
      open_[static_cast<size_t>(g)] = true;
    }
    return work(g);
  }
  void grad_ready(int g, Stream& compute) override {
    check_stream(compute);
    log(Call::GradReady, g);
    MOEZERO_CHECK(open_.at(static_cast<size_t>(g)), "SimpleParams: grad_ready(", g,
                  ") without grad()");
    open_[static_cast<size_t>(g)] = false;
    dev_.ops().axpy(s_, 1.0f, work(g), accum_[static_cast<size_t>(g)]);
    dev_.ops().fill(s_, work(g), std::numeric_limits<double>::quiet_NaN());
  }

  // ---- test helpers (each synchronises the stream) ---------------------------------------
  // Master values of group g, f32 (layout numel).
  const std::vector<float>& params_host(int g) const { return master_.at(static_cast<size_t>(g)); }
  void set_params_host(int g, const std::vector<float>& values) {
    s_.synchronize();  // an in-flight acquire may still read the staging copy
    const size_t n = static_cast<size_t>(layout(g).numel());
    MOEZERO_CHECK(values.size() == n, "set_params_host: ", values.size(), " values for ", n);
    master_[static_cast<size_t>(g)] = values;
    std::vector<uint8_t>& bytes = staging_[static_cast<size_t>(g)];
    bytes.assign(n * dtype_size_bytes(compute_), 0);
    for (size_t i = 0; i < n; ++i) {
      if (compute_ == DType::F32) {
        std::memcpy(&bytes[i * 4], &values[i], 4);
      } else {
        const bf16 h = float_to_bf16(values[i]);
        std::memcpy(&bytes[i * 2], &h, 2);
      }
    }
  }
  // Accumulated gradient of group g, f32 (layout numel).
  std::vector<float> grads_host(int g) {
    const Tensor t = accum_.at(static_cast<size_t>(g));
    std::vector<float> v(static_cast<size_t>(t.numel()));
    dev_.memcpy_async(v.data(), t.data(), t.size_bytes(), s_);
    s_.synchronize();
    return v;
  }
  void zero_grads() {
    for (auto& a : accum_) dev_.ops().fill(s_, a, 0.0);
    s_.synchronize();
  }
  const std::vector<Event>& calls() const { return calls_; }
  void clear_calls() { calls_.clear(); }
  bool any_acquired() const {
    for (bool a : acquired_)
      if (a) return true;
    return false;
  }

 private:
  const Tensor& full(int g) const { return full_.at(static_cast<size_t>(g)).view(); }
  const Tensor& work(int g) const { return work_.at(static_cast<size_t>(g)).view(); }
  void check_stream(Stream& compute) const {
    MOEZERO_CHECK(&compute == &s_, "SimpleParams: called with stream '", compute.name(),
                  "' but built for '", s_.name(), "'");
  }
  void log(Call c, int g) {
    MOEZERO_CHECK(g >= 0 && g < group_count(), "SimpleParams: group ", g, " out of range");
    calls_.push_back(Event{c, g});
  }

  Device& dev_;
  Stream& s_;
  DType compute_;
  std::vector<GroupLayout> layouts_;
  std::vector<std::vector<float>> master_;     // f32 host master values per group
  std::vector<std::vector<uint8_t>> staging_;  // compute-dtype bytes uploaded by acquire
  std::vector<TensorBuffer> full_, work_, accum_;
  std::vector<bool> acquired_, open_;
  std::vector<Event> calls_;
};

}  // namespace moezero::test
