// Text rendering of a simulated timeline (rules in timeline_text.h).
#include "pipeline/schedule/timeline_text.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace nb {

namespace {

// "F3"; on a rank's chunk c > 0 (interleaved), "F3:c".
std::string label_of(const Action& a) {
    const std::string chunk = a.chunk > 0 ? fmt::format(":{}", a.chunk) : "";
    switch (a.type) {
        case ActionType::forward: return fmt::format("F{}{}", a.microbatch, chunk);
        case ActionType::backward:
        case ActionType::backward_input: return fmt::format("B{}{}", a.microbatch, chunk);
        case ActionType::backward_weight: return fmt::format("W{}{}", a.microbatch, chunk);
        case ActionType::optimizer_step: return fmt::format("S{}{}", a.version, chunk);
        default: return "";
    }
}

bool drawn(const TimedAction& t, const SimCosts& costs) {
    return is_compute(t.action.type) && action_cost_ms(t.action.type, costs) > 0;
}

int64_t to_column(double ms, double unit_ms) { return std::llround(ms / unit_ms); }

// The time one column stands for: the cheapest compute (forward, B, W, optimizer step with a cost), of one chunk
// where ranks hold several (the simulator gives a chunk 1/v of each cost).
double column_ms(const SimResult& result, const SimCosts& costs) {
    double unit = costs.forward_ms;
    for (double ms : {costs.backward_input_ms, costs.backward_weight_ms, costs.optimizer_ms})
        if (ms > 0) unit = std::min(unit, ms);
    int chunks = 1;
    for (const auto& stage : result.timeline)
        for (const TimedAction& t : stage) chunks = std::max(chunks, t.action.chunk + 1);
    return unit / chunks;
}

// Characters per column: the widest label of the run plus one space.
int64_t cell_width(const SimResult& result, const SimCosts& costs) {
    size_t widest = 1;
    for (const auto& stage : result.timeline)
        for (const TimedAction& t : stage)
            if (drawn(t, costs)) widest = std::max(widest, label_of(t.action).size());
    return static_cast<int64_t>(widest) + 1;
}

std::string row_name(size_t stage, size_t stages) {
    const int digits = static_cast<int>(std::to_string(stages - 1).size());
    return fmt::format("stage {:>{}}: ", stage, digits);
}

void rstrip(std::string& s) {
    while (!s.empty() && s.back() == ' ') s.pop_back();
}

// A ruler over the grid: the time in ms at every 10th column.
std::string ruler(size_t stages, int64_t columns, int64_t width, double unit_ms) {
    std::string line(static_cast<size_t>(columns * width), ' ');
    for (int64_t c = 0; c < columns; c += 10) {
        const std::string tick = fmt::format("{:g}", static_cast<double>(c) * unit_ms);
        line.replace(static_cast<size_t>(c * width), std::min(tick.size(), line.size() - c * width), tick);
    }
    std::string name = row_name(0, stages);
    std::string out = fmt::format("{:<{}}{}", "ms", name.size(), line);
    rstrip(out);
    return out;
}

// One stage's row of the grid.
std::string grid_row(const std::vector<TimedAction>& timeline, const SimCosts& costs, double unit, int64_t columns,
                     int64_t width) {
    std::string row(static_cast<size_t>(columns * width), ' ');
    for (int64_t c = 0; c < columns; ++c) row[c * width] = '.';
    for (const TimedAction& t : timeline) {
        if (t.action.type == ActionType::optimizer_step && !drawn(t, costs)) {
            const int64_t c = to_column(t.end_ms, unit);
            if (c > 0 && c <= columns) row[c * width - 1] = '|';
            continue;
        }
        if (!drawn(t, costs)) continue;
        const int64_t c0 = std::min(to_column(t.start_ms, unit), columns - 1);
        const int64_t c1 = std::min(std::max(c0 + 1, to_column(t.end_ms, unit)), columns);
        const std::string label = label_of(t.action);
        const size_t span = static_cast<size_t>((c1 - c0) * width);
        const char fill = c1 - c0 > 1 ? '-' : ' ';
        std::string text = label + std::string(span - 1 - label.size(), fill) + " ";
        row.replace(static_cast<size_t>(c0 * width), span, text);
    }
    rstrip(row);
    return row;
}

// One stage's occupancy bar: busy share of each of `width` equal slices of [0, makespan).
std::string occupancy_row(const std::vector<TimedAction>& timeline, const SimCosts& costs, double makespan,
                          int width) {
    std::vector<double> busy(static_cast<size_t>(width), 0.0);
    const double slice = makespan / width;
    for (const TimedAction& t : timeline) {
        if (!drawn(t, costs)) continue;
        int64_t b = std::min<int64_t>(static_cast<int64_t>(t.start_ms / slice), width - 1);
        for (; b < width && b * slice < t.end_ms; ++b) {
            const double lo = std::max(t.start_ms, b * slice), hi = std::min(t.end_ms, (b + 1) * slice);
            if (hi > lo) busy[b] += hi - lo;
        }
    }
    std::string row;
    for (double ms : busy) row += ms >= 0.75 * slice ? '#' : ms >= 0.25 * slice ? '+' : '.';
    return row;
}

}  // namespace

std::string render_timeline(const SimResult& result, const SimCosts& costs, const TimelineTextOptions& options) {
    const size_t stages = result.timeline.size();
    if (stages == 0 || result.makespan_ms <= 0) return "timeline: empty\n";
    if (stages > static_cast<size_t>(options.max_rows))
        return fmt::format("timeline: {} stages are too many to draw (at most {}); per-stage numbers below\n",
                           stages, options.max_rows);
    std::string out;
    const int64_t width = cell_width(result, costs);
    const double unit = column_ms(result, costs);
    const int64_t columns = std::max<int64_t>(1, std::llround(std::ceil(result.makespan_ms / unit)));
    if (columns * width <= options.max_width_chars) {
        out += fmt::format(
            "timeline: one column = {:g} ms; F<mb> forward, B<mb> backward (zb-h1, zb-v: its input half), W<mb> its weight "
            "half, S<v> optimizer step (makes version v), "
            "--- the same action continued, | optimizer step of no cost, . idle\n",
            unit);
        out += ruler(stages, columns, width, unit) + "\n";
        for (size_t s = 0; s < stages; ++s)
            out += row_name(s, stages) + grid_row(result.timeline[s], costs, unit, columns, width) + "\n";
        return out;
    }
    out += fmt::format(
        "timeline: {:g} ms is too long to draw by column; one character = {:g} ms: # busy >= 3/4, + >= 1/4, "
        ". less\n",
        result.makespan_ms, result.makespan_ms / options.summary_width);
    for (size_t s = 0; s < stages; ++s)
        out += row_name(s, stages) +
               occupancy_row(result.timeline[s], costs, result.makespan_ms, options.summary_width) + "\n";
    return out;
}

}  // namespace nb
