#include "pipeline/stage_report.h"

#include <stdexcept>

#include <fmt/format.h>

namespace nb {

// Layout: iteration, has_loss, loss_sum, has_val, val_loss_sum, sum_squares...
std::vector<double> StageReport::to_values() const {
    std::vector<double> v = {static_cast<double>(iteration), loss_sum ? 1.0 : 0.0, loss_sum.value_or(0.0),
                             val_loss_sum ? 1.0 : 0.0, val_loss_sum.value_or(0.0)};
    v.insert(v.end(), sum_squares.begin(), sum_squares.end());
    return v;
}

StageReport StageReport::from_values(const std::vector<double>& v) {
    if (v.size() < 5) throw std::logic_error(fmt::format("a stage report of {} values", v.size()));
    StageReport r;
    r.iteration = static_cast<int64_t>(v[0]);
    if (v[1] != 0.0) r.loss_sum = v[2];
    if (v[3] != 0.0) r.val_loss_sum = v[4];
    r.sum_squares.assign(v.begin() + 5, v.end());
    return r;
}

StageFinal StageFinal::from_values(const std::vector<double>& v) {
    if (v.size() != 1) throw std::logic_error(fmt::format("a stage's final values: {} values", v.size()));
    return {static_cast<int64_t>(v[0])};
}

}  // namespace nb
