// The event-driven schedule simulator (rules in simulate.h).
#include "pipeline/schedule/simulate.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <unordered_map>

#include <fmt/format.h>

#include "src/core/error.h"

namespace nb {

namespace {

bool is_send(ActionType t) { return t == ActionType::send_activation || t == ActionType::send_gradient; }
bool is_recv(ActionType t) { return t == ActionType::recv_activation || t == ActionType::recv_gradient; }
bool carries_gradient(ActionType t) { return t == ActionType::send_gradient || t == ActionType::recv_gradient; }

// What has been sent on one (from, to, kind) channel, and who waits on it.
struct Channel {
    std::vector<double> arrival_ms;     // per send, in order: send time + p2p
    std::vector<int64_t> microbatches;  // per send, in order
    size_t received = 0;                // receives matched so far
    int waiting_stage = -1;             // the stage blocked on the next receive, if any
};

class Simulator {
public:
    Simulator(const std::vector<StagePlan>& plans, const SimCosts& costs, const StagePlacement& placement)
        : plans_(plans), costs_(costs), placement_(placement), p_(static_cast<int>(plans.size())),
          v_(placement.chunks), next_(plans.size(), 0), clock_(plans.size(), 0.0) {
        if (p_ != placement.ranks)
            throw std::invalid_argument(
                fmt::format("simulate: {} plans for a placement over {} ranks", p_, placement.ranks));
        if (!costs.part_scale.empty() && costs.part_scale.size() != static_cast<size_t>(placement.parts()))
            throw std::invalid_argument(fmt::format("simulate: part_scale has {} entries for {} parts",
                                                    costs.part_scale.size(), placement.parts()));
        result_.busy_ms.assign(plans.size(), 0.0);
        result_.replica_wait_ms.assign(plans.size(), 0.0);
        result_.timeline.resize(plans.size());
        for (int s = 0; s < p_; ++s) {
            check_peers(s);
            result_.timeline[s].reserve(plans[s].size());
        }
    }

    SimResult run() {
        std::vector<int> runnable;
        for (int s = p_ - 1; s >= 0; --s) runnable.push_back(s);
        while (!runnable.empty()) {
            const int s = runnable.back();
            runnable.pop_back();
            run_stage_until_blocked(s, runnable);
        }
        finish();
        return std::move(result_);
    }

private:
    const std::vector<StagePlan>& plans_;
    const SimCosts& costs_;
    const StagePlacement placement_;
    const int p_;
    const int v_;  // chunks per rank (1 without virtual stages)
    std::vector<size_t> next_;   // per stage: index of its next action
    std::vector<double> clock_;  // per stage: the time it reaches its next action
    std::unordered_map<int64_t, Channel> channels_;
    SimResult result_;

    // The virtual stage an action of rank s runs on (the rank itself without virtual stages).
    int virtual_stage(int s, const Action& a) const { return placement_.part(s, a.chunk); }

    void check_peers(int s) const {
        for (const Action& a : plans_[s]) {
            if (a.chunk < 0 || a.chunk >= v_)
                throw std::invalid_argument(
                    fmt::format("stage {}: {} runs on chunk {} of {}", s, describe(a), a.chunk, v_));
            if ((is_send(a.type) || is_recv(a.type)) &&
                (a.peer < 0 || a.peer >= p_ * v_ || a.peer == virtual_stage(s, a)))
                throw std::invalid_argument(
                    fmt::format("stage {}: {} names an invalid peer", s, describe(a)));
        }
    }

    // The channel between two virtual stages, one way, for activations or gradients.
    Channel& channel(int from, int to, bool gradient) {
        const int64_t key = (static_cast<int64_t>(from) * p_ * v_ + to) * 2 + (gradient ? 1 : 0);
        return channels_[key];
    }

