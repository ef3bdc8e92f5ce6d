// kernels/cpu/cpu_ops.cpp — CpuOps: the CPU op table. Validation is done by the public methods
// of Ops (core/ops.cpp); each do_* forwards to the op family's file (cpu_gemm.cpp,
// cpu_elementwise.cpp, cpu_norm.cpp, cpu_attention.cpp, cpu_softmax.cpp, cpu_optim.cpp,
// cpu_moe.cpp, cpu_quant.cpp), which enqueues the work on the stream as a host task.
#include "kernels/cpu/cpu_ops.h"

#include "kernels/cpu/cpu_common.h"

namespace moezero::cpu {
namespace {

// Every do_<op> forwards to cpu::<op> (cpu_common.h), generated from the op list.
class CpuOps final : public Ops {
 protected:
#define MOEZERO_OP(name, params, args) \
  void do_##name params override { cpu::name args; }
#include "core/ops.def"
};

}  // namespace

std::unique_ptr<Ops> make_cpu_ops() { return std::make_unique<CpuOps>(); }

}  // namespace moezero::cpu
