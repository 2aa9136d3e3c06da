#include "src/ops/op_profiler.h"

#include <algorithm>
#include <stdexcept>

namespace nb {

OpProfiler::OpProfiler(OpsCore& ops) : ops_(ops) {
    if (ops.profiler_) throw std::logic_error("OpProfiler: these ops already have a profiler attached");
    ops.profiler_ = this;
}

OpProfiler::~OpProfiler() { ops_.profiler_ = nullptr; }

std::vector<OpTime> OpProfiler::report() const {
    std::vector<OpTime> out;
    for (const auto& [name, t] : times_) out.push_back(t);
    std::sort(out.begin(), out.end(), [](const OpTime& a, const OpTime& b) { return a.seconds > b.seconds; });
    return out;
}

void OpTimer::start(const char* name) {
    name_ = name;
    outermost_ = profiler_->depth_++ == 0;
    if (!outermost_) return;
    profiler_->ops_.synchronize();
    t0_ = std::chrono::steady_clock::now();
}

// Records even when the op throws (the timer's destructor runs during unwinding).
void OpTimer::stop() {
    --profiler_->depth_;
    if (!outermost_) return;
    profiler_->ops_.synchronize();
    OpTime& t = profiler_->times_[name_];
    t.name = name_;
    t.calls += 1;
    t.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

}  // namespace nb
