#include "ddp/stop_signal.h"

#include <signal.h>

#include <initializer_list>

namespace ddp {
namespace {

volatile sig_atomic_t g_signal = 0;

void on_signal(int sig) { g_signal = sig; }

}  // namespace

void install_stop_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGTERM, SIGINT, SIGUSR1}) ::sigaction(sig, &sa, nullptr);
}

bool stop_requested() { return g_signal != 0; }

int stop_signal() { return g_signal; }

const char* stop_reason() {
  switch (g_signal) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGUSR1: return "SIGUSR1";
    default: return "a signal to another rank";
  }
}

}  // namespace ddp
