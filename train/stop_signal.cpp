// train/stop_signal.cpp — the SIGTERM / SIGINT handlers (stop_signal.h).
#include "train/stop_signal.h"

#include <signal.h>
#include <unistd.h>

#include <cstring>

namespace moezero::train {

namespace {
std::atomic<int> g_stop{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free flag");

void on_signal(int sig) {
  int expected = 0;
  if (g_stop.compare_exchange_strong(expected, sig)) {
    const char msg[] =
        "\nmoezero: stop requested: finishing the current step on every rank (and saving a "
        "checkpoint when train.save_dir is set); signal again to abort at once\n";
    [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, msg, sizeof msg - 1);
    return;
  }
  const char msg[] = "\nmoezero: second signal: aborting now (no checkpoint)\n";
  [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, msg, sizeof msg - 1);
  ::_exit(128 + sig);
}
}  // namespace

std::atomic<int>& stop_signal_flag() { return g_stop; }

void install_stop_handlers() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    default: return "a signal";
  }
}

}  // namespace moezero::train
