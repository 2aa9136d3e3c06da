#include "src/core/metrics_writer.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <iterator>

#include <fmt/format.h>

#include "src/core/error.h"

namespace nb {

namespace {

// JSON's two-character escapes but \/ (RFC 8259 section 7): a character and the letter written for it after a
// backslash.
struct JsonShortEscape {
    char c, letter;
};
constexpr JsonShortEscape kJsonShortEscapes[] = {{'"', '"'},  {'\\', '\\'}, {'\n', 'n'}, {'\r', 'r'},
                                                 {'\t', 't'}, {'\b', 'b'},   {'\f', 'f'}};

}  // namespace

std::string json_quote(std::string_view s) {
    std::string out;
    out.reserve(s.size() + 2);
    out.push_back('"');
    for (char c : s) {
        const auto* shorthand = std::find_if(std::begin(kJsonShortEscapes), std::end(kJsonShortEscapes),
                                             [c](const JsonShortEscape& x) { return x.c == c; });
        if (shorthand != std::end(kJsonShortEscapes)) {
            out.push_back('\\');
            out.push_back(shorthand->letter);
        } else if (static_cast<unsigned char>(c) < 0x20) {
            out += fmt::format("\\u{:04x}", static_cast<unsigned>(static_cast<unsigned char>(c)));
        } else {
            out.push_back(c);
        }
    }
    out.push_back('"');
    return out;
}

namespace {

std::string json_number(double d) { return std::isfinite(d) ? fmt::format("{}", d) : "null"; }

std::string json_value(const MetricsValue& v) {
    if (const int64_t* i = std::get_if<int64_t>(&v)) return fmt::format("{}", *i);
    if (const double* d = std::get_if<double>(&v)) return json_number(*d);
    if (const auto* a = std::get_if<std::vector<double>>(&v)) {
        std::string out = "[";
        for (size_t i = 0; i < a->size(); ++i) out += (i > 0 ? ", " : "") + json_number((*a)[i]);
        return out + "]";
    }
    return json_quote(std::get<std::string>(v));
}

}  // namespace

std::string to_json_line(const MetricsRecord& record) {
    std::string line = "{";
    for (size_t i = 0; i < record.fields.size(); i++) {
        if (i > 0) line += ", ";
        line += json_quote(record.fields[i].first);
        line += ": ";
        line += json_value(record.fields[i].second);
    }
    line += "}";
    return line;
}

MetricsWriter::MetricsWriter(const std::string& path) : path_(path), file_(std::fopen(path.c_str(), "a")) {
    if (!file_)
        throw RuntimeError(fmt::format("metrics '{}': cannot open for append: {}", path, std::strerror(errno)));
}

void MetricsWriter::write(const MetricsRecord& record) {
    const std::string line = to_json_line(record) + "\n";
    const bool ok = std::fwrite(line.data(), 1, line.size(), file_.get()) == line.size() &&
                    std::fflush(file_.get()) == 0;
    if (!ok) throw RuntimeError(fmt::format("metrics '{}': write failed: {}", path_, std::strerror(errno)));
}

}  // namespace nb
