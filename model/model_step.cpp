#include "model/model_step.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "model/recompute.h"
#include "model/tied_head_grad.h"

namespace nb {

namespace {

void require_whole_model(const StageModel& model) {
    if (!model.spec().has_embedding || !model.spec().has_head)
        throw std::logic_error("forward_backward needs a model with embedding and head");
}

void require_stashes_of(const StageModel& model, const std::vector<Stash>& stashes, const char* who) {
    if (stashes.size() != model.layers().size())
        throw std::logic_error(std::string(who) + ": the stashes do not come from this stage's forward");
}

// Layer `layer`'s context: `ctx`, or for a tied head with its own gradient slot, `ctx` writing that slot
// (model/tied_head_grad.h; `view` and `grads` hold what it refers to).
LayerContext layer_context(const StageModel& model, size_t layer, const LayerContext& ctx, TensorSet& view) {
    return {ctx.ops, ctx.weights, layer_grads(model, layer, ctx.grads, view), ctx.batch, ctx.moe};
}

// Full recomputation (model/recompute.h): when layer i's stash waits for its rerun, i is the last layer of its group;
// the group's forward runs again from the input its first layer kept, on ctx's weights (the forward's version),
// filling the group's stashes. No MoeObserver: the forward counted the expert loads and the aux loss.
void rerun_group_ending_at(const StageModel& model, const LayerContext& ctx, std::vector<Stash>& stashes, size_t i) {
    if (!stashes[i].recompute_pending) return;
    size_t first = i;
    while (!stashes[first].recompute_input.defined()) {
        if (first == 0) throw std::logic_error("recompute: a group without its input");
        --first;
    }
    const LayerContext rerun{ctx.ops, ctx.weights, nullptr, ctx.batch, nullptr};
    Tensor x = std::move(stashes[first].recompute_input);
    stashes[first].recompute_input = {};
    for (size_t j = first; j <= i; ++j) {
        stashes[j].recompute_pending = false;
        x = model.layers()[j]->forward(rerun, x, &stashes[j]);
    }
}

// The most bytes a backward's stashes hold (stage_backward's peak_bytes): null when nobody asks.
class StashPeak {
public:
    StashPeak(const std::vector<Stash>& stashes, size_t* peak) : stashes_(stashes), peak_(peak) {
        if (peak_) *peak_ = live_ = stash_bytes(stashes_);
    }
    // Layer i's backward is about to change its stash (after(i): it has; after_rerun: a group was refilled).
    void before(size_t i) {
        if (peak_) before_ = stashes_[i].bytes();
    }
    void after(size_t i) {
        if (!peak_) return;
        live_ = live_ - before_ + stashes_[i].bytes();
        *peak_ = std::max(*peak_, live_);
    }
    void after_rerun() {
        if (!peak_) return;
        live_ = stash_bytes(stashes_);
        *peak_ = std::max(*peak_, live_);
    }

private:
    const std::vector<Stash>& stashes_;
    size_t* peak_;
    size_t live_ = 0, before_ = 0;
};

// rerun_group_ending_at, then the peak read again where it ran.
void rerun_and_count(const StageModel& model, const LayerContext& ctx, std::vector<Stash>& stashes, size_t i,
                     StashPeak& peak) {
    if (!stashes[i].recompute_pending) return;
    rerun_group_ending_at(model, ctx, stashes, i);
    peak.after_rerun();
}

}  // namespace

Tensor stage_forward(const StageModel& model, const LayerContext& ctx, Tensor x, std::vector<Stash>* stashes,
                     const RecomputeConfig& recompute) {
    const auto& layers = model.layers();
    if (!stashes) {
        for (const auto& layer : layers) x = layer->forward(ctx, x, nullptr);
        return x;
    }
    stashes->resize(layers.size());
    const std::vector<int64_t> group = recompute_groups(model.spec(), recompute);
    for (size_t i = 0; i < layers.size(); ++i) {
        Stash& stash = (*stashes)[i];
        stash.selective = recompute.granularity == RecomputeGranularity::selective;
        stash.recompute_logits = recompute.full() && model.spec().has_head && i + 1 == layers.size();
        if (group[i] < 0) {
            x = layers[i]->forward(ctx, x, &stash);
            continue;
        }
        if (group[i] == static_cast<int64_t>(i)) stash.recompute_input = x;
        stash.recompute_pending = true;
        x = layers[i]->forward(ctx, x, nullptr);
    }
    return x;
}

Tensor stage_backward(const StageModel& model, const LayerContext& ctx, Tensor dy, std::vector<Stash>& stashes,
                      GradsDoneObserver* done, size_t* peak_bytes) {
    const auto& layers = model.layers();
    require_stashes_of(model, stashes, "stage_backward");
    StashPeak peak(stashes, peak_bytes);
    TensorSet view;
    for (size_t i = layers.size(); i-- > 0;) {
        rerun_and_count(model, ctx, stashes, i, peak);
        peak.before(i);
        dy = layers[i]->backward(layer_context(model, i, ctx, view), dy, stashes[i]);
        stashes[i] = {};  // free activations as soon as they are consumed
        peak.after(i);
        if (done) done->grads_done_from(model.first_param(i));
    }
    return dy;
}

Tensor stage_backward_input(const StageModel& model, const LayerContext& ctx, Tensor dy, std::vector<Stash>& stashes,
                            size_t* peak_bytes) {
    const auto& layers = model.layers();
    require_stashes_of(model, stashes, "stage_backward_input");
    StashPeak peak(stashes, peak_bytes);
    TensorSet view;
    for (size_t i = layers.size(); i-- > 0;) {
        rerun_and_count(model, ctx, stashes, i, peak);
        peak.before(i);
        dy = layers[i]->backward_input(layer_context(model, i, ctx, view), dy, stashes[i]);
        peak.after(i);
    }
    return dy;
}

void stage_backward_weight(const StageModel& model, const LayerContext& ctx, std::vector<Stash>& stashes,
                           GradsDoneObserver* done) {
    const auto& layers = model.layers();
    require_stashes_of(model, stashes, "stage_backward_weight");
    TensorSet view;
    for (size_t i = layers.size(); i-- > 0;) {
        layers[i]->backward_weight(layer_context(model, i, ctx, view), stashes[i]);
        if (done) done->grads_done_from(model.first_param(i));
    }
}

size_t stash_bytes(const std::vector<Stash>& stashes) {
    size_t n = 0;
    for (const Stash& s : stashes) n += s.bytes();
    return n;
}

Tensor loss_gradient(float dloss) {
    Tensor d = Tensor::zeros({1});
    d.f32()[0] = dloss;
    return d;
}

float forward_backward(Ops& ops, const StageModel& model, const TensorSet& weights, TensorSet& grads,
                       const Microbatch& batch, float dloss, MoeObserver* moe, const RecomputeConfig& recompute) {
    require_whole_model(model);
    LayerContext ctx{ops, weights, &grads, batch, moe};
    std::vector<Stash> stashes;
    const float loss = stage_forward(model, ctx, Tensor{}, &stashes, recompute).f32()[0];
    stage_backward(model, ctx, loss_gradient(dloss), stashes);
    return loss;
}

float forward_loss(Ops& ops, const StageModel& model, const TensorSet& weights, const Microbatch& batch) {
    require_whole_model(model);
    LayerContext ctx{ops, weights, nullptr, batch};
    return stage_forward(model, ctx, Tensor{}, nullptr).f32()[0];
}

}  // namespace nb
