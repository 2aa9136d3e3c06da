// The JSON reader (src/core/json.h) that checkpoint manifests are read with: what our writer writes reads back
// exactly (int64s beyond 2^53 included), the grammar is RFC 8259's, and damaged text is one nb::RuntimeError
// naming the source, never a crash (a bounded randomized search over mutations of a manifest-like document).
#include <doctest/doctest.h>

#include <functional>
#include <random>
#include <string>

#include "src/core/error.h"
#include "src/core/json.h"
#include "src/core/metrics_writer.h"

namespace nb {

namespace {

std::string error_of(std::string_view text) {
    try {
        parse_json(text, "m.json");
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
    const JsonValue doc = parse_json(kManifest, "m.json");
    const auto& top = doc.object("m.json", "the manifest");
    CHECK(json_field(top, "format", "m.json").int64("m.json", "format") == 1);
    CHECK(json_field(top, "step", "m.json").int64("m.json", "step") == 9007199254740993);  // not 2^53 + 2
    CHECK(json_field(top, "lr", "m.json").number("m.json", "lr") == -3e-4);
    const auto& model = json_field(top, "model", "m.json").object("m.json", "model");
    CHECK(json_field(model, "preset", "m.json").string("m.json", "preset") == "tiny");
    CHECK(json_field(model, "rope_theta", "m.json").number("m.json", "rope_theta") == 10000.0);
    CHECK_FALSE(json_field(model, "tie", "m.json").boolean("m.json", "tie"));
    const auto& files = json_field(top, "files", "m.json").array("m.json", "files");
    REQUIRE(files.size() == 2);
    CHECK(json_field(files[0].object("m.json", "files[0]"), "sha256", "m.json").string("m.json", "sha256") ==
          "ab\xc3\xa9\xf0\x9f\x98\x80");
    CHECK(json_field(top, "note", "m.json").string("m.json", "note") == "tab\tquote\"slash\\/");
    CHECK(json_field(top, "none", "m.json").is_null());
    CHECK(parse_json("  [ ]  ", "m.json").array("m.json", "x").empty());
}

TEST_CASE("json: what the metrics writer writes, the reader reads") {
    MetricsRecord r;
    r.add("step", int64_t{123456789012345}).add("loss", 0.1 + 0.2).add("name", std::string("a\"b\n\x01"));
    r.add("busy", std::vector<double>{0.5, 1e-300});
    const JsonValue doc = parse_json(to_json_line(r), "line");  // the references below point into it
    const auto& o = doc.object("line", "record");
    CHECK(json_field(o, "step", "line").int64("line", "step") == 123456789012345);
    CHECK(json_field(o, "loss", "line").number("line", "loss") == 0.1 + 0.2);
    CHECK(json_field(o, "name", "line").string("line", "name") == "a\"b\n\x01");
    CHECK(json_field(o, "busy", "line").array("line", "busy")[1].number("line", "busy") == 1e-300);
}

TEST_CASE("json: errors name the source, the problem and the byte") {
    CHECK(error_of("") == "'m.json': JSON ends too early at byte 0");
    CHECK(error_of("{} x") == "'m.json': JSON text after the JSON value at byte 3");
    CHECK(error_of(R"({"a": 1, "a": 2})") == "'m.json': JSON has the key 'a' twice at byte 9");
    CHECK(error_of(R"("\q")") == "'m.json': JSON has an unknown escape '\\q' at byte 3");
    CHECK(error_of("\"a\nb\"") == "'m.json': JSON has a control character inside a string at byte 3");
    CHECK(error_of(R"("\ud800")") == "'m.json': JSON expects '\\u' at byte 7");
    CHECK(error_of("01") == "'m.json': JSON text after the JSON value at byte 1");
    CHECK(error_of("1.") == "'m.json': JSON has a number without digits after '.' at byte 2");
    CHECK(error_of("[1,]") == "'m.json': JSON expects a value at byte 3");
    CHECK(error_of(std::string(100, '[')) == "'m.json': JSON nests deeper than 64 levels at byte 65");
    const JsonValue doc = parse_json(R"({"step": 1.5, "name": 3})", "m.json");
    const auto& o = doc.object("m.json", "manifest");
    CHECK_THROWS_WITH_AS(json_field(o, "step", "m.json").int64("m.json", "step"),
                         "'m.json': field 'step' is 1.5, not a 64-bit integer", RuntimeError);
    CHECK_THROWS_WITH_AS(json_field(o, "name", "m.json").string("m.json", "name"),
                         "'m.json': field 'name' is a number, not a string", RuntimeError);
    CHECK_THROWS_WITH_AS(json_field(o, "files", "m.json"), "'m.json': no field 'files'", RuntimeError);
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
            parse_json(text, "fuzz.json");
        } catch (const RuntimeError& e) {
            CHECK(std::string(e.what()).find("'fuzz.json': JSON ") == 0);
            ++errors;
        }
    }
    CHECK(errors > 1500);
}

}  // namespace nb
