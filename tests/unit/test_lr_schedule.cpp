// LrSchedule: each style at step 0, the end of warm-up, the middle and the end of decay, against the formulas
// written out again here; and every validation error names its flag.
#include <doctest/doctest.h>

#include "tests/unit/test_util.h"

#include <cmath>
#include <functional>
#include <string>

#include "src/core/error.h"
#include "optim/lr_schedule.h"

using nb::LrSchedule;
using nb::LrScheduleConfig;

namespace {

using nb::test::contains;
using nb::test::usage_error;

constexpr double kPi = 3.14159265358979323846;
constexpr double kLr = 3e-4, kMinLr = 3e-5;
constexpr int64_t kWarmup = 10, kTrainIters = 110;  // decay window [10, 110): 100 steps

LrScheduleConfig config(const std::string& style) {
    LrScheduleConfig c;
    c.decay_style = nb::parse_lr_decay_style(style);
    c.lr = kLr;
    c.min_lr = kMinLr;
    c.warmup_iters = kWarmup;
    return c;
}

// The formulas, independently of optim/lr_schedule.cpp.
double warmup_lr(int64_t step) { return kLr * double(step + 1) / double(kWarmup); }
double linear_lr(int64_t step) { return kLr - (kLr - kMinLr) * double(step - kWarmup) / double(kTrainIters - kWarmup); }
double cosine_lr(int64_t step) {
    double progress = double(step - kWarmup) / double(kTrainIters - kWarmup);
    return kMinLr + 0.5 * (kLr - kMinLr) * (1.0 + std::cos(kPi * progress));
}

}  // namespace

TEST_CASE("warm-up is linear from lr/W at step 0 to lr at step W-1, for every style") {
    for (const char* style : {"constant", "linear", "cosine", "wsd"}) {
        CAPTURE(style);
        LrSchedule s(config(style), kTrainIters);
        CHECK(s.lr_at(0) == doctest::Approx(warmup_lr(0)).epsilon(1e-12));
        CHECK(s.lr_at(0) == doctest::Approx(kLr / 10).epsilon(1e-12));  // not 0
        CHECK(s.lr_at(4) == doctest::Approx(warmup_lr(4)).epsilon(1e-12));
        CHECK(s.lr_at(kWarmup - 1) == doctest::Approx(kLr).epsilon(1e-12));
    }
}

TEST_CASE("constant: lr after warm-up, forever") {
    LrSchedule s(config("constant"), kTrainIters);
    CHECK(s.lr_at(kWarmup) == kLr);
    CHECK(s.lr_at(60) == kLr);
    CHECK(s.lr_at(kTrainIters - 1) == kLr);
    CHECK(s.lr_at(kTrainIters + 1000) == kLr);
}

TEST_CASE("linear and cosine: lr at the end of warm-up, the mean in the middle, min_lr at decay_iters") {
    // Each style against its formula at one step inside the decay window and at its last step.
    struct Decay {
        const char* style;
        double (*formula)(int64_t step);
        int64_t inside;
    };
    for (const Decay& d : {Decay{"linear", linear_lr, 60}, Decay{"cosine", cosine_lr, 35}}) {
        CAPTURE(d.style);
        LrSchedule s(config(d.style), kTrainIters);
        CHECK(s.lr_at(kWarmup) == doctest::Approx(kLr).epsilon(1e-12));
        CHECK(s.lr_at(d.inside) == doctest::Approx(d.formula(d.inside)).epsilon(1e-12));
        CHECK(s.lr_at(60) == doctest::Approx((kLr + kMinLr) / 2).epsilon(1e-12));
        CHECK(s.lr_at(kTrainIters - 1) == doctest::Approx(d.formula(kTrainIters - 1)).epsilon(1e-12));
        CHECK(s.lr_at(kTrainIters) == kMinLr);
        CHECK(s.lr_at(kTrainIters + 50) == kMinLr);
    }
}

TEST_CASE("cosine: decay_iters shorter than the run ends at min_lr early") {
    LrScheduleConfig c = config("cosine");
    c.decay_iters = 50;  // window [10, 50)
    LrSchedule s(c, kTrainIters);
    CHECK(s.lr_at(30) == doctest::Approx((kLr + kMinLr) / 2).epsilon(1e-12));
    CHECK(s.lr_at(50) == kMinLr);
    CHECK(s.lr_at(100) == kMinLr);
}

