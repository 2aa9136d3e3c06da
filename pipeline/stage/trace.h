// A timeline of what every stage did, written as a Chrome / Perfetto trace (chrome://tracing, ui.perfetto.dev).
//
// Each stage records complete events (forward, backward, send, receive, wait, optimizer step) with wall-clock
// start and duration in microseconds since the run's common origin. Stage s is track s (process "stage s"),
// so the file opens as one row per stage. Under MPI each rank records its own events; rank 0 gathers the
// serialised events and writes the file.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace nb {

struct TraceEvent {
    std::string name;      // e.g. "F12", "B3", "send act 4", "wait", "step 2"
    std::string category;  // forward | backward | weight | send | recv | wait | optimizer | eval | moe
    int stage = 0;
    double start_us = 0;
    double duration_us = 0;
    int64_t microbatch = -1;  // -1 when not about one microbatch
    int64_t version = -1;     // weight version used or produced, -1 when none
    // Further args, after microbatch and version (an MoE dispatch's layer and load). serialize() leaves them out.
    std::vector<std::pair<std::string, double>> numbers = {};
};

class TraceRecorder {
public:
    void add(TraceEvent event) { events_.push_back(std::move(event)); }
    const std::vector<TraceEvent>& events() const { return events_; }
    void append(const std::vector<TraceEvent>& events);

    // Per-category total duration in microseconds for one stage (for busy / bubble figures).
    double total_us(int stage, const std::string& category) const;

    // One line per event, tab-separated: for sending a rank's events to rank 0 and reading them back.
    std::string serialize() const;
    static std::vector<TraceEvent> deserialize(const std::string& text);

    // The Chrome trace JSON ({"traceEvents": [...]}) with one named track per stage.
    std::string to_chrome_json(int num_stages) const;
    // Writes to_chrome_json to `path` atomically (a temporary file, then rename). RuntimeError naming the path.
    void write_chrome_json(const std::string& path, int num_stages) const;

private:
    std::vector<TraceEvent> events_;
};

}  // namespace nb