    // The optimizer steps of one step t, under step_barrier: which ranks have reached theirs, the latest time one
    // did, and the ranks waiting there. A rank's chunks' steps of step t come together, after its last compute of
    // the step (schedule.h), so the first of them is where the rank arrives with all its parts.
    struct StepBarrier {
        std::vector<bool> arrived;  // per rank
        int count = 0;
        double latest_ms = 0;
        std::vector<int> waiting;
    };
    std::unordered_map<int64_t, StepBarrier> barriers_;
    std::unordered_map<int64_t, double> gradient_done_ms_;  // (step, virtual stage): its last backward or W's end

    int64_t step_key(int64_t step, int vs) const { return step * p_ * v_ + vs; }

    // Rank s has reached an optimizer step `a` at `start`: true when every rank has (the step may run from the
    // latest arrival on); false when rank s must wait, and then it is woken by the last arrival.
    bool pass_barrier(int s, const Action& a, double start, std::vector<int>& runnable) {
        StepBarrier& b = barriers_[a.step];
        if (b.arrived.empty()) b.arrived.assign(static_cast<size_t>(p_), false);
        if (!b.arrived[static_cast<size_t>(s)]) {
            b.arrived[static_cast<size_t>(s)] = true;
            ++b.count;
            b.latest_ms = std::max(b.latest_ms, start);
            if (b.count == p_) {
                for (int w : b.waiting) runnable.push_back(w);
                b.waiting.clear();
            }
        }
        if (b.count == p_) return true;
        b.waiting.push_back(s);
        return false;
    }

    // Runs stage s from its next action until it finishes its list or blocks on a receive (or a step barrier).
    void run_stage_until_blocked(int s, std::vector<int>& runnable) {
        const StagePlan& plan = plans_[s];
        while (next_[s] < plan.size()) {
            const Action& a = plan[next_[s]];
            const double start = clock_[s];
            const int vs = virtual_stage(s, a);
            if (is_send(a.type)) {
                Channel& ch = channel(vs, a.peer, carries_gradient(a.type));
                ch.arrival_ms.push_back(start + costs_.p2p_ms);
                ch.microbatches.push_back(a.microbatch);
                if (ch.waiting_stage >= 0) {
                    runnable.push_back(ch.waiting_stage);
                    ch.waiting_stage = -1;
                }
            } else if (is_recv(a.type)) {
                Channel& ch = channel(a.peer, vs, carries_gradient(a.type));
                const bool arrived = ch.received < ch.arrival_ms.size();
                if (!arrived || ch.microbatches[ch.received] != a.microbatch) {
                    if (!arrived) ch.waiting_stage = s;  // a wrong microbatch blocks for good
                    return;
                }
                clock_[s] = std::max(start, ch.arrival_ms[ch.received]);
                ++ch.received;
            } else {
                const double scale = costs_.part_scale.empty() ? 1.0 : costs_.part_scale[static_cast<size_t>(vs)];
                // Data parallelism: the step waits for its gradient's sum over the replicas.
                double arrive = start;
                if (a.type == ActionType::optimizer_step && costs_.replica_sum_ms > 0) {
                    const auto done = gradient_done_ms_.find(step_key(a.step, vs));
                    const double summed = (done == gradient_done_ms_.end() ? start : done->second) +
                                          costs_.replica_sum_ms * scale / v_;
                    arrive = std::max(start, summed);
                }
                const bool barrier = costs_.step_barrier && a.type == ActionType::optimizer_step;
                if (barrier && !pass_barrier(s, a, arrive, runnable)) return;
                const double from = barrier ? std::max(arrive, barriers_[a.step].latest_ms) : arrive;
                if (a.type == ActionType::optimizer_step) result_.replica_wait_ms[s] += arrive - start;
                const double cost = action_cost_ms(a.type, costs_) * scale / v_;
                clock_[s] = from + cost;
                result_.busy_ms[s] += cost;
                if (a.type == ActionType::backward || a.type == ActionType::backward_weight)
                    gradient_done_ms_[step_key(a.step, vs)] = clock_[s];
            }
            result_.timeline[s].push_back({a, start, clock_[s]});
            ++next_[s];
        }
    }

