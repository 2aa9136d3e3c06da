// Learning-rate schedules, with Megatron-LM's names and flags.
//
// `step` counts optimizer steps from 0. With W = warmup_iters, D = decay_iters, S = D - wsd_decay_iters:
//   step < W            lr * (step + 1) / W                      linear warm-up (step 0 is not 0)
//   W <= step < D       constant: lr
//                       linear:   lr - (lr - min_lr) * p          p = (step - W) / (D - W)
//                       cosine:   min_lr + (lr - min_lr) * (1 + cos(pi * p)) / 2
//                       wsd:      lr while step < S, then lr - (lr - min_lr) * (step - S) / (D - S)
//   step >= D           min_lr (constant: lr)
#pragma once

#include <cstdint>
#include <string_view>

#include "src/core/name_table.h"

namespace nb {

enum class LrDecayStyle { constant, linear, cosine, wsd };
inline constexpr auto kLrDecayStyles = name_table<LrDecayStyle>("--lr-decay-style", {
    {"constant", LrDecayStyle::constant},
    {"linear", LrDecayStyle::linear},
    {"cosine", LrDecayStyle::cosine},
    {"wsd", LrDecayStyle::wsd},
});
// kLrDecayStyles.parse and .name.
LrDecayStyle parse_lr_decay_style(std::string_view name);
std::string_view lr_decay_style_name(LrDecayStyle style);

struct LrScheduleConfig {
    LrDecayStyle decay_style = LrDecayStyle::cosine;  // --lr-decay-style
    double lr = 0.0;                     // --lr: peak learning rate (required: 0 is rejected)
    double min_lr = 0.0;                 // --min-lr: floor reached at decay_iters
    int64_t warmup_iters = 0;            // --lr-warmup-iters
    int64_t decay_iters = -1;            // --lr-decay-iters: -1 means train_iters
    int64_t wsd_decay_iters = -1;        // --lr-wsd-decay-iters: -1 means 20% of decay_iters (rounded down)

    // Throws nb::UsageError naming the flag and its value. `train_iters` resolves the -1 defaults.
    void validate(int64_t train_iters) const;
};

class LrSchedule {
public:
    // Resolves the -1 defaults against `train_iters` and validates.
    LrSchedule(const LrScheduleConfig& cfg, int64_t train_iters);

    double lr_at(int64_t step) const;

    // The configuration with the -1 defaults replaced by the values in use.
    const LrScheduleConfig& config() const { return cfg_; }

private:
    LrScheduleConfig cfg_;
};

}  // namespace nb
