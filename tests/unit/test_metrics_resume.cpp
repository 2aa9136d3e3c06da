// A resumed run's --metrics file (src/core/metrics_resume.h): the records after the checkpoint's step go, the
// ones before it and any earlier run's stay, a last line cut short by a kill goes; a long tail is found across the
// backward reading windows.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>
#include <string>

#include <fmt/format.h>

#include "src/core/metrics_resume.h"
#include "tests/unit/test_util.h"

namespace {

using nb::test::TempDir;

std::string record(int64_t step, const char* extra = "") {
    return fmt::format("{{\"step\": {}, \"loss\": 5.25{}, \"elapsed_s\": {}}}\n", step, extra, 0.5 * step);
}

std::string records(int64_t first, int64_t last) {
    std::string out;
    for (int64_t s = first; s <= last; ++s) out += record(s);
    return out;
}

void write_file(const std::string& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary);
    out << text;
    REQUIRE(out.good());
}

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

}  // namespace

TEST_CASE("metrics resume: the records after the checkpoint's step are dropped, every kind of record") {
    TempDir dir;
    const std::string path = dir.file("m.jsonl");
    // Steps 1..9, step 6 with a validation loss: the checkpoint at 5, the kill after 9.
    std::string text = records(1, 5) + record(6, ", \"val_loss\": 5.5") + records(7, 9);
    write_file(path, text);
    const nb::MetricsCut cut = nb::drop_metrics_after(path, 5);
    CHECK(cut.dropped_records == 4);
    CHECK(cut.offset == static_cast<int64_t>(records(1, 5).size()));
    CHECK(cut.last_elapsed_s == 2.5);  // step 5's: the resumed run's clock starts no lower
    CHECK(read_file(path) == records(1, 5));
    CHECK(nb::drop_metrics_after(path, 5).dropped_records == 0);  // nothing left after it: unchanged
    CHECK(read_file(path) == records(1, 5));
    CHECK(nb::drop_metrics_after(path, 0).dropped_records == 5);  // from the start: all go
    CHECK(read_file(path).empty());
}

TEST_CASE("metrics resume: a last line cut short by the kill goes; what is not a record stops the scan") {
    TempDir dir;
    const std::string path = dir.file("m.jsonl");
    write_file(path, records(1, 7) + "{\"step\": 8, \"lo");
    CHECK(nb::drop_metrics_after(path, 7).dropped_records == 0);  // no complete record dropped, but the fragment is
    CHECK(read_file(path) == records(1, 7));

    // An earlier run's records (steps 1..30) above this run's (1..12, checkpoint at 10): only this run's tail goes.
    const std::string earlier = records(1, 30);
    write_file(path, earlier + records(1, 12));
    CHECK(nb::drop_metrics_after(path, 10).dropped_records == 2);
    CHECK(read_file(path) == earlier + records(1, 10));

    // A line that is no record of ours stays, and with it everything before it.
    write_file(path, records(1, 3) + "a note\n" + records(8, 9));
    CHECK(nb::drop_metrics_after(path, 5).dropped_records == 2);
    CHECK(read_file(path) == records(1, 3) + "a note\n");
    CHECK(!nb::find_metrics_cut(path, 5).last_elapsed_s.has_value());  // the kept line is no record: no clock
}

TEST_CASE("metrics resume: a tail longer than the first reading window, and a missing file") {
    TempDir dir;
    const std::string path = dir.file("m.jsonl");
    write_file(path, records(1, 20000));  // ~1 MB: the cut lies many windows back
    CHECK(nb::find_metrics_cut(path, 100).offset == static_cast<int64_t>(records(1, 100).size()));
    CHECK(nb::drop_metrics_after(path, 100).dropped_records == 19900);
    CHECK(read_file(path) == records(1, 100));
    CHECK(nb::drop_metrics_after(dir.file("none.jsonl"), 3).dropped_records == 0);
}
