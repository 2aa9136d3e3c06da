// Softmax cross-entropy per row: loss[n] = lse[n] - logits[n, target[n]], lse[n] = log sum_j exp(logits[n, j]).
//
// logits [.., V] read as N rows; targets i32 with N entries (any shape); loss and lse hold N floats each.
// lse is computed with the row max subtracted and the exp sum in double, then rounded once to float.
#include <algorithm>
#include <cmath>
#include <limits>

#include "src/cpu/cpu_ops.h"
#include "src/cpu/vocab_ids.h"
#include "src/ops/layer_checks.h"

namespace nb {

namespace {

int64_t checked_target(const char* op, const int32_t* targets, int64_t n, int64_t vocab) {
    return checked_vocab_id(op, "target", "row", targets, n, vocab);
}

// log sum_j exp(x_j) = m + log sum_j exp(x_j - m), m = max_j x_j (no overflow; the largest term is 1).
double row_logsumexp(const float* x, int64_t V) {
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < V; ++j) m = std::max(m, x[j]);
    double sum = 0.0;
    for (int64_t j = 0; j < V; ++j) sum += std::exp(static_cast<double>(x[j]) - m);
    return static_cast<double>(m) + std::log(sum);
}

}  // namespace

void CpuOps::cross_entropy_forward(Tensor& loss, Tensor& lse, const Tensor& logits, const Tensor& targets) {
    const OpTimer timer(*this, "cross_entropy_forward");
    const int64_t N = check_cross_entropy_forward(loss, lse, logits, targets), V = logits.dim(-1);
    const float* x = logits.f32();
    const int32_t* t = targets.i32();
    float *lo = loss.f32(), *ls = lse.f32();
    for (int64_t n = 0; n < N; ++n) {
        const float* row = x + n * V;
        const int64_t target = checked_target("cross_entropy_forward", t, n, V);
        const double l = row_logsumexp(row, V);
        ls[n] = static_cast<float>(l);
        lo[n] = static_cast<float>(l - row[target]);
    }
}

// dlogits[n, j] += dloss * (exp(logits[n, j] - lse[n]) - [j == target[n]])
void CpuOps::cross_entropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& lse, const Tensor& targets,
                                    float dloss) {
    const OpTimer timer(*this, "cross_entropy_backward");
    const int64_t N = check_cross_entropy_backward(dlogits, logits, lse, targets), V = logits.dim(-1);
    const float *x = logits.f32(), *ls = lse.f32();
    const int32_t* t = targets.i32();
    float* dx = dlogits.f32();
    for (int64_t n = 0; n < N; ++n) checked_target("cross_entropy_backward", t, n, V);  // validate before writing
    for (int64_t n = 0; n < N; ++n) {
        const float* row = x + n * V;
        float* drow = dx + n * V;
        for (int64_t j = 0; j < V; ++j) {
            const float p = std::exp(row[j] - ls[n]);
            drow[j] += dloss * (j == t[n] ? p - 1.0f : p);
        }
    }
}

}  // namespace nb
