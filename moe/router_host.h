// moe/router_host.h — the host-side parts of the router (moe/router.h): the jitter noise key and
// value, and the capacity decision. Private to moe/router.cpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace moezero::moe::router_host {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

inline uint64_t token_key(uint64_t seed, int layer, int64_t micro_batch, int64_t token) {
  uint64_t h = splitmix64(seed);
  h = splitmix64(h ^ static_cast<uint64_t>(layer));
  h = splitmix64(h ^ static_cast<uint64_t>(micro_batch));
  return splitmix64(h ^ static_cast<uint64_t>(token));
}

inline double noise_of(uint64_t token_key, int64_t channel, double eps) {
  const uint64_t h = splitmix64(token_key ^ static_cast<uint64_t>(channel));
  const double u = static_cast<double>(h >> 11) * 0x1.0p-53;  // [0, 1)
  return 1.0 - eps + 2.0 * eps * u;
}

// The capacity decision (host): per expert, keep the `cap` assignments of highest probability
// (equal probabilities: the lower token index). ids, probs, w: (N*k) before dropping.
struct Drops {
  std::vector<int32_t> kept_ids;  // (N*k), -1 dropped
  std::vector<float> w;           // (N*k), 0 dropped
  std::vector<float> keep;        // (N*k): 1 kept, 0 dropped
  std::vector<float> kept;        // (E) kept assignments per expert
};
inline Drops drop_over_capacity(const std::vector<int32_t>& ids, const std::vector<float>& probs,
                                std::vector<float> w, int64_t k, int64_t E, int64_t cap) {
  const int64_t nk = static_cast<int64_t>(ids.size());
  Drops d{ids, std::move(w), std::vector<float>(static_cast<size_t>(nk)),
          std::vector<float>(static_cast<size_t>(E))};
  std::vector<std::vector<int64_t>> by_expert(static_cast<size_t>(E));
  for (int64_t a = 0; a < nk; ++a) by_expert[ids[a]].push_back(a);  // a = t*k + j: t ascending
  for (int64_t e = 0; e < E; ++e) {
    std::vector<int64_t>& as = by_expert[e];
    std::stable_sort(as.begin(), as.end(),
                     [&](int64_t a, int64_t b) { return probs[a] > probs[b]; });
    const int64_t kept = std::min<int64_t>(cap, static_cast<int64_t>(as.size()));
    for (int64_t i = kept; i < static_cast<int64_t>(as.size()); ++i) {
      d.kept_ids[as[i]] = -1;
      d.w[as[i]] = 0.0f;
    }
    d.kept[e] = static_cast<float>(kept);
  }
  for (int64_t a = 0; a < nk; ++a)
    if (d.kept_ids[a] != -1) d.keep[a] = 1.0f;
  return d;
}

}  // namespace moezero::moe::router_host
