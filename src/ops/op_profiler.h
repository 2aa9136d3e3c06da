// Op profiling: where a training step spends its time, op by op, on either backend (`bench ... --profile`).
//
// Every op definition of a backend starts with an OpTimer (as llm.c brackets its kernels with NVTX ranges):
//
//     void CpuOps::linear_forward(Tensor& y, const Tensor& x, const Tensor& w) {
//         const OpTimer timer(*this, "linear_forward");
//         ...
//
// With no profiler attached (always, outside `bench --profile`) the timer is one null check. While an OpProfiler
// is attached to the ops, each op is bracketed by synchronize(), so on a GPU the time is the op's own and not
// overlapped with others; the totals therefore add up to slightly more than an unprofiled step. Only the outermost
// op is recorded: an op that calls other ops of its backend counts as itself alone.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "src/ops/ops.h"

namespace nb {

struct OpTime {
    std::string name;
    int64_t calls = 0;
    double seconds = 0;
};

// Records the ops of `ops` for as long as it lives (one profiler per Ops at a time).
class OpProfiler {
public:
    explicit OpProfiler(OpsCore& ops);
    ~OpProfiler();
    OpProfiler(const OpProfiler&) = delete;
    OpProfiler& operator=(const OpProfiler&) = delete;

    // Ops sorted by total time, largest first.
    std::vector<OpTime> report() const;
    void reset() { times_.clear(); }

private:
    friend class OpTimer;
    OpsCore& ops_;
    std::map<std::string, OpTime> times_;
    int depth_ = 0;  // ops running now: only the outermost one is timed
};

// Times the op it is declared in (see the top of this file). `name` must outlive the timer (a literal).
class OpTimer {
public:
    OpTimer(OpsCore& ops, const char* name) : profiler_(ops.profiler()) {
        if (profiler_) start(name);
    }
    ~OpTimer() {
        if (profiler_) stop();
    }
    OpTimer(const OpTimer&) = delete;
    OpTimer& operator=(const OpTimer&) = delete;

private:
    void start(const char* name);
    void stop();

    OpProfiler* profiler_;
    const char* name_ = nullptr;
    bool outermost_ = false;
    std::chrono::steady_clock::time_point t0_;
};

}  // namespace nb
