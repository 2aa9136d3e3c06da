// A resumed run's --metrics file: the records after its checkpoint are dropped before it writes its own.
//
// A run killed after its checkpoint at step S has written records S+1..K; the run resumed from S computes and
// writes those steps again, so without this the file would hold each of them twice (and `elapsed_s` would run
// backwards where the second copy begins: it continues the checkpoint's clock). Only the file's tail is dropped:
// the trailing records whose `step` is above S, and a last line cut short by the kill (no newline). The scan stops
// at the first record from the end that is at or below S, or that is not a record this program writes (any other
// line is kept, with everything before it), so an earlier run's records further up the file are never touched.
//
// The cut is one truncate(2) of the file: the kernel does all of it or none of it, so a kill at any point loses
// no record that should stay (and nothing is copied: a long run's file is read only from its end back to the cut).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace nb {

struct MetricsCut {
    int64_t offset = 0;            // where the records after the step begin (the file's size when there are none)
    int64_t dropped_records = 0;   // complete records after it (a line cut short is not counted)
    // The elapsed_s of the record the file keeps last, when it is one of ours and has one: the resumed run's clock
    // must not start below it (the file may hold a later timeline's record of the step than the checkpoint's).
    std::optional<double> last_elapsed_s;
};

// Where `path`'s records after `step` begin; reads the file backwards from its end. RuntimeError naming the path
// when it cannot be read.
MetricsCut find_metrics_cut(const std::string& path, int64_t step);

// Drops `path`'s records after `step` (see above): the cut it made. A missing file is left missing (nothing
// dropped). RuntimeError naming the path when it cannot be read or truncated.
MetricsCut drop_metrics_after(const std::string& path, int64_t step);

}  // namespace nb
