#include "model/flops.h"

namespace nb {

double model_flops_per_token(const ModelConfig& c, int64_t seq_len) {
    const double d = static_cast<double>(c.hidden_size), f = static_cast<double>(c.ffn_hidden_size);
    const double kv = static_cast<double>(c.kv_dim()), L = static_cast<double>(c.num_layers);
    const double block_matmul = 2 * d * d + 2 * kv * d + 3 * d * f;
    const double head_matmul = static_cast<double>(c.vocab_size) * d;
    const double n_matmul = L * block_matmul + head_matmul;
    return 6.0 * n_matmul + 12.0 * L * static_cast<double>(seq_len) * d;
}

}  // namespace nb
