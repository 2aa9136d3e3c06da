// StageModel: a contiguous slice of the layer list [Embedding, Block 0..N-1, OutputHead] and the layout of
// its parameters. The whole model is the one-stage case.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/config.h"
#include "model/layer.h"
#include "model/named_weights.h"
#include "model/params.h"

namespace nb {

// Which part of the model a stage holds: blocks [first_block, end_block), plus the embedding (stage 0)
// and/or the output head (last stage).
struct StageSpec {
    int64_t first_block = 0;
    int64_t end_block = 0;
    bool has_embedding = false;
    bool has_head = false;
    int64_t num_blocks() const { return end_block - first_block; }
};

StageSpec whole_model_spec(const ModelConfig& config);

class StageModel {
public:
    StageModel(const ModelConfig& config, const StageSpec& spec);

    const ModelConfig& config() const { return config_; }
    const StageSpec& spec() const { return spec_; }
    const ParamLayout& layout() const { return layout_; }
    const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }
    // Where layer i's parameters begin in the layout: layer i registered [first_param(i), first_param(i + 1)),
    // and no layer writes the gradient of a slot before its own but a tied head (onto "embedding.weight", slot 0:
    // so first_param(0) is 0 even on a stage whose tied head keeps its own copy ahead of its blocks).
    int first_param(size_t layer) const { return layer == 0 ? 0 : layer_first_param_.at(layer); }

    // Deterministic initialisation: each parameter draws from its own stream, seeded by (seed, name), so
    // the values do not depend on how the model is cut into stages.
    //   matrices: N(0, 0.02); residual output projections (attn.wo, mlp.w_down): N(0, 0.02/sqrt(2 L));
    //   norm gains: 1.
    TensorSet init_weights(uint64_t seed) const;

private:
    ModelConfig config_;
    StageSpec spec_;
    ParamLayout layout_;
    std::vector<std::unique_ptr<Layer>> layers_;
    std::vector<int> layer_first_param_;  // by layer
};

// The whole model's init_weights(seed) by parameter name: a model to time or export without a checkpoint (the
// benchmarks).
NamedWeights initial_named_weights(const ModelConfig& config, uint64_t seed);

// The MoE blocks among the stage's blocks.
int64_t moe_block_count(const ModelConfig& config, const StageSpec& spec);
// Parameters a stage holds (a tied head on a stage without the embedding holds its own copy).
int64_t stage_param_count(const ModelConfig& config, const StageSpec& spec);

}  // namespace nb
