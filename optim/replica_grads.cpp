#include "optim/replica_grads.h"

#include <stdexcept>

#include <fmt/format.h>

namespace nb {

void add_replica_grads(Ops& ops, TensorSet& total, const TensorSet& replica) {
    if (total.size() != replica.size())
        throw std::logic_error(
            fmt::format("add_replica_grads: {} gradient slots onto {}", replica.size(), total.size()));
    for (int i = 0; i < total.size(); ++i) ops.add_inplace(total[i], replica[i]);
}

}  // namespace nb
