// MetricsWriter: lines written, flushed, and parsed back by a small independent JSON reader.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>


#include "src/core/error.h"
#include "src/core/metrics_writer.h"
#include "tests/unit/test_util.h"

namespace {

using nb::test::TempDir;

// A JSON value as this test needs it: null, number (kept as text and as double), string.
struct JsonValue {
    enum Kind { null, number, string } kind = null;
    std::string text;  // the number's digits as written, or the decoded string
    double number_value() const { return std::strtod(text.c_str(), nullptr); }
};

// Parses one flat JSON object {"k": v, ...} with v a number, string or null. Fails the test on anything else.
struct FlatJsonReader {
    const std::string& s;
    size_t i = 0;

    void skip_ws() {
        while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) i++;
    }
    void expect(char c) {
        skip_ws();
        REQUIRE_MESSAGE(i < s.size(), "unexpected end of line: ", s);
        REQUIRE_MESSAGE(s[i] == c, "expected '", c, "' at ", i, " in ", s);
        i++;
    }
    std::string read_string() {
        expect('"');
        std::string out;
        while (true) {
            REQUIRE(i < s.size());
            char c = s[i++];
            if (c == '"') return out;
            REQUIRE_MESSAGE(static_cast<unsigned char>(c) >= 0x20, "raw control character in a JSON string");
            if (c != '\\') {
                out.push_back(c);
                continue;
            }
            REQUIRE(i < s.size());
            char e = s[i++];
            switch (e) {
                case '"': out.push_back('"'); break;
                case '\\': out.push_back('\\'); break;
                case '/': out.push_back('/'); break;
                case 'n': out.push_back('\n'); break;
                case 'r': out.push_back('\r'); break;
                case 't': out.push_back('\t'); break;
                case 'b': out.push_back('\b'); break;
                case 'f': out.push_back('\f'); break;
                case 'u': {
                    REQUIRE(i + 4 <= s.size());
                    unsigned code = static_cast<unsigned>(std::stoul(s.substr(i, 4), nullptr, 16));
                    i += 4;
                    REQUIRE(code < 0x80);  // the writer only escapes control characters
                    out.push_back(static_cast<char>(code));
                    break;
                }
                default: FAIL("bad escape \\", e);
            }
        }
    }
    JsonValue read_value() {
        skip_ws();
        REQUIRE(i < s.size());
        JsonValue v;
        if (s[i] == '"') {
            v.kind = JsonValue::string;
            v.text = read_string();
        } else if (s.compare(i, 4, "null") == 0) {
            i += 4;
        } else {
            size_t start = i;
            while (i < s.size() && std::string("+-0123456789.eE").find(s[i]) != std::string::npos) i++;
            REQUIRE_MESSAGE(i > start, "not a JSON value at ", start, " in ", s);
            v.kind = JsonValue::number;
            v.text = s.substr(start, i - start);
        }
        return v;
    }
    std::vector<std::pair<std::string, JsonValue>> read_object() {
        std::vector<std::pair<std::string, JsonValue>> fields;
        expect('{');
        skip_ws();
        if (i < s.size() && s[i] == '}') {
            i++;
        } else {
            while (true) {
                std::string key = read_string();
                expect(':');
                fields.emplace_back(key, read_value());
                skip_ws();
                REQUIRE(i < s.size());
                if (s[i] == ',') {
                    i++;
                    continue;
                }
                expect('}');
                break;
            }
        }
        skip_ws();
        REQUIRE_MESSAGE(i == s.size(), "trailing characters after the object: ", s);
        return fields;
    }
};

std::vector<std::string> read_lines(const std::string& path) {
    std::ifstream in(path);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
}

}  // namespace

TEST_CASE("metrics: records are written one JSON object per line, in field order, and read back") {
    TempDir dir;
    const std::string path = dir.path + "/metrics.jsonl";
    {
        nb::MetricsWriter w(path);
        for (int step = 0; step < 3; step++) {
            nb::MetricsRecord r;
            r.add("step", step).add("loss", 2.5 / (step + 1)).add("schedule", "1f1b").add("tokens", int64_t{1} << 40);
            w.write(r);
            // Flushed after each line: readable before the writer is closed.
            CHECK(read_lines(path).size() == static_cast<size_t>(step + 1));
        }
    }
    const auto lines = read_lines(path);
    REQUIRE(lines.size() == 3);
    for (int step = 0; step < 3; step++) {
        CAPTURE(lines[step]);
        FlatJsonReader reader{lines[step]};
        auto fields = reader.read_object();
        REQUIRE(fields.size() == 4);
        CHECK(fields[0].first == "step");
        CHECK(fields[0].second.text == std::to_string(step));
        CHECK(fields[1].first == "loss");
        CHECK(fields[1].second.kind == JsonValue::number);
        CHECK(fields[1].second.number_value() == 2.5 / (step + 1));  // exact: shortest round-trip form
        CHECK(fields[2].first == "schedule");
        CHECK(fields[2].second.kind == JsonValue::string);
        CHECK(fields[2].second.text == "1f1b");
        CHECK(fields[3].second.text == "1099511627776");
    }
}

