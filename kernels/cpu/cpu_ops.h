// kernels/cpu/cpu_ops.h — the CPU implementation of the op table (core/ops.h).
#pragma once

#include <memory>

#include "core/ops.h"

namespace moezero::cpu {

// One instance per CpuDevice. Every op enqueues its work on the (CPU) stream it is given.
std::unique_ptr<Ops> make_cpu_ops();

}  // namespace moezero::cpu
