#include "pipeline/stage/stage_report.h"

#include <stdexcept>

#include <fmt/format.h>

namespace nb {

// Layout: iteration, has_loss, loss_sum, has_val, val_loss_sum, busy_s, wall_s, act_peak_bytes, the number of
// MoE blocks; per MoE block: its index, aux_loss_sum, E, then E tokens per expert; then sum_squares...
std::vector<double> StageReport::to_values() const {
    std::vector<double> v = {static_cast<double>(iteration), loss_sum ? 1.0 : 0.0, loss_sum.value_or(0.0),
                             val_loss_sum ? 1.0 : 0.0, val_loss_sum.value_or(0.0), busy_s, wall_s, act_peak_bytes,
                             replica_wait_s, static_cast<double>(moe.size())};
    for (const MoeBlockLoad& b : moe) {
        v.insert(v.end(), {static_cast<double>(b.block), b.aux_loss_sum, static_cast<double>(b.expert_tokens.size())});
        v.insert(v.end(), b.expert_tokens.begin(), b.expert_tokens.end());
    }
    v.insert(v.end(), sum_squares.begin(), sum_squares.end());
    return v;
}

StageReport StageReport::from_values(const std::vector<double>& v) {
    if (v.size() < kHeader) throw std::logic_error(fmt::format("a stage report of {} values", v.size()));
    StageReport r;
    r.iteration = static_cast<int64_t>(v[0]);
    if (v[1] != 0.0) r.loss_sum = v[2];
    if (v[3] != 0.0) r.val_loss_sum = v[4];
    r.busy_s = v[5];
    r.wall_s = v[6];
    r.act_peak_bytes = v[7];
    r.replica_wait_s = v[8];
    size_t at = kHeader;
    const auto need = [&](size_t count) {
        if (v.size() - at < count)
            throw std::logic_error(fmt::format("a stage report of {} values, cut short", v.size()));
    };
    for (int64_t b = 0; b < static_cast<int64_t>(v[9]); ++b) {
        need(3);
        MoeBlockLoad block{static_cast<int64_t>(v[at]), v[at + 1], {}};
        const auto experts = static_cast<size_t>(v[at + 2]);
        at += 3;
        need(experts);
        block.expert_tokens.assign(v.begin() + static_cast<std::ptrdiff_t>(at),
                                   v.begin() + static_cast<std::ptrdiff_t>(at + experts));
        at += experts;
        r.moe.push_back(std::move(block));
    }
    r.sum_squares.assign(v.begin() + static_cast<std::ptrdiff_t>(at), v.end());
    return r;
}

std::vector<double> StageFinal::to_values() const {
    return {static_cast<double>(peak_versions), busy_s, wall_s, act_peak_bytes, static_cast<double>(trace_values)};
}

StageFinal StageFinal::from_values(const std::vector<double>& v) {
    if (v.size() != max_values()) throw std::logic_error(fmt::format("a stage's final values: {} values", v.size()));
    return {static_cast<int64_t>(v[0]), v[1], v[2], v[3], static_cast<int64_t>(v[4])};
}

// Layout: bytes, steps_taken, data_epoch, data_index, clock_s, then the sha256's hex digits as their character codes.
// Every number is an integer below 2^53, so the doubles hold it exactly.
std::vector<double> CheckpointReport::to_values() const {
    if (sha256.size() != 64) throw std::logic_error(fmt::format("a checkpoint report with a {}-digit sha256", sha256.size()));
    std::vector<double> v = {static_cast<double>(bytes), static_cast<double>(steps_taken),
                             static_cast<double>(data_epoch), static_cast<double>(data_index), clock_s};
    for (const char c : sha256) v.push_back(static_cast<double>(static_cast<unsigned char>(c)));
    return v;
}

CheckpointReport CheckpointReport::from_values(const std::vector<double>& v) {
    if (v.size() != kValues) throw std::logic_error(fmt::format("a checkpoint report of {} values", v.size()));
    CheckpointReport r{static_cast<int64_t>(v[0]), static_cast<int64_t>(v[1]), static_cast<uint64_t>(v[2]),
                       static_cast<uint64_t>(v[3]), {}, v[4]};
    for (size_t i = 5; i < v.size(); ++i) r.sha256.push_back(static_cast<char>(static_cast<int>(v[i])));
    return r;
}

}  // namespace nb
