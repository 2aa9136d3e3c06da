#include "pipeline/schedule/action_expander.h"

namespace nb {

ActionExpander::ActionExpander(const ScheduleSpec& spec, int rank)
    : spec_(spec), placement_(spec.placement()), rank_(rank) {}

void ActionExpander::add(const Compute& c, std::vector<Action>& out) {
    if (!due_steps_.empty() && spec_.step_of(c.microbatch) != due_steps_.front().step) finish(out);
    const int vs = placement_.part(rank_, c.chunk);
    const bool first_stage = vs == 0, last_stage = vs == placement_.parts() - 1;
    const int64_t mb = c.microbatch, step = spec_.step_of(mb), version = weight_version(spec_, rank_, mb);
    auto add_action = [&](ActionType type, int peer) { out.push_back({type, mb, step, version, peer, c.chunk}); };
    if (c.type == ActionType::forward) {
        if (!first_stage) add_action(ActionType::recv_activation, vs - 1);
        add_action(c.type, -1);
        if (!last_stage) add_action(ActionType::send_activation, vs + 1);
        return;
    }
    // W neither receives nor sends.
    const bool input_gradient = c.type == ActionType::backward || c.type == ActionType::backward_input;
    if (input_gradient && !last_stage) add_action(ActionType::recv_gradient, vs + 1);
    add_action(c.type, -1);
    if (input_gradient && !first_stage) add_action(ActionType::send_gradient, vs - 1);
    const bool last_of_step = (mb + 1) % spec_.microbatches_per_step() == 0;
    if (ends_microbatch(c.type) && last_of_step)
        due_steps_.push_back({ActionType::optimizer_step, -1, step, step + 1, -1, c.chunk});
}

void ActionExpander::finish(std::vector<Action>& out) {
    out.insert(out.end(), due_steps_.begin(), due_steps_.end());
    due_steps_.clear();
}

}  // namespace nb
