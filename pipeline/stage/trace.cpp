#include "pipeline/stage/trace.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>

#include <fmt/format.h>

#include "src/core/atomic_file.h"
#include "src/core/error.h"
#include "src/core/metrics_writer.h"

namespace nb {

void TraceRecorder::append(const std::vector<TraceEvent>& events) {
    events_.insert(events_.end(), events.begin(), events.end());
}

double TraceRecorder::total_us(int stage, const std::string& category) const {
    double total = 0;
    for (const auto& e : events_)
        if (e.stage == stage && e.category == category) total += e.duration_us;
    return total;
}

namespace {

// Names and categories are ours (no tabs or newlines); this keeps serialisation a plain split.
std::string clean(const std::string& s) {
    std::string out = s;
    for (char& c : out)
        if (c == '\t' || c == '\n') c = ' ';
    return out;
}

}  // namespace

std::string TraceRecorder::serialize() const {
    std::string out;
    for (const auto& e : events_)
        out += fmt::format("{}\t{}\t{}\t{:.3f}\t{:.3f}\t{}\t{}\n", clean(e.name), clean(e.category), e.stage, e.start_us,
                           e.duration_us, e.microbatch, e.version);
    return out;
}

std::vector<TraceEvent> TraceRecorder::deserialize(const std::string& text) {
    std::vector<TraceEvent> events;
    std::istringstream lines(text);
    std::string line;
    while (std::getline(lines, line)) {
        if (line.empty()) continue;
        std::vector<std::string> f;
        size_t start = 0;
        for (size_t tab; (tab = line.find('\t', start)) != std::string::npos; start = tab + 1)
            f.push_back(line.substr(start, tab - start));
        f.push_back(line.substr(start));
        if (f.size() != 7) throw std::invalid_argument("trace: malformed event line '" + line + "'");
        events.push_back({f[0], f[1], std::stoi(f[2]), std::stod(f[3]), std::stod(f[4]), std::stoll(f[5]),
                          std::stoll(f[6])});
    }
    return events;
}

namespace {

// The viewer's colour of each compute category ("cname": one of the Chrome trace viewer's named colours, which
// Perfetto honours too), so that F, B, W and steps stand apart; the rest keep the viewer's colour by name.
std::string colour_field(const std::string& category) {
    const char* cname = category == "forward"     ? "thread_state_running"   // green
                        : category == "backward"  ? "thread_state_runnable"  // blue
                        : category == "weight"    ? "rail_animation"         // violet
                        : category == "optimizer" ? "yellow"
                                                  : nullptr;
    return cname ? fmt::format(R"("cname": "{}", )", cname) : std::string();
}

}  // namespace

std::string TraceRecorder::to_chrome_json(int num_stages) const {
    std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
    bool first = true;
    auto emit = [&](const std::string& line) {
        out += first ? "  " : ",\n  ";
        out += line;
        first = false;
    };
    for (int s = 0; s < num_stages; ++s) {
        emit(fmt::format(R"({{"ph": "M", "pid": {0}, "name": "process_name", "args": {{"name": "stage {0}"}}}})", s));
        emit(fmt::format(R"({{"ph": "M", "pid": {0}, "name": "process_sort_index", "args": {{"sort_index": {0}}}}})", s));
    }
    for (const auto& e : events_) {
        std::string args = "{";
        if (e.microbatch >= 0) args += fmt::format("\"microbatch\": {}", e.microbatch);
        if (e.version >= 0) args += fmt::format("{}\"version\": {}", args.size() > 1 ? ", " : "", e.version);
        for (const auto& [key, value] : e.numbers)
            args += fmt::format("{}{}: {}", args.size() > 1 ? ", " : "", json_quote(key), value);
        args += "}";
        emit(fmt::format(R"({{"ph": "X", "pid": {}, "tid": 0, "name": {}, "cat": {}, "ts": {:.3f}, "dur": {:.3f}, {}"args": {}}})",
                         e.stage, json_quote(e.name), json_quote(e.category), e.start_us, e.duration_us,
                         colour_field(e.category), args));
    }
    out += "\n]}\n";
    return out;
}

void TraceRecorder::write_chrome_json(const std::string& path, int num_stages) const {
    try {
        write_file_atomically(path, to_chrome_json(num_stages));
    } catch (const RuntimeError& e) {
        throw RuntimeError(fmt::format("--trace '{}': {}", path, e.what()));
    }
}

}  // namespace nb
