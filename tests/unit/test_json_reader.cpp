// The JSON reader (src/core/json_reader.h, nlohmann/json) that checkpoint manifests, safetensors headers and
// config.json are read with: what our writer writes reads back exactly (int64s beyond 2^53 included), a key given
// twice and nesting beyond 64 levels are refused, and damaged text is one nb::RuntimeError naming the source, never
// a crash (a bounded randomized search over mutations of a manifest-like document).
#include <doctest/doctest.h>

#include <random>
#include <string>

#include "src/core/error.h"
#include "src/core/json_reader.h"
#include "src/core/metrics_writer.h"

namespace nb {

namespace {

std::string error_of(std::string_view text) {
    try {
        read_json(text, "m.json");
    } catch (const RuntimeError& e) {
        return e.what();
    }
    return "";
}

const char* kManifest = R"({"format": 1, "program": "nobubble 0.1", "step": 9007199254740993,
  "model": {"preset": "tiny", "num_layers": 5, "rope_theta": 10000.0, "tie": false},
  "files": [{"name": "stage_0.bin", "bytes": 123, "sha256": "ab\u00e9\ud83d\ude00"}, {"name": "stage_1.bin"}],
  "note": "tab\tquote\"slash\\/", "none": null, "lr": -3e-4})";

}  // namespace

TEST_CASE("json: a manifest-like document reads back field by field") {
    const Json top = read_json(kManifest, "m.json");
    const std::string m = "m.json";
    CHECK(json_int64(json_at(top, "format", m), m, "format") == 1);
    CHECK(json_int64(json_at(top, "step", m), m, "step") == 9007199254740993);  // not 2^53 + 2
    CHECK(json_number(json_at(top, "lr", m), m, "lr") == -3e-4);
    const Json& model = json_object(json_at(top, "model", m), m, "model");
    CHECK(json_string(json_at(model, "preset", m), m, "preset") == "tiny");
    CHECK(json_number(json_at(model, "rope_theta", m), m, "rope_theta") == 10000.0);
    CHECK_FALSE(json_bool(json_at(model, "tie", m), m, "tie"));
    const Json& files = json_array(json_at(top, "files", m), m, "files");
    REQUIRE(files.size() == 2);
    CHECK(json_string(json_at(files[0], "sha256", m), m, "sha256") == "ab\xc3\xa9\xf0\x9f\x98\x80");
    CHECK(json_string(json_at(top, "note", m), m, "note") == "tab\tquote\"slash\\/");
    CHECK(json_at(top, "none", m).is_null());
    CHECK(json_array(read_json("  [ ]  ", m), m, "x").empty());
}

TEST_CASE("json: what the metrics writer writes, the reader reads") {
    MetricsRecord r;
    r.add("step", int64_t{123456789012345}).add("loss", 0.1 + 0.2).add("name", std::string("a\"b\n\x01"));
    r.add("busy", std::vector<double>{0.5, 1e-300});
    const Json o = read_json(to_json_line(r), "line");
    CHECK(json_int64(json_at(o, "step", "line"), "line", "step") == 123456789012345);
    CHECK(json_number(json_at(o, "loss", "line"), "line", "loss") == 0.1 + 0.2);
    CHECK(json_string(json_at(o, "name", "line"), "line", "name") == "a\"b\n\x01");
    CHECK(json_number(json_array(json_at(o, "busy", "line"), "line", "busy")[1], "line", "busy") == 1e-300);
}

TEST_CASE("json: errors name the source and the problem") {
    CHECK(error_of("").find("'m.json': JSON parse error at line 1, column 1") == 0);
    CHECK(error_of("{} x").find("'m.json': JSON parse error at line 1, column 4") == 0);
    CHECK(error_of(R"({"a": 1, "a": 2})") == "'m.json': JSON object names key 'a' twice");
    CHECK(error_of(R"({"a": {"b": 1, "b": 2}})") == "'m.json': JSON object names key 'b' twice");
    CHECK(error_of(R"([{"a": 1}, {"a": 2}])").empty());  // one key in each of two objects
    CHECK(error_of(R"("\q")").find("'m.json': JSON parse error") == 0);
    CHECK(error_of("\"a\nb\"").find("control character") != std::string::npos);
    CHECK(error_of("01").find("'m.json': JSON parse error") == 0);
    CHECK(error_of("[1,]").find("'m.json': JSON parse error") == 0);
    CHECK(error_of(std::string(100, '[')) == "'m.json': JSON nested deeper than 64 levels");
    CHECK(error_of("\"\xff\"").find("ill-formed UTF-8") != std::string::npos);
    const Json o = read_json(R"({"step": 1.5, "name": 3, "big": 18446744073709551615, "neg": -1})", "m.json");
    CHECK_THROWS_WITH_AS(json_int64(json_at(o, "step", "m.json"), "m.json", "step"),
                         "'m.json': field 'step' is 1.5, not an integer", RuntimeError);
    CHECK_THROWS_WITH_AS(json_int64(json_at(o, "big", "m.json"), "m.json", "big"),
                         "'m.json': field 'big' = 18446744073709551615 is too large", RuntimeError);
    CHECK(json_uint64(json_at(o, "big", "m.json"), "m.json", "big") == 18446744073709551615ull);
    CHECK_THROWS_WITH_AS(json_uint64(json_at(o, "neg", "m.json"), "m.json", "neg"),
                         "'m.json': field 'neg' = -1 is negative", RuntimeError);
    CHECK_THROWS_WITH_AS(json_string(json_at(o, "name", "m.json"), "m.json", "name"),
                         "'m.json': field 'name' is 3, not a string", RuntimeError);
    CHECK_THROWS_WITH_AS(json_at(o, "files", "m.json"), "'m.json': no field 'files'", RuntimeError);
    CHECK_THROWS_WITH_AS(json_at(json_at(o, "name", "m.json"), "x", "m.json"),
                         "'m.json': a number where a JSON object with 'x' was expected", RuntimeError);
}

TEST_CASE("json: random damage to a manifest never crashes (3000 cases)") {
    const std::string good = kManifest;
    std::mt19937_64 rng(7);
    int errors = 0;
    for (int c = 0; c < 3000; ++c) {
        std::string text = good;
        switch (c % 3) {
            case 0:
                for (int k = 0; k <= static_cast<int>(rng() % 3); ++k)
                    text[rng() % text.size()] = static_cast<char>(rng());
                break;
            case 1: text.resize(rng() % text.size()); break;
            default:
                text.clear();
                for (size_t k = rng() % 64; k > 0; --k) text += "{}[]\",:0-1e.tfn\\u "[rng() % 19];
        }
        try {
            read_json(text, "fuzz.json");
        } catch (const RuntimeError& e) {
            CHECK(std::string(e.what()).find("'fuzz.json': JSON ") == 0);
            ++errors;
        }
    }
    CHECK(errors > 1500);
}

}  // namespace nb
