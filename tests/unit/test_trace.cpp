#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "pipeline/trace.h"

using namespace nb;

namespace {

TraceRecorder sample() {
    TraceRecorder t;
    t.add({"F0", "forward", 0, 10.0, 5.0, 0, 0});
    t.add({"B0", "backward", 1, 20.5, 9.25, 0, 0});
    t.add({"wait", "wait", 1, 30.0, 2.0, -1, -1});
    t.add({"step 0", "optimizer", 0, 40.0, 1.0, -1, 1});
    return t;
}

}  // namespace

TEST_CASE("trace: events survive serialisation between ranks") {
    const TraceRecorder t = sample();
    const auto back = TraceRecorder::deserialize(t.serialize());
    REQUIRE(back.size() == t.events().size());
    for (size_t i = 0; i < back.size(); ++i) {
        CHECK(back[i].name == t.events()[i].name);
        CHECK(back[i].category == t.events()[i].category);
        CHECK(back[i].stage == t.events()[i].stage);
        CHECK(back[i].start_us == doctest::Approx(t.events()[i].start_us));
        CHECK(back[i].duration_us == doctest::Approx(t.events()[i].duration_us));
        CHECK(back[i].microbatch == t.events()[i].microbatch);
        CHECK(back[i].version == t.events()[i].version);
    }
    CHECK_THROWS_AS(TraceRecorder::deserialize("only\ttwo\n"), std::invalid_argument);
}

TEST_CASE("trace: per-stage totals by category") {
    const TraceRecorder t = sample();
    CHECK(t.total_us(0, "forward") == 5.0);
    CHECK(t.total_us(1, "backward") == 9.25);
    CHECK(t.total_us(1, "forward") == 0.0);
}

TEST_CASE("trace: Chrome JSON has a named track per stage and every event, and parses") {
    const TraceRecorder t = sample();
    const std::string json = t.to_chrome_json(2);
    CHECK(json.find("\"name\": \"stage 0\"") != std::string::npos);
    CHECK(json.find("\"name\": \"stage 1\"") != std::string::npos);
    CHECK(json.find("\"name\": \"B0\", \"cat\": \"backward\", \"ts\": 20.500, \"dur\": 9.250") != std::string::npos);
    size_t events = 0;
    for (size_t at = json.find("\"ph\": \"X\""); at != std::string::npos; at = json.find("\"ph\": \"X\"", at + 1))
        ++events;
    CHECK(events == 4);
    // A round trip through Python's json module proves it is valid JSON.
    const std::string path = "/tmp/nobubble_test_trace.json";
    t.write_chrome_json(path, 2);
    const std::string cmd = "/usr/bin/python3 -c \"import json,sys; d=json.load(open('" + path +
                            "')); sys.exit(0 if len(d['traceEvents']) == 8 else 1)\"";
    CHECK(std::system(cmd.c_str()) == 0);
    std::remove(path.c_str());
}

TEST_CASE("trace: an unwritable path is a RuntimeError naming it") {
    CHECK_THROWS_WITH(sample().write_chrome_json("/nonexistent/dir/t.json", 2),
                      doctest::Contains("/nonexistent/dir/t.json"));
}
