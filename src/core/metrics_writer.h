// MetricsWriter: `--metrics FILE.jsonl`, one JSON object per line.
//
// Generic on purpose: a MetricsRecord is an ordered list of (key, value) with value an int64, a double, a
// string or an array of doubles (one per pipeline stage, say), so the trainer decides the fields and this file never changes with them. Each line is flushed as it is
// written, so a crashed or killed run leaves every finished step readable (`tail -f` works too).
//
// Numbers: doubles are written in the shortest form that reads back to the same double (fmt's "{}"); NaN and
// infinities, which JSON cannot express, are written as null. Strings are JSON-escaped (quote, backslash,
// control characters); other bytes, UTF-8 included, pass through unchanged.
#pragma once

#include <concepts>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace nb {

using MetricsValue = std::variant<int64_t, double, std::string, std::vector<double>>;

struct MetricsRecord {
    std::vector<std::pair<std::string, MetricsValue>> fields;  // written in this order

    // Any integer type (not bool): stored as int64.
    template <std::integral I>
        requires(!std::same_as<I, bool>)
    MetricsRecord& add(std::string key, I value) {
        fields.emplace_back(std::move(key), static_cast<int64_t>(value));
        return *this;
    }
    MetricsRecord& add(std::string key, double value) {
        fields.emplace_back(std::move(key), value);
        return *this;
    }
    MetricsRecord& add(std::string key, std::string value) {
        fields.emplace_back(std::move(key), std::move(value));
        return *this;
    }
    MetricsRecord& add(std::string key, const char* value) { return add(std::move(key), std::string(value)); }
    MetricsRecord& add(std::string key, std::vector<double> values) {
        fields.emplace_back(std::move(key), std::move(values));
        return *this;
    }
};

// `"..."` with JSON escapes.
std::string json_quote(std::string_view s);

// The record as one JSON object, without the trailing newline.
std::string to_json_line(const MetricsRecord& record);

class MetricsWriter {
public:
    // Opens path for append (an existing file is extended, so a resumed run continues its log).
    // RuntimeError naming the path if it cannot.
    explicit MetricsWriter(const std::string& path);

    // Writes one line and flushes it. RuntimeError naming the path if the write fails (e.g. disk full).
    void write(const MetricsRecord& record);

    const std::string& path() const { return path_; }

private:
    struct FileCloser {
        void operator()(std::FILE* f) const { std::fclose(f); }
    };
    std::string path_;
    std::unique_ptr<std::FILE, FileCloser> file_;
};

}  // namespace nb
