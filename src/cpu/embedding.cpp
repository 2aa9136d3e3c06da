// Token embedding: a row gather from the table, and its transpose, a row scatter-add.
//
// tokens is i32 of any shape holding N ids; out is [.., d] with N rows; table is [V, d].
#include <cstring>

#include "src/cpu/cpu_ops.h"
#include "src/cpu/vocab_ids.h"
#include "src/ops/layer_checks.h"

namespace nb {

namespace {

int64_t checked_token(const char* op, const int32_t* tokens, int64_t n, int64_t vocab) {
    return checked_vocab_id(op, "token", "position", tokens, n, vocab);
}

}  // namespace

// out[n, :] = table[tokens[n], :]
void CpuOps::embedding_forward(Tensor& out, const Tensor& tokens, const Tensor& table) {
    const OpTimer timer(*this, "embedding_forward");
    check_embedding_forward(out, tokens, table);
    const int64_t n_rows = tokens.numel(), vocab = table.dim(0), d = table.dim(1);
    const int32_t* tok = tokens.i32();
    const float* tab = table.f32();
    float* o = out.f32();
    for (int64_t n = 0; n < n_rows; ++n) {
        const int64_t id = checked_token("embedding_forward", tok, n, vocab);
        std::memcpy(o + n * d, tab + id * d, static_cast<size_t>(d) * sizeof(float));
    }
}

// dtable[tokens[n], :] += dout[n, :], for n = 0, 1, ... in order, so a token repeated in the batch sums its rows
// in position order (deterministic, no atomics).
void CpuOps::embedding_backward(Tensor& dtable, const Tensor& tokens, const Tensor& dout) {
    const OpTimer timer(*this, "embedding_backward");
    check_embedding_backward(dtable, tokens, dout);
    const int64_t n_rows = tokens.numel(), vocab = dtable.dim(0), d = dtable.dim(1);
    const int32_t* tok = tokens.i32();
    const float* g = dout.f32();
    float* dt = dtable.f32();
    // Validate every id before writing anything, so a bad batch leaves the gradient untouched.
    for (int64_t n = 0; n < n_rows; ++n) checked_token("embedding_backward", tok, n, vocab);
    for (int64_t n = 0; n < n_rows; ++n) {
        float* row = dt + static_cast<int64_t>(tok[n]) * d;
        const float* src = g + n * d;
        for (int64_t j = 0; j < d; ++j) row[j] += src[j];
    }
}

}  // namespace nb