TEST_CASE("wsd: stable at lr, then linear to min_lr over the last 20% of decay_iters") {
    LrSchedule s(config("wsd"), kTrainIters);
    CHECK(s.config().wsd_decay_iters == 22);  // 20% of 110
    const int64_t start = kTrainIters - 22;   // 88
    auto wsd_lr = [&](int64_t step) { return kLr - (kLr - kMinLr) * double(step - start) / 22.0; };
    CHECK(s.lr_at(kWarmup) == kLr);
    CHECK(s.lr_at(60) == kLr);
    CHECK(s.lr_at(start - 1) == kLr);
    CHECK(s.lr_at(start) == doctest::Approx(kLr).epsilon(1e-12));
    CHECK(s.lr_at(start + 11) == doctest::Approx((kLr + kMinLr) / 2).epsilon(1e-12));
    CHECK(s.lr_at(kTrainIters - 1) == doctest::Approx(wsd_lr(kTrainIters - 1)).epsilon(1e-12));
    CHECK(s.lr_at(kTrainIters) == kMinLr);
    CHECK(s.lr_at(kTrainIters + 50) == kMinLr);
}

TEST_CASE("wsd: an explicit anneal length") {
    LrScheduleConfig c = config("wsd");
    c.wsd_decay_iters = 40;  // anneal over [70, 110)
    LrSchedule s(c, kTrainIters);
    CHECK(s.lr_at(69) == kLr);
    CHECK(s.lr_at(90) == doctest::Approx((kLr + kMinLr) / 2).epsilon(1e-12));
    CHECK(s.lr_at(110) == kMinLr);
}

TEST_CASE("no warm-up: step 0 is the peak") {
    for (const char* style : {"constant", "linear", "cosine", "wsd"}) {
        CAPTURE(style);
        LrScheduleConfig c = config(style);
        c.warmup_iters = 0;
        LrSchedule s(c, kTrainIters);
        CHECK(s.lr_at(0) == doctest::Approx(kLr).epsilon(1e-12));
    }
}

TEST_CASE("validation names the flag and the value") {
    auto error_for = [](LrScheduleConfig c, int64_t train_iters = kTrainIters) {
        return usage_error([&] { LrSchedule s(c, train_iters); });
    };
    CHECK(error_for(config("cosine")) == "");

    LrScheduleConfig c = config("cosine");
    c.lr = 0;
    CHECK(contains(error_for(c), "--lr 0"));
    c.lr = -1e-3;
    CHECK(contains(error_for(c), "--lr -0.001"));
    c.lr = std::nan("");
    CHECK(contains(error_for(c), "--lr nan"));
    c.lr = INFINITY;
    CHECK(contains(error_for(c), "--lr inf"));

    c = config("cosine");
    c.min_lr = -1e-5;
    CHECK(contains(error_for(c), "--min-lr -1e-05"));
    c.min_lr = 1e-3;  // above lr
    CHECK(contains(error_for(c), "--min-lr 0.001"));

    c = config("cosine");
    c.warmup_iters = -1;
    CHECK(contains(error_for(c), "--lr-warmup-iters -1"));
    c.warmup_iters = kTrainIters;  // == decay iterations
    CHECK(contains(error_for(c), "--lr-warmup-iters 110"));
    c.warmup_iters = 20;
    c.decay_iters = 20;
    CHECK(contains(error_for(c), "--lr-warmup-iters 20"));

    std::string msg = usage_error([] { nb::parse_lr_decay_style("exponential"); });  // the flag's parse
    CHECK(contains(msg, "--lr-decay-style 'exponential'"));
    CHECK(contains(msg, "constant, linear, cosine, wsd"));

    c = config("cosine");
    c.decay_iters = 0;
    CHECK(contains(error_for(c), "--lr-decay-iters 0"));
    c.decay_iters = -2;
    CHECK(contains(error_for(c), "--lr-decay-iters -2"));
    c.decay_iters = -1;
    CHECK(contains(error_for(c, 0), "--lr-decay-iters -1"));

    c = config("wsd");
    c.wsd_decay_iters = -2;
    CHECK(contains(error_for(c), "--lr-wsd-decay-iters -2"));
    c.wsd_decay_iters = 101;  // longer than the window after warm-up (100)
    CHECK(contains(error_for(c), "--lr-wsd-decay-iters 101"));
    c.wsd_decay_iters = 100;
    CHECK(error_for(c) == "");
}
