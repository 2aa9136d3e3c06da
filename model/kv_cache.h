// KvCache: the keys and values every block has computed so far for one sequence, so that generating the next token
// runs the model on that token alone (autoregressive decoding: src/run/generator.h, `nobubble generate`).
//
// A forward with LayerContext::kv_cache set reads the microbatch as one sequence of T new tokens (batch 1) that
// continue the L = length tokens already cached:
//   - each block ropes its q and k at positions L .. L+T-1 (ops.rope_forward_at), writes k and v into its cache rows
//     [L, L+T), and attends from the T queries over the L+T cached keys (ops.attention_forward_cached);
//   - prefill is the prompt as T tokens at L = 0; each decode step is T = 1;
//   - the caller moves `length` on by T once every block has run (advance()).
// Nothing is stashed: there is no backward. Memory: 2 x layers x capacity x KV x head_dim activations.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/config.h"
#include "src/ops/ops.h"

namespace nb {

class KvCache {
public:
    // Room for `capacity` positions in every block, on `ops`' device in its activation dtype.
    KvCache(Ops& ops, const ModelConfig& config, int64_t capacity) : capacity_(capacity) {
        if (capacity <= 0) throw std::invalid_argument("KvCache: capacity must be positive");
        for (int64_t i = 0; i < config.num_layers; ++i) {
            keys_.push_back(ops.output({capacity, config.num_kv_heads, config.head_dim()}));
            values_.push_back(ops.output({capacity, config.num_kv_heads, config.head_dim()}));
        }
    }

    int64_t length() const { return length_; }
    int64_t capacity() const { return capacity_; }
    // Block `block`'s keys (values) at positions [begin, end): [end - begin, KV, head_dim], a view into the cache.
    Tensor keys(int64_t block, int64_t begin, int64_t end) const { return keys_.at(static_cast<size_t>(block)).rows(begin, end); }
    Tensor values(int64_t block, int64_t begin, int64_t end) const {
        return values_.at(static_cast<size_t>(block)).rows(begin, end);
    }
    // After a forward of `tokens` new tokens through every block.
    void advance(int64_t tokens) {
        if (tokens < 0 || length_ + tokens > capacity_)
            throw std::invalid_argument("KvCache: " + std::to_string(length_ + tokens) + " positions pass its capacity " +
                                        std::to_string(capacity_));
        length_ += tokens;
    }
    void clear() { length_ = 0; }

private:
    int64_t capacity_ = 0, length_ = 0;
    std::vector<Tensor> keys_, values_;  // by block: [capacity, KV, head_dim]
};

}  // namespace nb
