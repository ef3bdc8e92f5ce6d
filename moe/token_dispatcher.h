// moe/token_dispatcher.h — moves token rows between this rank and the owners of their experts
// (the expert-parallel, EP, group) and back, as Megatron-Core's token dispatcher does. Each
// round is three named steps; only the `exchange` steps communicate, and they do so on the a2a
// stream (MoeComms::a2a_stream, else the compute stream) with the EP communicator only. Preprocess
// and postprocess never communicate.
//
//   dispatch, counts  preprocess   count(): per-expert histogram of the kept assignments
//                     exchange     exchange_counts(): all-to-all of the per-peer counts
//                     postprocess  plan(): the row layout, from the host copies of the counts
//                                  (host only, after the layer's one host sync)
//   dispatch, rows    preprocess   dispatch(): stable sort by expert, gather rows
//                     exchange     dispatch(): all_to_all_v of the rows to the expert owners
//                     postprocess  none: rows arrive laid out [source peer][local expert], and
//                                  DispatchState::for_each_block walks one expert's blocks
//   combine           exchange     combine(): all_to_all_v of the expert outputs back
//                     postprocess  combine(): out = Σ_j w_j · y_j (combine_rows)
// Backward runs the same steps in reverse: combine_backward() (weighted-combine backward, then
// the exchange to the owners) and dispatch_backward() (the exchange back, then gather_rows'
// backward, an unweighted combine).
//
// N = this rank's tokens, k = top_k, E experts, ep = EP width, Epr = E / ep local experts,
// P = this rank's kept assignments (rows sent), R = rows received for the local experts.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "layers/module.h"
#include "moe/moe_runtime.h"

namespace moezero::moe {

// The token counts of one micro-batch: dispatch preprocess and count exchange.
struct DispatchCounts {
  TensorBuffer local;  // i32 (E): this rank's kept assignments per expert
  TensorBuffer recv;   // i32 (ep, Epr): assignments EP peer q sends to local expert j
  // Host copies (download_counts); valid once the compute stream has been synchronised.
  std::vector<int32_t> h_local, h_recv;
};

// The token layout of one micro-batch, from dispatch to the end of dispatch_backward.
struct DispatchState {
  int ep = 1, experts_per_rank = 1;
  TensorBuffer perm, inv_perm, offsets;       // i32 (N*k), (N*k), (E+1): sort_by_expert
  int64_t kept = 0;                           // P
  int64_t received = 0;                       // R
  std::vector<int64_t> send_rows, recv_rows;  // per EP peer
  std::vector<int64_t> block_rows;            // (ep, Epr): rows from peer q for local expert j
  TensorBuffer ys;                            // (P, C) expert outputs back in this rank's order
  Tensor weights;                             // f32 (N, k) combine weights (the router's state)

  // f(row, n) for each non-empty block of rows received for local expert j: the received
  // rows are laid out [source peer q][local expert jj], so expert j's rows are one block per peer.
  template <typename F>
  void for_each_block(int j, F&& f) const {
    int64_t row = 0;
    for (int q = 0; q < ep; ++q)
      for (int jj = 0; jj < experts_per_rank; ++jj) {
        const int64_t n = block_rows[static_cast<size_t>(q * experts_per_rank + jj)];
        if (jj == j && n > 0) f(row, n);
        row += n;
      }
  }
  // Rows received for local expert j (all peers).
  int64_t rows_of(int j) const {
    int64_t rows = 0;
    for_each_block(j, [&](int64_t, int64_t n) { rows += n; });
    return rows;
  }
};

class TokenDispatcher {
 public:
  // [in] comms: the EP layout, communicator and a2a stream; [in] report: the statistics sink and
  // the trace (both copied); [in] d_model: C; num_experts: E (a multiple of comms.ep_size);
  // top_k: k.
  TokenDispatcher(const MoeComms& comms, const MoeReporting& report, int64_t d_model,
                  int num_experts, int top_k);

  // --- dispatch ---
  // Preprocess: [in] expert_ids i32 (N*k), -1 dropped; [out] counts.local (allocated here).
  DispatchCounts count(const layers::ModuleContext& ctx, const Tensor& expert_ids) const;
  // Exchange: counts.recv (allocated here) from every EP peer (a copy when ep == 1).
  void exchange_counts(const layers::ModuleContext& ctx, DispatchCounts& counts);
  // Enqueues the copies of both counts to the host on the compute stream; no sync.
  void download_counts(const layers::ModuleContext& ctx, DispatchCounts& counts) const;
  // Postprocess (host): the row layout from the host counts. Also adds the forward traffic per
  // expert to report.stats (a2a_tokens_in/out of MoE layer moe_index) when ep > 1.
  DispatchState plan(const DispatchCounts& counts, int moe_index) const;
  // Preprocess and exchange: sorts the assignments by expert into st.perm/inv_perm/offsets,
  // gathers the rows of x (N, C) and sends them to the expert owners.
  // [out] returns the received rows (R, C), laid out [source peer][local expert].
  TensorBuffer dispatch(const layers::ModuleContext& ctx, const Tensor& x, const Tensor& expert_ids,
                        DispatchState& st);

  // --- combine ---
  // Exchange and postprocess: [in] y (R, C) expert outputs (reset here once sent);
  // [in] weights f32 (N, k), kept in st for backward; [out] out (N, C) `=` Σ_j w_j · y_j.
  void combine(const layers::ModuleContext& ctx, TensorBuffer& y, const Tensor& weights,
               DispatchState& st, const Tensor& out);

  // --- backward ---
  // Combine backward: [in] dout (N, C); [out] dweights f32 (N, k) `=` (allocated here);
  // returns dy (R, C) at the expert owners. Frees st.ys.
  TensorBuffer combine_backward(const layers::ModuleContext& ctx, const Tensor& dout,
                                DispatchState& st, TensorBuffer& dweights);
  // Dispatch backward: [in] dx (R, C) (reset here once sent); returns dx of the tokens (N, C).
  TensorBuffer dispatch_backward(const layers::ModuleContext& ctx, TensorBuffer& dx,
                                 DispatchState& st);

 private:
  // all_to_all_v of rows (C wide) with per-peer row counts. At ep_size 1 send and recv (same
  // shape) swap buffers: the caller drops send afterwards.
  void exchange(const layers::ModuleContext& ctx, TensorBuffer& send,
                const std::vector<int64_t>& send_rows, TensorBuffer& recv,
                const std::vector<int64_t>& recv_rows);
  // Runs call(stream) on the a2a stream ordered by events after the compute stream's writes of
  // `send` and before its reads of `recv` (both buffers recorded as used by that stream; the
  // compute stream's wait is timed when tracing).
  void on_a2a_stream(const layers::ModuleContext& ctx, TensorBuffer& send, TensorBuffer& recv,
                     const std::function<void(Stream&)>& call);

  MoeComms comms_;
  MoeReporting report_;
  int64_t C_;
  int E_, k_, experts_per_rank_;
};

}  // namespace moezero::moe
