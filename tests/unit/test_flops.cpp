// FLOPs and active parameters per token (model/flops.h) against a hand count of a small mixed dense/MoE config,
// the dense formula they replace, the MoE presets' sizes, and the benchmark's use of them.
#include <doctest/doctest.h>

#include "model/config.h"
#include "model/flops.h"
#include "model/stage_model.h"
#include "src/cpu/cpu_ops.h"
#include "src/run/bench_step.h"

using namespace nb;

namespace {

// vocab 10, d 8, dense ffn 12, 3 blocks (block 0 dense, 1 and 2 MoE), 2 heads of 4, 1 KV head (kv dim 4);
// E 4 routed experts of 6, top-2, a shared expert of 5.
ModelConfig hand_config() {
    ModelConfig c{.preset = "hand", .vocab_size = 10, .hidden_size = 8, .ffn_hidden_size = 12, .num_layers = 3,
                  .num_heads = 2, .num_kv_heads = 1, .moe_layers = "all-but-first:1",
                  .moe = {.num_experts = 4, .topk = 2, .ffn_hidden_size = 6, .shared_ffn_hidden_size = 5}};
    c.resolve_moe_layers();
    c.validate();
    return c;
}

}  // namespace

TEST_CASE("FLOPs per token count the active matrices: attention, dense MLP or router + k experts + shared, head") {
    const ModelConfig c = hand_config();
    const int64_t T = 16;
    // Matrix parameters a token passes through:
    //   attention per block: wq, wo 8x8 (2 x 64) + wk, wv 4x8 (2 x 32)       = 192
    //   dense block 0: 192 + SwiGLU 3 x 8 x 12 (288)                           = 480
    //   MoE block: 192 + router 4 x 8 (32) + 2 experts x 3 x 8 x 6 (288) + shared 3 x 8 x 5 (120) = 632
    //   head 10 x 8                                                            = 80
    // N_active = 480 + 2 x 632 + 80 = 1824; attention's square 4 L T d = 4 x 3 x 16 x 8 = 1536.
    const TokenFlops whole = stage_flops_per_token(c, whole_model_spec(c), T);
    CHECK(whole.forward == 2.0 * 1824 + 1536);      // 5184
    CHECK(whole.training() == 3.0 * 5184);          // 15552
    CHECK(model_flops_per_token(c, T) == 15552.0);  // what train and bench divide by
    // The stages' shares add up: embed + block 0 (2 x 480 + 4 x 16 x 8), blocks 1-2 + head (2 x 1344 + 2 x 512).
    CHECK(stage_flops_per_token(c, {0, 1, true, false}, T).forward == 1472.0);
    CHECK(stage_flops_per_token(c, {1, 3, false, true}, T).forward == 3712.0);
}

TEST_CASE("active parameters leave out the routed experts a token does not reach") {
    const ModelConfig c = hand_config();
    // Per block 2 norm gains + 192 = 208; dense MLP 288; MoE MLP: router 32 + 4 experts x 144 + shared 120 = 728;
    // embedding 80, head 80 + final norm 8: total 3 x 208 + 288 + 2 x 728 + 168 = 2536.
    // Active: each MoE block reaches 2 of its 4 experts, 2 x 144 fewer per block: 2536 - 2 x 288 = 1960.
    CHECK(stage_param_count(c, whole_model_spec(c)) == 2536);
    CHECK(stage_active_param_count(c, whole_model_spec(c)) == 1960);
    CHECK(stage_active_param_count(c, {0, 1, true, false}) == stage_param_count(c, {0, 1, true, false}));
}

TEST_CASE("a dense model's FLOPs are 6 N_matmul + 12 L T d, as before MoE") {
    for (const char* preset : {"tiny", "smollm-135m", "smollm-360m"}) {
        CAPTURE(preset);
        const ModelConfig c = model_preset(preset);
        const double d = static_cast<double>(c.hidden_size), f = static_cast<double>(c.ffn_hidden_size);
        const double kv = static_cast<double>(c.kv_dim()), L = static_cast<double>(c.num_layers);
        const double n_matmul = L * (2 * d * d + 2 * kv * d + 3 * d * f) + static_cast<double>(c.vocab_size) * d;
        CHECK(model_flops_per_token(c, 2048) == 6.0 * n_matmul + 12.0 * L * 2048 * d);
        CHECK(stage_active_param_count(c, whole_model_spec(c)) == stage_param_count(c, whole_model_spec(c)));
    }
}

TEST_CASE("moe-10b is about 10B total and 1-2B active; moe-1b about 1B total") {
    const ModelConfig big = model_preset("moe-10b"), small = model_preset("moe-1b");
    CHECK(stage_param_count(big, whole_model_spec(big)) == 10'165'757'952);
    CHECK(stage_active_param_count(big, whole_model_spec(big)) == 1'636'116'480);
    CHECK(stage_param_count(small, whole_model_spec(small)) == 958'161'920);
    CHECK(stage_active_param_count(small, whole_model_spec(small)) == 339'633'152);
    CHECK(!big.is_moe_block(0));
    CHECK(big.is_moe_block(1));
    CHECK(big.is_moe_block(17));
}

TEST_CASE("the benchmark's step FLOPs of an MoE model are its active FLOPs") {
    CpuOps ops;
    const ModelConfig c = model_preset("tiny-moe");
    const StepTiming t = time_training_step(ops, c, 1, 16, 1);
    CHECK(t.tokens == 16);
    CHECK(t.model_flops == model_flops_per_token(c, 16) * 16);
    CHECK(t.model_flops < 6.0 * static_cast<double>(t.parameters) * 16);  // not all experts' parameters
}
