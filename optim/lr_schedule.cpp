#include "optim/lr_schedule.h"

#include <cmath>
#include <numbers>
#include <stdexcept>

#include <fmt/format.h>

#include "src/core/error.h"

namespace nb {

LrDecayStyle parse_lr_decay_style(std::string_view name) { return kLrDecayStyles.parse(name); }

std::string_view lr_decay_style_name(LrDecayStyle style) { return kLrDecayStyles.name(style); }

// The -1 defaults: decay over the whole run; WSD anneals over the last 20% of the decay window.
static int64_t resolve_decay_iters(const LrScheduleConfig& cfg, int64_t train_iters) {
    return cfg.decay_iters == -1 ? train_iters : cfg.decay_iters;
}
static int64_t resolve_wsd_decay_iters(const LrScheduleConfig& cfg, int64_t decay_iters) {
    return cfg.wsd_decay_iters == -1 ? decay_iters / 5 : cfg.wsd_decay_iters;
}

void LrScheduleConfig::validate(int64_t train_iters) const {
    if (!(std::isfinite(lr) && lr > 0.0)) throw UsageError(fmt::format("--lr {} must be a finite number > 0", lr));
    if (!(std::isfinite(min_lr) && min_lr >= 0.0 && min_lr <= lr))
        throw UsageError(fmt::format("--min-lr {} must be in [0, --lr {}]", min_lr, lr));

    const int64_t decay = resolve_decay_iters(*this, train_iters);
    if (decay <= 0) {
        if (decay_iters == -1)
            throw UsageError(fmt::format("--lr-decay-iters -1 means --train-iters, which is {}; it must be > 0",
                                         train_iters));
        throw UsageError(fmt::format("--lr-decay-iters {} must be > 0 (or -1 for --train-iters)", decay_iters));
    }
    if (warmup_iters < 0) throw UsageError(fmt::format("--lr-warmup-iters {} must be >= 0", warmup_iters));
    if (warmup_iters >= decay)
        throw UsageError(fmt::format("--lr-warmup-iters {} must be < the decay iterations ({}{})", warmup_iters, decay,
                                     decay_iters == -1 ? ", from --train-iters" : ", --lr-decay-iters"));

    if (decay_style == LrDecayStyle::wsd) {
        if (wsd_decay_iters < -1)
            throw UsageError(fmt::format("--lr-wsd-decay-iters {} must be >= 0 (or -1 for 20% of the decay "
                                         "iterations)", wsd_decay_iters));
        const int64_t wsd = resolve_wsd_decay_iters(*this, decay);
        if (wsd > decay - warmup_iters)
            throw UsageError(fmt::format("--lr-wsd-decay-iters {} must be <= decay iterations {} - "
                                         "--lr-warmup-iters {} = {}", wsd, decay, warmup_iters, decay - warmup_iters));
    }
}

LrSchedule::LrSchedule(const LrScheduleConfig& cfg, int64_t train_iters) : cfg_(cfg) {
    cfg_.validate(train_iters);
    cfg_.decay_iters = resolve_decay_iters(cfg, train_iters);
    cfg_.wsd_decay_iters = resolve_wsd_decay_iters(cfg, cfg_.decay_iters);
}

// Each decay shape maps p in [0, 1] (fraction of its window done) to a factor from 1 down to 0.
static double linear_factor(double p) { return 1.0 - p; }
static double cosine_factor(double p) { return 0.5 * (1.0 + std::cos(std::numbers::pi * p)); }

static double clamp01(double p) { return p < 0.0 ? 0.0 : (p > 1.0 ? 1.0 : p); }

double LrSchedule::lr_at(int64_t step) const {
    if (step < 0) throw std::logic_error(fmt::format("LrSchedule::lr_at({}): negative step", step));
    const double lr = cfg_.lr, min_lr = cfg_.min_lr;
    const int64_t warmup = cfg_.warmup_iters, decay = cfg_.decay_iters;

    if (step < warmup) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
    if (cfg_.decay_style == LrDecayStyle::constant) return lr;
    if (step >= decay) return min_lr;

    if (cfg_.decay_style == LrDecayStyle::wsd) {
        // Stable at lr, then a linear anneal to min_lr over the last wsd_decay_iters before decay_iters.
        // Megatron also offers cosine, exponential and 1-sqrt anneal shapes (--lr-wsd-decay-style); we chose linear.
        const int64_t anneal_start = decay - cfg_.wsd_decay_iters;
        if (step < anneal_start) return lr;
        const double p = static_cast<double>(step - anneal_start) / static_cast<double>(cfg_.wsd_decay_iters);
        return min_lr + (lr - min_lr) * linear_factor(clamp01(p));
    }

    const double p = clamp01(static_cast<double>(step - warmup) / static_cast<double>(decay - warmup));
    if (cfg_.decay_style == LrDecayStyle::linear) return min_lr + (lr - min_lr) * linear_factor(p);
    return min_lr + (lr - min_lr) * cosine_factor(p);  // cosine
}

}  // namespace nb
