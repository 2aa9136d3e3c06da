#include "src/core/stop_signal.h"

#include <atomic>
#include <csignal>

namespace nb {

namespace {

// Lock-free, so the handler may write it (std::atomic<int> is on every platform this builds for).
std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void on_stop_signal(int signal) {
    int none = 0;
    g_stop_signal.compare_exchange_strong(none, signal);  // the first one counts
}

}  // namespace

void install_stop_signal_handlers() {
    struct sigaction action {};
    action.sa_handler = on_stop_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;  // a read or write the signal interrupts goes on
    sigaction(SIGTERM, &action, nullptr);
    sigaction(SIGUSR1, &action, nullptr);
    // A SIGINT the process was started ignoring stays ignored: a shell starts its background jobs so (`cmd &`,
    // nohup), and a Ctrl-C at the terminal is then not meant for them.
    struct sigaction interrupt {};
    if (sigaction(SIGINT, nullptr, &interrupt) == 0 && interrupt.sa_handler != SIG_IGN)
        sigaction(SIGINT, &action, nullptr);
}

int stop_signal_received() { return g_stop_signal.load(); }

void record_stop_signal(int signal) { on_stop_signal(signal); }

const char* stop_signal_name(int signal) {
    switch (signal) {
        case SIGTERM: return "SIGTERM";
        case SIGINT: return "SIGINT";
        case SIGUSR1: return "SIGUSR1";
        default: return "a signal";
    }
}

}  // namespace nb
