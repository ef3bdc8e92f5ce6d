// prefetch/link_idle.h — the link's idle time that speculative expert gathers may take, as a
// value every rank agrees on (issue 27, part 2 item 4; DESIGN.md's rule: a decision that leads
// to a collective is a pure function of agreed state).
//
// Each rank measures, per step, the time its link had no collective in flight inside its
// speculation windows: from a MoE layer's plan (before its attention block) to its router's
// output, the time in which a speculative gather can run without delaying a needed one. The
// speculative gathers themselves are left out of that measure (they are what would fill it):
// it is the idle time the link would have had without speculating, so speculating does not
// switch itself off the next step (StepTiming::idle_link_ms, core/trace.h). The step's
// statistics all-gather hands every rank every rank's value; this function turns them into the
// free link time per plan of the next step, the same on every rank whatever its own clock said.
#pragma once

#include <cstdint>
#include <span>

namespace moezero::prefetch {

// The free link time per plan for the next step, in ns.
// [in] idle_ms: every rank's idle link time in its windows this step (rank order, ms).
// [in] windows: speculation windows per rank in the step (MoE layers x micro-batches: config).
// [out] min over ranks of idle / windows, x 1e6: a gather is a collective, free only where
//      every rank of its group has the time. 0 when windows is 0 or no rank is given.
// Throws moezero::Error on a negative or non-finite time, or negative windows.
double agreed_free_link_ns(std::span<const double> idle_ms, int64_t windows);

}  // namespace moezero::prefetch
