// kernels/cpu/cpu_ops.cpp — CpuOps: the CPU op table. Validation is done by the public methods
// of Ops (core/ops.cpp); each do_* forwards to the op family's file (cpu_gemm.cpp,
// cpu_elementwise.cpp, cpu_norm.cpp, cpu_attention.cpp, cpu_softmax.cpp, cpu_optim.cpp,
// cpu_moe.cpp), which enqueues the work on the stream as a host task.
#include "kernels/cpu/cpu_ops.h"

#include "kernels/cpu/cpu_common.h"

namespace moezero::cpu {
namespace {

class CpuOps final : public Ops {
 protected:
  void do_gemm(Stream& s, const GemmArgs& args) override { cpu::gemm(s, args); }
  void do_grouped_gemm(Stream& s, std::span<const GemmProblem> problems, Transpose trans_a,
                       Transpose trans_b, float alpha, float beta) override {
    cpu::grouped_gemm(s, problems, trans_a, trans_b, alpha, beta);
  }
  void do_add(Stream& s, const Tensor& a, const Tensor& b, const Tensor& out) override {
    cpu::add(s, a, b, out);
  }
  void do_scale(Stream& s, const Tensor& x, float alpha) override { cpu::scale(s, x, alpha); }
  void do_axpy(Stream& s, float alpha, const Tensor& x, const Tensor& y) override {
    cpu::axpy(s, alpha, x, y);
  }
  void do_fill(Stream& s, const Tensor& x, double value) override { cpu::fill(s, x, value); }
  void do_cast(Stream& s, const Tensor& src, const Tensor& dst) override { cpu::cast(s, src, dst); }
  void do_sum_squares(Stream& s, const Tensor& x, const Tensor& out) override {
    cpu::sum_squares(s, x, out);
  }
  void do_find_nonfinite(Stream& s, const Tensor& x, const Tensor& result) override {
    cpu::find_nonfinite(s, x, result);
  }
  void do_embedding_forward(Stream& s, const Tensor& ids, const Tensor& table,
                            const Tensor& out) override {
    cpu::embedding_forward(s, ids, table, out);
  }
  void do_embedding_backward(Stream& s, const Tensor& ids, const Tensor& dout,
                             const Tensor& dtable) override {
    cpu::embedding_backward(s, ids, dout, dtable);
  }
  void do_rmsnorm_forward(Stream& s, const Tensor& x, const Tensor& w, float eps, const Tensor& out,
                          const Tensor& rstd) override {
    cpu::rmsnorm_forward(s, x, w, eps, out, rstd);
  }
  void do_rmsnorm_backward(Stream& s, const Tensor& dout, const Tensor& x, const Tensor& w,
                           const Tensor& rstd, const Tensor& dx, const Tensor& dw) override {
    cpu::rmsnorm_backward(s, dout, x, w, rstd, dx, dw);
  }
  void do_rope(Stream& s, const Tensor& x, const Tensor& positions, float base, RopeDirection dir,
               const Tensor& out) override {
    cpu::rope(s, x, positions, base, dir, out);
  }
  void do_attention_forward(Stream& s, const Tensor& q, const Tensor& k, const Tensor& v,
                            const Tensor& out, const Tensor& lse) override {
    cpu::attention_forward(s, q, k, v, out, lse);
  }
  void do_attention_backward(Stream& s, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& out, const Tensor& lse, const Tensor& dout,
                             const Tensor& dq, const Tensor& dk, const Tensor& dv) override {
    cpu::attention_backward(s, q, k, v, out, lse, dout, dq, dk, dv);
  }
  void do_swiglu_forward(Stream& s, const Tensor& gate, const Tensor& up,
                         const Tensor& out) override {
    cpu::swiglu_forward(s, gate, up, out);
  }
  void do_swiglu_backward(Stream& s, const Tensor& gate, const Tensor& up, const Tensor& dout,
                          const Tensor& dgate, const Tensor& dup) override {
    cpu::swiglu_backward(s, gate, up, dout, dgate, dup);
  }
  void do_softmax_forward(Stream& s, const Tensor& x, const Tensor& out) override {
    cpu::softmax_forward(s, x, out);
  }
  void do_softmax_backward(Stream& s, const Tensor& y, const Tensor& dy,
                           const Tensor& dx) override {
    cpu::softmax_backward(s, y, dy, dx);
  }
  void do_topk(Stream& s, const Tensor& x, int k, const Tensor& values,
               const Tensor& indices) override {
    cpu::topk(s, x, k, values, indices);
  }
  void do_cross_entropy_forward(Stream& s, const Tensor& logits, const Tensor& targets,
                                const Tensor& losses) override {
    cpu::cross_entropy_forward(s, logits, targets, losses);
  }
  void do_cross_entropy_backward(Stream& s, const Tensor& logits, const Tensor& targets,
                                 const Tensor& dlosses, const Tensor& dlogits) override {
    cpu::cross_entropy_backward(s, logits, targets, dlosses, dlogits);
  }
  void do_adamw(Stream& s, const AdamWArgs& args) override { cpu::adamw(s, args); }
  void do_expert_histogram(Stream& s, const Tensor& expert_ids, int num_experts,
                           const Tensor& counts) override {
    cpu::expert_histogram(s, expert_ids, num_experts, counts);
  }
  void do_sort_by_expert(Stream& s, const Tensor& expert_ids, int num_experts, const Tensor& perm,
                         const Tensor& inv_perm, const Tensor& offsets) override {
    cpu::sort_by_expert(s, expert_ids, num_experts, perm, inv_perm, offsets);
  }
  void do_gather_rows(Stream& s, const Tensor& x, const Tensor& perm, int k,
                      const Tensor& out) override {
    cpu::gather_rows(s, x, perm, k, out);
  }
  void do_combine_rows(Stream& s, const Tensor& y, const Tensor& inv_perm, const Tensor& weights,
                       int k, const Tensor& out) override {
    cpu::combine_rows(s, y, inv_perm, weights, k, out);
  }
  void do_combine_rows_backward(Stream& s, const Tensor& dout, const Tensor& y, const Tensor& perm,
                                const Tensor& inv_perm, const Tensor& weights, int k,
                                const Tensor& dy, const Tensor& dweights) override {
    cpu::combine_rows_backward(s, dout, y, perm, inv_perm, weights, k, dy, dweights);
  }
};

}  // namespace

std::unique_ptr<Ops> make_cpu_ops() { return std::make_unique<CpuOps>(); }

}  // namespace moezero::cpu
