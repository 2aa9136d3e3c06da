#include "src/run/watchdog.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace nb {

Watchdog::Watchdog(double limit_s, Clock::time_point now) : limit_s_(limit_s), last_look_(now) {}

void Watchdog::progressed(Clock::time_point now) {
    waited_s_ = 0;
    last_look_ = now;
}

bool Watchdog::idle(Clock::time_point now) {
    const auto gap = now - last_look_;
    last_look_ = now;
    if (gap <= kLongestGap) waited_s_ += std::chrono::duration<double>(gap).count();
    return limit_s_ > 0 && waited_s_ >= limit_s_;
}

std::chrono::milliseconds Watchdog::wait_limit() const {
    if (limit_s_ <= 0) return kLongestWait;
    // Rounded up, so that the wait that times out ends at or after the moment the watchdog fires.
    const double left_ms = std::ceil((limit_s_ - waited_s_) * 1000);
    return std::chrono::milliseconds(
        static_cast<int64_t>(std::clamp(left_ms, 0.0, static_cast<double>(kLongestWait.count()))));
}

std::string rank_waits_for(const std::vector<std::unique_ptr<StageRunner>>& runners,
                           const ProgressCollector* collector) {
    std::vector<std::string> waits;
    for (const auto& r : runners)
        if (!r->done())
            waits.push_back(runners.size() > 1 ? fmt::format("stage {}: {}", r->stage(), r->next_task())
                                               : r->next_task());
    if (waits.empty() && collector) return fmt::format("{} (stage 0's progress collector)", collector->waiting_for());
    if (waits.empty()) return "done";
    return fmt::format("{}", fmt::join(waits, "; "));
}

std::string watchdog_message(const std::string& rank, double limit_s, const std::string& waits_for) {
    return fmt::format("watchdog: {} made no progress for {:g} s; it waits for {}", rank, limit_s, waits_for);
}

}  // namespace nb
