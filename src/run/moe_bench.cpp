#include "src/run/moe_bench.h"

#include <algorithm>

#include "model/layer.h"
#include "model/moe_layer.h"
#include "src/core/rng.h"
#include "src/run/bench_step.h"

namespace nb {

namespace {

// Every parameter of `layout` N(0, 0.02), on the host, from one stream.
TensorSet random_weights(const ParamLayout& layout, uint64_t seed) {
    TensorSet weights = TensorSet::zeros(layout);
    Rng rng(seed);
    for (int i = 0; i < layout.size(); ++i) {
        float* p = weights[i].f32();
        for (int64_t j = 0, n = weights[i].numel(); j < n; ++j) p[j] = 0.02f * rng.normal();
    }
    return weights;
}

// [rows, cols] of N(0, 1) in the backend's activation dtype, on its device.
Tensor random_activation(Ops& ops, int64_t rows, int64_t cols, uint64_t seed) {
    Tensor host = Tensor::zeros({rows, cols});
    Rng rng(seed);
    float* p = host.f32();
    for (int64_t j = 0; j < host.numel(); ++j) p[j] = rng.normal();
    Tensor out = ops.output({rows, cols});
    ops.cast(out, host.to(ops.device()));
    return out;
}

// One layer's weights (the compute copy) and gradients on the backend's device.
struct LayerState {
    TensorSet master, compute, grads;
    LayerState(Ops& ops, const ParamLayout& layout, uint64_t seed)
        : master(random_weights(layout, seed).to(ops.device())),
          compute(make_compute_weights(ops, layout, master)),
          grads(TensorSet::zeros(layout, DType::f32, ops.device())) {}
};

// The dense SwiGLU MLP: out = (silu(h W_gate^T) * (h W_up^T)) W_down^T, as a dense block computes it.
class DenseSwiGlu {
public:
    DenseSwiGlu(int64_t hidden, int64_t ffn, ParamLayout& layout) : d_(hidden), f_(ffn) {
        w_gate_ = layout.add({"mlp.w_gate", {ffn, hidden}, ParamKind::hidden_matrix});
        w_up_ = layout.add({"mlp.w_up", {ffn, hidden}, ParamKind::hidden_matrix});
        w_down_ = layout.add({"mlp.w_down", {hidden, ffn}, ParamKind::hidden_matrix});
    }

    void forward_backward(Ops& ops, const TensorSet& w, TensorSet& g, const Tensor& h, const Tensor& dout) const {
        const int64_t N = h.dim(0);
        Tensor gate = ops.output({N, f_}), up = ops.output({N, f_}), act = ops.output({N, f_});
        ops.linear_forward(gate, h, w[w_gate_]);
        ops.linear_forward(up, h, w[w_up_]);
        ops.swiglu_forward(act, gate, up);
        Tensor out = ops.output({N, d_});
        ops.linear_forward(out, act, w[w_down_]);

        Tensor dact = ops.activation({N, f_}), dgate = ops.activation({N, f_}), dup = ops.activation({N, f_});
        ops.linear_backward(dact, g[w_down_], dout, act, w[w_down_]);
        ops.swiglu_backward(dgate, dup, dact, gate, up);
        Tensor dh = ops.activation({N, d_});
        ops.linear_backward(dh, g[w_gate_], dgate, h, w[w_gate_]);
        ops.linear_backward(dh, g[w_up_], dup, h, w[w_up_]);
    }

private:
    int64_t d_, f_;
    int w_gate_ = -1, w_up_ = -1, w_down_ = -1;
};

// Pairs of the busiest expert over the mean, from the forward's expert offsets.
double busiest_load(const Tensor& expert_offsets) {
    const Tensor host = expert_offsets.to(Device::cpu);
    const int32_t* off = host.i32();
    const int64_t E = host.numel() - 1;
    int32_t busiest = 0;
    for (int64_t e = 0; e < E; ++e) busiest = std::max(busiest, off[e + 1] - off[e]);
    return static_cast<double>(busiest) * static_cast<double>(E) / static_cast<double>(off[E]);
}

// Both layers with their weights, gradients, input and output gradient: one forward + backward of either.
class LayerPair {
public:
    LayerPair(Ops& ops, const MoeLayerShape& shape)
        : ops_(ops),
          moe_(shape.hidden, shape.moe, "moe", moe_layout_),
          dense_(shape.hidden, shape.dense_ffn_hidden_size(), dense_layout_),
          moe_state_(ops, moe_layout_, 1),
          dense_state_(ops, dense_layout_, 2),
          h_(random_activation(ops, shape.tokens, shape.hidden, 3)),
          dout_(random_activation(ops, shape.tokens, shape.hidden, 4)) {
        batch_.batch_size = shape.tokens;  // the feed-forward reads only h; the shape for completeness
        batch_.seq_len = 1;
    }

    void run_moe() {
        const LayerContext ctx{ops_, moe_state_.compute, &moe_state_.grads, batch_};
        MoeSaved stash;
        expert_offsets_ = moe_.forward(ctx, h_, Tensor{}, &stash).expert_offsets;
        moe_.backward(ctx, dout_, 1.0f, stash);
    }
    void run_dense() { dense_.forward_backward(ops_, dense_state_.compute, dense_state_.grads, h_, dout_); }
    // Of the last MoE forward.
    double busiest_expert_load() const { return busiest_load(expert_offsets_); }

private:
    Ops& ops_;
    ParamLayout moe_layout_, dense_layout_;
    MoeFeedForward moe_;
    DenseSwiGlu dense_;
    LayerState moe_state_, dense_state_;
    Tensor h_, dout_, expert_offsets_;
    Microbatch batch_;
};

}  // namespace

MoeLayerTiming time_moe_layer(Ops& ops, const MoeLayerShape& shape, int reps) {
    LayerPair layers(ops, shape);
    layers.run_moe();  // warm-up: caches, the backend's plans
    layers.run_dense();
    MoeLayerTiming t;
    t.moe_s = t.dense_s = 1e30;
    for (int r = 0; r < reps; ++r) {
        t.moe_s = std::min(t.moe_s, best_seconds(ops, 1, [&] { layers.run_moe(); }));
        t.dense_s = std::min(t.dense_s, best_seconds(ops, 1, [&] { layers.run_dense(); }));
    }
    t.busiest_expert_load = layers.busiest_expert_load();
    // Forward + backward = 3 x the forward's 2 FLOPs per matrix parameter per token.
    const double rows = static_cast<double>(shape.tokens), d = static_cast<double>(shape.hidden);
    const double routed_and_shared = 3 * d * static_cast<double>(shape.dense_ffn_hidden_size());
    t.moe_flops = 6 * rows * (static_cast<double>(shape.moe.num_experts) * d + routed_and_shared);
    t.dense_flops = 6 * rows * routed_and_shared;
    return t;
}

void print_moe_layer_profile(Ops& ops, const MoeLayerShape& shape) {
    LayerPair layers(ops, shape);
    layers.run_moe();
    layers.run_dense();
    {
        const OpProfiler profiler(ops);
        const double seconds = best_seconds(ops, 1, [&] { layers.run_moe(); });
        print_op_profile("the MoE layer's forward + backward", seconds, profiler.report());
    }
    const OpProfiler profiler(ops);
    const double seconds = best_seconds(ops, 1, [&] { layers.run_dense(); });
    print_op_profile("the dense MLP's forward + backward", seconds, profiler.report());
}

}  // namespace nb
