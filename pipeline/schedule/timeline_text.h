// A simulated timeline as text, one row per stage.
//
// The grid: one column = the cheapest compute cost (forward_ms with the default costs), each column `w`
// characters wide (the widest label plus a space). A forward is drawn as `F<mb>`, a backward as `B<mb>`, an
// optimizer step of non-zero cost as `S<version produced>`, each followed by `-` over the rest of its duration;
// idle time is `.`. An optimizer step that costs nothing is marked by `|` in the gap just before the column it
// happens at. Times are rounded to the nearest column, so the grid is exact only when every cost (p2p too) is a
// multiple of the column's time; otherwise it is a sketch and the numbers printed with it are the truth.
//
// When the grid would be wider than max_width_chars, each stage's row becomes an occupancy bar of
// summary_width characters: `#` busy for >= 3/4 of that slice of time, `+` for >= 1/4, `.` less. With more
// than max_rows stages only a one-line note is printed.
#pragma once

#include <string>

#include "pipeline/schedule/simulate.h"

namespace nb {

struct TimelineTextOptions {
    int64_t max_width_chars = 2000;
    int max_rows = 64;
    int summary_width = 100;
};

std::string render_timeline(const SimResult& result, const SimCosts& costs, const TimelineTextOptions& options = {});

}  // namespace nb
