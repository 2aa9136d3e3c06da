#include "pipeline/stage/shard_exchange.h"

#include <stdexcept>

#include <fmt/format.h>

namespace nb {

ShardExchange::ShardExchange(Transport& replicas, int stage, int num_stages, const ParamLayout& layout,
                             std::vector<int> owners, std::vector<std::pair<std::string, Shape>> state)
    : replicas_(replicas),
      replica_(replicas.stage()),
      stage_(stage),
      num_stages_(num_stages),
      layout_(layout),
      owners_(std::move(owners)),
      state_(std::move(state)) {
    if (static_cast<int>(owners_.size()) != layout_.size() || layout_.size() > kStride ||
        static_cast<int64_t>(state_.size()) > kStride)
        throw std::logic_error(fmt::format("shard exchange: {} owners for {} tensors, {} state tensors",
                                           owners_.size(), layout_.size(), state_.size()));
    for (const auto& [name, shape] : state_) state_owners_.push_back(owner_of_state(name));
}

// A state tensor is named "<state>.<parameter>" (optim/optimizer.h), the parameter's name holding dots of its own:
// its owner is the parameter's.
int ShardExchange::owner_of_state(const std::string& name) const {
    for (size_t dot = name.find('.'); dot != std::string::npos; dot = name.find('.', dot + 1)) {
        const int param = layout_.index_of(name.substr(dot + 1));
        if (param >= 0) return owners_[static_cast<size_t>(param)];
    }
    throw std::logic_error(fmt::format("shard exchange: state tensor '{}' names no parameter of the stage", name));
}

MessageTag ShardExchange::weights_tag(int64_t step, int tensor) const {
    return {Channel::replica_weights, (step * num_stages_ + stage_) * kStride + tensor};
}

MessageTag ShardExchange::state_tag(int64_t key, size_t position) const {
    return {Channel::replica_state, (key * num_stages_ + stage_) * kStride + static_cast<int64_t>(position)};
}

void ShardExchange::start_weights(int64_t step, const TensorSet& master) {
    if (step_) throw std::logic_error(fmt::format("weights of step {} sent while step {}'s are in flight", step, *step_));
    step_ = step;
    weights_in_.clear();
    for (int i = 0; i < layout_.size(); ++i) {
        const int owner = owners_[static_cast<size_t>(i)];
        if (owner != replica_) {
            replicas_.post_recv(owner, weights_tag(step, i), layout_[i].shape, DType::f32);
            weights_in_.emplace(i, std::nullopt);
            continue;
        }
        for (int r = 0; r < replicas_.num_stages(); ++r)
            if (r != replica_) replicas_.send(r, weights_tag(step, i), master[i].clone());  // the next update writes master
    }
}

bool ShardExchange::try_take_weights(TensorSet& master) {
    if (!step_) throw std::logic_error("shard exchange: no weights in flight");
    bool all = true;
    for (auto& [i, got] : weights_in_) {
        if (!got) got = replicas_.try_take(owners_[static_cast<size_t>(i)], weights_tag(*step_, i));
        all &= got.has_value();
    }
    if (!all) return false;
    for (auto& [i, got] : weights_in_) master[i].copy_from(*got);
    weights_in_.clear();
    step_.reset();
    return true;
}

void ShardExchange::send_state(int64_t key, const std::vector<std::pair<std::string, Tensor*>>& mine) {
    std::map<std::string, const Tensor*> by_name(mine.begin(), mine.end());
    for (size_t k = 0; k < state_.size(); ++k) {
        if (state_owners_[k] != replica_) continue;
        const auto it = by_name.find(state_[k].first);
        if (it == by_name.end())
            throw std::logic_error(fmt::format("shard exchange: replica {} owns '{}' but has no such state", replica_,
                                               state_[k].first));
        replicas_.send(0, state_tag(key, k), it->second->clone());
    }
}

std::optional<std::vector<std::pair<std::string, const Tensor*>>> ShardExchange::try_gather_state(
    int64_t key, const std::vector<std::pair<std::string, Tensor*>>& mine) {
    if (key_ != key) {  // a new gather: post its receives
        key_ = key;
        state_in_.clear();
        for (size_t k = 0; k < state_.size(); ++k) {
            if (state_owners_[k] == replica_) continue;
            replicas_.post_recv(state_owners_[k], state_tag(key, k), state_[k].second, DType::f32);
            state_in_.emplace(k, std::nullopt);
        }
    }
    bool all = true;
    for (auto& [k, got] : state_in_) {
        if (!got) got = replicas_.try_take(state_owners_[k], state_tag(key, k));
        all &= got.has_value();
    }
    if (!all) return std::nullopt;
    const std::map<std::string, const Tensor*> own(mine.begin(), mine.end());
    std::vector<std::pair<std::string, const Tensor*>> whole;
    for (size_t k = 0; k < state_.size(); ++k) {
        const std::string& name = state_[k].first;
        if (state_owners_[k] != replica_) {
            whole.emplace_back(name, &*state_in_.at(k));
            continue;
        }
        const auto it = own.find(name);
        if (it == own.end()) throw std::logic_error(fmt::format("shard exchange: no own state '{}'", name));
        whole.emplace_back(name, it->second);
    }
    return whole;
}

std::string ShardExchange::waits_for() const {
    if (step_) {
        for (const auto& [i, got] : weights_in_)
            if (!got)
                return fmt::format("the weights of step {}: '{}' from replica {}", *step_, layout_[i].name,
                                   owners_[static_cast<size_t>(i)]);
    }
    for (const auto& [k, got] : state_in_)
        if (!got) return fmt::format("the optimizer state '{}' from replica {}", state_[k].first, state_owners_[k]);
    return "nothing";
}

}  // namespace nb
