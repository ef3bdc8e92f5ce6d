// tools/selfcheck_comm.h — the collective part of `moezero selfcheck`.
#pragma once

#include <functional>
#include <string>

namespace moezero::cli {

using CheckLine = std::function<void(const std::string& what, bool ok, const std::string& detail)>;

// Runs every collective of the Communicator interface on `ranks` ranks-as-threads with inputs
// whose results are exact, and reports one line per collective.
void check_collectives(int ranks, const CheckLine& report);

}  // namespace moezero::cli