TEST_CASE("metrics: doubles round-trip exactly, NaN and infinities become null") {
    TempDir dir;
    const std::string path = dir.path + "/m.jsonl";
    const std::vector<double> values = {0.1, 1.0 / 3.0, -0.0, 1e-300, 6.02214076e23, 123456789.123456789,
                                        std::numeric_limits<double>::denorm_min(), std::numeric_limits<double>::max()};
    {
        nb::MetricsWriter w(path);
        nb::MetricsRecord r;
        for (size_t k = 0; k < values.size(); k++) r.add("v" + std::to_string(k), values[k]);
        r.add("nan", std::nan("")).add("inf", std::numeric_limits<double>::infinity());
        r.add("ninf", -std::numeric_limits<double>::infinity()).add("f", 0.1f);
        w.write(r);
    }
    const auto lines = read_lines(path);
    REQUIRE(lines.size() == 1);
    FlatJsonReader reader{lines[0]};
    auto fields = reader.read_object();
    REQUIRE(fields.size() == values.size() + 4);
    for (size_t k = 0; k < values.size(); k++) {
        CAPTURE(fields[k].second.text);
        CHECK(fields[k].second.kind == JsonValue::number);
        CHECK(fields[k].second.number_value() == values[k]);
    }
    CHECK(std::signbit(fields[2].second.number_value()));  // -0.0 keeps its sign
    CHECK(fields[values.size() + 0].second.kind == JsonValue::null);
    CHECK(fields[values.size() + 1].second.kind == JsonValue::null);
    CHECK(fields[values.size() + 2].second.kind == JsonValue::null);
    CHECK(static_cast<float>(fields[values.size() + 3].second.number_value()) == 0.1f);
}

TEST_CASE("metrics: strings and keys are escaped") {
    const std::string nasty = std::string("quote\" backslash\\ newline\n tab\t cr\r bell\x07 nul") + '\0' +
                              " utf8 \xc3\xa9 end";
    nb::MetricsRecord r;
    r.add("we\"ird\nkey", nasty);
    const std::string line = nb::to_json_line(r);
    CHECK(line.find('\n') == std::string::npos);
    CHECK(line.find("\\u0007") != std::string::npos);
    CHECK(line.find("\\u0000") != std::string::npos);
    FlatJsonReader reader{line};
    auto fields = reader.read_object();
    REQUIRE(fields.size() == 1);
    CHECK(fields[0].first == "we\"ird\nkey");
    CHECK(fields[0].second.text == nasty);
}

TEST_CASE("metrics: an empty record is {} and the file is appended to, not truncated") {
    TempDir dir;
    const std::string path = dir.path + "/m.jsonl";
    { nb::MetricsWriter(path).write(nb::MetricsRecord{}); }
    {
        nb::MetricsWriter w(path);
        nb::MetricsRecord r;
        r.add("step", 7);
        w.write(r);
    }
    const auto lines = read_lines(path);
    REQUIRE(lines.size() == 2);
    CHECK(lines[0] == "{}");
    CHECK(lines[1] == "{\"step\": 7}");
}

TEST_CASE("metrics: a path that cannot be opened is a RuntimeError naming it") {
    TempDir dir;
    const std::string path = dir.path + "/no/such/dir/m.jsonl";
    try {
        nb::MetricsWriter w(path);
        FAIL("expected a RuntimeError");
    } catch (const nb::RuntimeError& e) {
        const std::string msg = e.what();
        CHECK(msg.find(path) != std::string::npos);
        CHECK(msg.find("cannot open") != std::string::npos);
        CHECK(msg.find('\n') == std::string::npos);
    }
    CHECK_THROWS_AS(nb::MetricsWriter{dir.path}, nb::RuntimeError);  // a directory
}

TEST_CASE("metrics: an array of doubles (per pipeline stage) is a JSON array, non-finite entries null") {
    nb::MetricsRecord r;
    r.add("stage_busy", std::vector<double>{0.5, 0.25}).add("empty", std::vector<double>{});
    r.add("act_mib", std::vector<double>{1.5, std::nan("")});
    CHECK(nb::to_json_line(r) == R"({"stage_busy": [0.5, 0.25], "empty": [], "act_mib": [1.5, null]})");
}