    // What stuck stage s waits for, in words.
    std::string why_stuck(int s) {
        const Action& a = plans_[s][next_[s]];
        if (a.type == ActionType::optimizer_step)
            return fmt::format("stage {} waits at optimizer step {} for every stage's (the global clip's all-gather)",
                               s, a.step);
        const char* what = carries_gradient(a.type) ? "gradient" : "activation";
        Channel& ch = channel(a.peer, virtual_stage(s, a), carries_gradient(a.type));
        std::string why = fmt::format("stage {} waits for the {} of microbatch {} from stage {}", s, what,
                                      a.microbatch, a.peer);
        if (ch.received < ch.microbatches.size())
            why += fmt::format(", but stage {} sent microbatch {} next", a.peer, ch.microbatches[ch.received]);
        else if (const int rank = placement_.rank_of(a.peer); next_[rank] >= plans_[rank].size())
            why += fmt::format(", but stage {} has finished", a.peer);
        return why;
    }

    void finish() {
        for (int s = 0; s < p_; ++s) result_.makespan_ms = std::max(result_.makespan_ms, clock_[s]);
        double busy = 0;
        for (double b : result_.busy_ms) busy += b;
        const double capacity = p_ * result_.makespan_ms;
        result_.bubble_fraction = capacity > 0 ? 1.0 - busy / capacity : 0.0;
        std::vector<std::string> stuck;
        for (int s = 0; s < p_; ++s)
            if (next_[s] < plans_[s].size()) stuck.push_back(why_stuck(s));
        if (!stuck.empty()) {
            result_.deadlock = true;
            result_.deadlock_reason = fmt::format("deadlock: {}", fmt::join(stuck, "; "));
        }
    }
};

}  // namespace

void SimCosts::validate() const {
    if (!(forward_ms > 0) || !std::isfinite(forward_ms))
        throw UsageError(fmt::format("--forward-ms must be positive, got {}", forward_ms));
    const std::pair<const char*, double> others[] = {
        {"--backward-input-ms", backward_input_ms}, {"--backward-weight-ms", backward_weight_ms},
        {"--p2p-ms", p2p_ms}, {"--optimizer-ms", optimizer_ms}, {"the replicas' sum (ms)", replica_sum_ms}};
    for (const auto& [flag, value] : others)
        if (!(value >= 0) || !std::isfinite(value))
            throw UsageError(fmt::format("{} must be >= 0, got {}", flag, value));
    for (double scale : part_scale)
        if (!(scale >= 0) || !std::isfinite(scale))
            throw UsageError(fmt::format("a part's cost scale must be finite and >= 0, got {}", scale));
}

bool steps_synchronize(ScheduleKind kind) { return !is_asynchronous(kind); }

double replica_sum_cost_ms(double bytes, int replicas, double gbps, double latency_us) {
    if (replicas <= 1) return 0.0;
    if (!(gbps > 0) || !std::isfinite(gbps))
        throw UsageError(fmt::format("--allreduce-gbps must be positive, got {}", gbps));
    if (!(latency_us >= 0) || !std::isfinite(latency_us))
        throw UsageError(fmt::format("--allreduce-latency-us must be >= 0, got {}", latency_us));
    const double d = replicas;
    return 2 * (d - 1) * latency_us * 1e-3 + 2 * (d - 1) / d * bytes / (gbps * 1e9 / 8) * 1e3;
}

double action_cost_ms(ActionType type, const SimCosts& costs) {
    switch (type) {
        case ActionType::forward: return costs.forward_ms;
        case ActionType::backward: return costs.backward_ms();
        case ActionType::backward_input: return costs.backward_input_ms;
        case ActionType::backward_weight: return costs.backward_weight_ms;
        case ActionType::optimizer_step: return costs.optimizer_ms;
        default: return 0.0;
    }
}

SimResult simulate(const std::vector<StagePlan>& plans, const SimCosts& costs, const StagePlacement& placement) {
    return Simulator(plans, costs, placement).run();
}

SimResult simulate(const std::vector<StagePlan>& plans, const SimCosts& costs) {
    return simulate(plans, costs, StagePlacement{static_cast<int>(plans.size()), 1, PlacementShape::loop});
}

}  // namespace nb
