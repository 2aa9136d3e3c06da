#include "pipeline/stage/shard_exchange.h"

#include <stdexcept>

#include <fmt/format.h>

namespace nb {

ShardExchange::ShardExchange(Transport& replicas, int stage, int num_stages, const ParamLayout& layout,
                             std::vector<TensorShard> shards, std::vector<std::pair<std::string, Shape>> state,
                             int64_t tag_stride)
    : replicas_(replicas),
      replica_(replicas.stage()),
      stage_(stage),
      num_stages_(num_stages),
      tag_stride_(tag_stride),
      layout_(layout),
      shards_(std::move(shards)),
      state_(std::move(state)) {
    if (static_cast<int64_t>(shards_.size()) > tag_stride_ || static_cast<int64_t>(state_.size()) > tag_stride_)
        throw std::logic_error(fmt::format("shard exchange: {} shards, {} state tensors for a tag stride of {}",
                                           shards_.size(), state_.size(), tag_stride_));
    for (const auto& [name, shape] : state_) state_params_.push_back(param_of_state(name));
}

// A state tensor is named "<state>.<parameter>" (optim/optimizer.h), the parameter's name holding dots of its own.
int ShardExchange::param_of_state(const std::string& name) const {
    for (size_t dot = name.find('.'); dot != std::string::npos; dot = name.find('.', dot + 1)) {
        const int param = layout_.index_of(name.substr(dot + 1));
        if (param >= 0) return param;
    }
    throw std::logic_error(fmt::format("shard exchange: state tensor '{}' names no parameter of the stage", name));
}

// The rows of shard `s` of `t` (a tensor over the parameter's whole shape).
Tensor ShardExchange::shard_rows(const Tensor& t, const TensorShard& s) const {
    const Shape& shape = layout_[s.tensor].shape;
    if (shape.empty() || (s.row_begin == 0 && s.row_end == shape[0])) return t;
    return t.rows(s.row_begin, s.row_end);
}

MessageTag ShardExchange::weights_tag(int64_t step, size_t shard) const {
    return {Channel::replica_weights, (step * num_stages_ + stage_) * tag_stride_ + static_cast<int64_t>(shard)};
}

MessageTag ShardExchange::state_tag(int64_t key, size_t position) const {
    return {Channel::replica_state, (key * num_stages_ + stage_) * tag_stride_ + static_cast<int64_t>(position)};
}

void ShardExchange::start_weights(int64_t step, const TensorSet& master) {
    if (step_) throw std::logic_error(fmt::format("weights of step {} sent while step {}'s are in flight", step, *step_));
    step_ = step;
    weights_in_.clear();
    for (size_t j = 0; j < shards_.size(); ++j) {
        const TensorShard& s = shards_[j];
        const Tensor rows = shard_rows(master[s.tensor], s);
        if (s.owner != replica_) {
            replicas_.post_recv(s.owner, weights_tag(step, j), rows.shape(), DType::f32);
            weights_in_.emplace(j, std::nullopt);
            continue;
        }
        for (int r = 0; r < replicas_.num_stages(); ++r)
            if (r != replica_) replicas_.send(r, weights_tag(step, j), rows.clone());  // the next update writes master
    }
}

bool ShardExchange::try_take_weights(TensorSet& master) {
    if (!step_) throw std::logic_error("shard exchange: no weights in flight");
    bool all = true;
    for (auto& [j, got] : weights_in_) {
        if (!got) got = replicas_.try_take(shards_[j].owner, weights_tag(*step_, j));
        all &= got.has_value();
    }
    if (!all) return false;
    for (auto& [j, got] : weights_in_) {
        Tensor rows = shard_rows(master[shards_[j].tensor], shards_[j]);
        rows.copy_from(*got);
    }
    weights_in_.clear();
    step_.reset();
    return true;
}

void ShardExchange::send_state(int64_t key, const std::vector<std::pair<std::string, Tensor*>>& mine) {
    std::map<std::string, const Tensor*> by_name(mine.begin(), mine.end());
    for (size_t k = 0; k < state_.size(); ++k) {
        const auto it = by_name.find(state_[k].first);
        if (it != by_name.end()) replicas_.send(0, state_tag(key, k), it->second->clone());
    }
}

std::optional<std::vector<std::pair<std::string, const Tensor*>>> ShardExchange::try_gather_state(
    int64_t key, const std::vector<std::pair<std::string, Tensor*>>& mine) {
    const std::map<std::string, const Tensor*> own(mine.begin(), mine.end());
    if (key_ != key) {  // a new gather: post its receives, one per other owner of each state tensor's parameter
        key_ = key;
        state_in_.clear();
        for (size_t k = 0; k < state_.size(); ++k)
            for (size_t j = 0; j < shards_.size(); ++j)
                if (shards_[j].tensor == state_params_[k] && shards_[j].owner != replica_) {
                    // A shard's state has its rows (elementwise state); a whole tensor's any shape (SOAP's GG1: n x n).
                    Shape shape = state_[k].second;
                    const Shape& param = layout_[shards_[j].tensor].shape;
                    if (!param.empty() && shards_[j].row_end - shards_[j].row_begin != param[0])
                        shape[0] = shards_[j].row_end - shards_[j].row_begin;
                    replicas_.post_recv(shards_[j].owner, state_tag(key, k), shape, DType::f32);
                    state_in_.emplace(k * shards_.size() + j, std::nullopt);
                }
    }
    bool all = true;
    for (auto& [kj, got] : state_in_) {
        if (!got) got = replicas_.try_take(shards_[kj % shards_.size()].owner, state_tag(key, kj / shards_.size()));
        all &= got.has_value();
    }
    if (!all) return std::nullopt;
    // Each state tensor whole: the own one where this replica owns all its rows, else its rows put together.
    assembled_.clear();
    assembled_.reserve(state_.size());
    std::vector<std::pair<std::string, const Tensor*>> whole;
    for (size_t k = 0; k < state_.size(); ++k) {
        const auto& [name, shape] = state_[k];
        std::vector<size_t> pieces;  // the shards of the state's parameter
        for (size_t j = 0; j < shards_.size(); ++j)
            if (shards_[j].tensor == state_params_[k]) pieces.push_back(j);
        const auto it = own.find(name);
        const auto piece = [&](size_t j) -> const Tensor& {
            if (shards_[j].owner != replica_) return *state_in_.at(k * shards_.size() + j);
            if (it == own.end()) throw std::logic_error(fmt::format("shard exchange: no own state '{}'", name));
            return *it->second;
        };
        if (pieces.size() == 1) {  // a whole tensor: its owner's state as it is
            whole.emplace_back(name, &piece(pieces.front()));
            continue;
        }
        Tensor& t = assembled_.emplace_back(Tensor::empty(shape));
        for (size_t j : pieces) {
            Tensor rows = t.rows(shards_[j].row_begin, shards_[j].row_end);
            rows.copy_from(piece(j));
        }
        whole.emplace_back(name, &t);
    }
    return whole;
}

std::string ShardExchange::waits_for() const {
    if (step_)
        for (const auto& [j, got] : weights_in_)
            if (!got)
                return fmt::format("the weights of step {}: rows {}-{} of '{}' from replica {}", *step_,
                                   shards_[j].row_begin, shards_[j].row_end, layout_[shards_[j].tensor].name,
                                   shards_[j].owner);
    for (const auto& [kj, got] : state_in_)
        if (!got)
            return fmt::format("the optimizer state '{}' from replica {}", state_[kj / shards_.size()].first,
                               shards_[kj % shards_.size()].owner);
    return "nothing";
}

}  // namespace nb
