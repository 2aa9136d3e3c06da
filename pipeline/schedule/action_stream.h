// A stage's actions as the executor asks for them, one at a time, instead of the whole run's list up front
// (docs/DESIGN.md section 1, "Each iteration's actions when they are needed"): memory and start-up time do not
// depend on the run's length. ScheduleActions makes them from the schedule's rules (compute_order.h) as it goes,
// holding one step's order at most; ListedActions runs a list given whole (tests that break a plan on purpose).
//
// Both give exactly build_schedule's list of the rank with the actions of steps outside [first_step, end_step) left
// out (tests/unit/test_action_stream.cpp checks it for every schedule): a resumed run starts at its first step
// without making the steps before it, and an agreed early stop ends the list at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "pipeline/schedule/action_expander.h"
#include "pipeline/schedule/compute_order.h"

namespace nb {

class ActionSource {
public:
    virtual ~ActionSource() = default;
    // The next action, or nullopt after the last.
    virtual std::optional<Action> next() = 0;
    // From now on the actions of steps >= `step` are left out (an agreed early stop; never raises the end).
    virtual void end_before_step(int64_t step) = 0;
};

class ScheduleActions : public ActionSource {
public:
    // Rank `rank`'s actions of steps [first_step, end_step); with `chunk`, only that chunk's (one virtual stage).
    ScheduleActions(const ScheduleSpec& spec, int rank, int64_t first_step, int64_t end_step,
                    std::optional<int> chunk = std::nullopt);
    std::optional<Action> next() override;
    void end_before_step(int64_t step) override;

private:
    std::optional<Compute> next_compute();
    void enter_phase(size_t phase);

    ScheduleSpec spec_;
    int rank_;
    std::optional<int> chunk_;
    int64_t first_step_, end_step_;
    std::vector<Phase> phases_;
    size_t phase_ = 0;
    // In a synchronous phase: the next step, and the order of the current one.
    int64_t step_ = 0;
    std::vector<Compute> step_order_;
    size_t in_step_ = 0;
    // In an asynchronous phase: its 1F1B stream and the next position in it.
    std::optional<OneFOneBStream> stream_;
    int64_t position_ = 0;
    ActionExpander expander_;
    std::vector<Action> expanded_;  // the actions of the last compute expanded, not all taken yet
    size_t taken_ = 0;
    bool computes_done_ = false;
};

class ListedActions : public ActionSource {
public:
    explicit ListedActions(std::vector<Action> plan) : plan_(std::move(plan)) {}
    std::optional<Action> next() override;
    void end_before_step(int64_t step) override { end_step_ = std::min(end_step_, step); }

private:
    std::vector<Action> plan_;
    size_t next_ = 0;
    int64_t end_step_ = INT64_MAX;
};

// Every action `source` has left, in order (tests, and lists small enough to hold).
std::vector<Action> drain(ActionSource& source);

}  // namespace nb
