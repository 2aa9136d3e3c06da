#include "src/run/token_sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include <fmt/format.h>

#include "src/core/error.h"

namespace nb {

void check_sampling_options(const SamplingOptions& o) {
    if (!(o.temperature >= 0) || !std::isfinite(o.temperature))
        throw UsageError(fmt::format("--temperature {} must be 0 (greedy) or positive", o.temperature));
    if (o.top_k < 0) throw UsageError(fmt::format("--top-k {} must be 0 (every token) or positive", o.top_k));
    if (!(o.top_p > 0 && o.top_p <= 1)) throw UsageError(fmt::format("--top-p {} must be in (0, 1]", o.top_p));
}

int32_t argmax(std::span<const float> logits) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

int32_t TokenSampler::next(std::span<const float> logits) {
    if (options_.temperature == 0) return argmax(logits);
    // The candidates, largest z first (equal ones by lower index): a stable sort of the indices.
    std::vector<int32_t> order(logits.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
    if (options_.top_k > 0 && static_cast<size_t>(options_.top_k) < order.size())
        order.resize(static_cast<size_t>(options_.top_k));
    // Softmax over the candidates, in double: p_i = exp(z_i - z_max) / sum.
    const double z_max = logits[order[0]] / options_.temperature;
    std::vector<double> p(order.size());
    double sum = 0;
    for (size_t i = 0; i < order.size(); ++i) {
        p[i] = std::exp(logits[order[i]] / options_.temperature - z_max);
        sum += p[i];
    }
    // Top-p: the shortest prefix whose probability reaches top_p.
    size_t keep = order.size();
    if (options_.top_p < 1) {
        double running = 0;
        for (size_t i = 0; i < order.size(); ++i) {
            running += p[i] / sum;
            if (running >= options_.top_p) {
                keep = i + 1;
                break;
            }
        }
    }
    const double kept_sum = std::accumulate(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(keep), 0.0);
    const double u = rng_.uniform() * kept_sum;
    double running = 0;
    for (size_t i = 0; i < keep; ++i) {
        running += p[i];
        if (u < running) return order[i];
    }
    return order[keep - 1];  // u rounded up to the sum
}

}  // namespace nb
