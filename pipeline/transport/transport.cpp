#include "pipeline/transport/transport.h"

#include <fmt/format.h>

namespace nb {

const char* channel_name(Channel channel) {
    switch (channel) {
        case Channel::activation: return "activation";
        case Channel::gradient: return "gradient";
        case Channel::eval_activation: return "eval_activation";
        case Channel::report: return "report";
        case Channel::final_weights: return "final_weights";
        case Channel::final_values: return "final_values";
        case Channel::clip_sums: return "clip_sums";
        case Channel::final_optimizer: return "final_optimizer";
        case Channel::trace: return "trace";
        case Channel::announce: return "announce";
        case Channel::stop_vote: return "stop_vote";
        case Channel::checkpoint: return "checkpoint";
        case Channel::replica_grads: return "replica_grads";
        case Channel::replica_sums: return "replica_sums";
        case Channel::replica_report: return "replica_report";
        case Channel::replica_weights: return "replica_weights";
        case Channel::replica_state: return "replica_state";
        case Channel::tied_grads: return "tied_grads";
        case Channel::tied_norm: return "tied_norm";
        case Channel::tied_check: return "tied_check";
    }
    return "?";
}

std::string describe(const MessageTag& tag) { return fmt::format("{} {}", channel_name(tag.channel), tag.index); }

}  // namespace nb
