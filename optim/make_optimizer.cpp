#include "optim/make_optimizer.h"

#include <fmt/format.h>

#include "src/core/error.h"
#include "optim/optimizer_registry.h"

namespace nb {

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& c, const ParamLayout& layout, double peak_lr,
                                          Device device) {
    c.validate();
    if (!(peak_lr > 0)) throw UsageError(fmt::format("--lr must be > 0, got {}", peak_lr));
    return optimizer_row(c.name).make(with_defaults(c), layout, peak_lr, device);
}

}  // namespace nb
