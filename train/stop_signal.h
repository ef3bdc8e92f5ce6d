// train/stop_signal.h — SIGTERM / SIGINT stop a run cleanly (`moezero train`).
//
// The first signal sets a flag; the trainer reads it once per step on every rank and agrees on
// it through the step's counters exchange (rank_session_step.cpp), so every rank finishes the same
// optimizer step, saves a checkpoint when train.save_dir is set, and the run ends with
// TrainResult::stopped_by_signal. A second signal ends the process at once (exit status
// 128 + signal, as a default-handled signal would). `moezero train` then exits with
// kExitStopped after printing the command that resumes the run.
#pragma once

#include <atomic>

namespace moezero::train {

// Exit status of `moezero train` stopped by SIGTERM / SIGINT after a completed step (distinct
// from 0: finished, 1: failed, 2: usage).
constexpr int kExitStopped = 3;

// The flag the handlers set: 0, or the number of the first signal received.
std::atomic<int>& stop_signal_flag();
// Installs the SIGTERM and SIGINT handlers (idempotent).
void install_stop_handlers();
// "SIGTERM", "SIGINT", or "signal N".
const char* signal_name(int sig);

}  // namespace moezero::train
