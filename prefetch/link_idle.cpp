// prefetch/link_idle.cpp — agreed_free_link_ns (see link_idle.h).
#include "prefetch/link_idle.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace moezero::prefetch {

double agreed_free_link_ns(std::span<const double> idle_ms, int64_t windows) {
  MOEZERO_CHECK(windows >= 0, "agreed_free_link_ns: ", windows, " windows");
  if (windows == 0 || idle_ms.empty()) return 0.0;
  double least = 0.0;
  for (size_t r = 0; r < idle_ms.size(); ++r) {
    MOEZERO_CHECK(std::isfinite(idle_ms[r]) && idle_ms[r] >= 0.0, "agreed_free_link_ns: rank ", r,
                  " idle ", idle_ms[r], " ms");
    least = r == 0 ? idle_ms[r] : std::min(least, idle_ms[r]);
  }
  return least / double(windows) * 1e6;
}

}  // namespace moezero::prefetch
