#include "pipeline/stage/fault_injection.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "src/core/atomic_file.h"

namespace nb {

void stall_forever() {
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

void die_by_sigkill() {
    // The wall-clock instant, for the fault tests to time how long the job takes to end after it.
    const auto now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::system_clock::now().time_since_epoch()).count();
    std::fprintf(stderr, "nobubble: test fault: SIGKILL at %lld ns\n", static_cast<long long>(now_ns));
    std::fflush(stderr);
    ::kill(::getpid(), SIGKILL);
    for (;;) ::pause();  // SIGKILL cannot be caught: not reached
}

void die_writing_half(const std::string& path, std::string_view bytes) {
    std::ofstream out(temporary_path_of(path), std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
    out.flush();
    die_by_sigkill();
}

}  // namespace nb
