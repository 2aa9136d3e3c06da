#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "pipeline/stage/trace.h"

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

// ---- the runner's timed records (pipeline/stage/stage_clock.h), which travel to stage 0 as doubles ----

#include "pipeline/stage/stage_clock.h"

TEST_CASE("stage clock: timed records survive the trip as doubles and are named on stage 0") {
    using nb::TaskKind;
    const std::vector<nb::TimedTask> tasks = {
        {TaskKind::forward, 12, 3, 1000, 2500},
        {TaskKind::wait, 4, -1, 3500, 1500, TaskKind::recv_gradient},
        {TaskKind::recv_gradient, 4, -1, 5000, 1},
        {TaskKind::optimizer, 2, 3, 123456789012345, 7},
    };
    const std::vector<double> values = nb::encode_timed_tasks(tasks);
    REQUIRE(values.size() == tasks.size() * nb::kValuesPerTimedTask);
    const auto back = nb::decode_timed_tasks(values);
    REQUIRE(back.size() == tasks.size());
    for (size_t i = 0; i < tasks.size(); ++i) {
        CHECK(back[i].kind == tasks[i].kind);
        CHECK(back[i].index == tasks[i].index);
        CHECK(back[i].version == tasks[i].version);
        CHECK(back[i].start_ns == tasks[i].start_ns);
        CHECK(back[i].duration_ns == tasks[i].duration_ns);
        CHECK(back[i].waited_for == tasks[i].waited_for);
    }
    CHECK_THROWS_AS(nb::decode_timed_tasks({1, 2, 3}), std::logic_error);
    CHECK_THROWS_AS(nb::decode_timed_tasks({99, 0, 0, 0, 0, 0, 0, 0, 0}), std::logic_error);

    const nb::TraceEvent f = nb::to_trace_event(back[0], 1);
    CHECK(f.name == "F12");
    CHECK(f.category == "forward");
    CHECK(f.stage == 1);
    CHECK(f.start_us == 1.0);
    CHECK(f.duration_us == 2.5);
    CHECK(f.microbatch == 12);
    CHECK(f.version == 3);
    const nb::TraceEvent w = nb::to_trace_event(back[1], 0);
    CHECK(w.name == "wait recv grad 4");
    CHECK(w.category == "wait");
    CHECK(w.microbatch == 4);
    const nb::TraceEvent s = nb::to_trace_event(back[3], 0);
    CHECK(s.name == "step 2");
    CHECK(s.category == "optimizer");
    CHECK(s.microbatch == -1);
}

TEST_CASE("stage clock: busy time is the compute records', split into intervals") {
    nb::StageClock clock(nb::StageClock::Clock::now());
    clock.record({nb::TaskKind::forward, 0, 0, 0, 1000000});
    clock.record({nb::TaskKind::wait, 0, -1, 1000000, 5000000, nb::TaskKind::recv_gradient});
    clock.record({nb::TaskKind::backward, 0, 0, 6000000, 2000000});
    clock.record({nb::TaskKind::send_gradient, 0, -1, 8000000, 500000});
    CHECK(clock.busy_seconds() == doctest::Approx(0.003));
    CHECK(clock.records().empty());  // kept only when asked
    const auto first = clock.take_interval();
    CHECK(first.busy_s == doctest::Approx(0.003));
    CHECK(first.wall_s >= 0);
    clock.record({nb::TaskKind::optimizer, 0, 1, 9000000, 1000000});
    CHECK(clock.take_interval().busy_s == doctest::Approx(0.001));
    nb::StageClock kept(nb::StageClock::Clock::now(), true);
    kept.record({nb::TaskKind::eval, 0, -1, 0, 10});
    CHECK(kept.records().size() == 1);
}
