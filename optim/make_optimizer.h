// make_optimizer: the one place that turns an OptimizerConfig into the optimizer a stage runs.
#pragma once

#include <memory>

#include "model/params.h"
#include "optim/optimizer.h"
#include "optim/optimizer_config.h"
#include "src/core/tensor.h"

namespace nb {

// A validated optimizer for the parameters of `layout`, its state (zeros) on `device`. `peak_lr` is --lr, the
// learning rate the schedule peaks at: optimizers with an auxiliary AdamW scale its lr by adam_lr / peak_lr.
// nb::UsageError for a bad config (OptimizerConfig::validate). Every optimizer runs on both backends.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, const ParamLayout& layout, double peak_lr,
                                          Device device);

}  // namespace nb
