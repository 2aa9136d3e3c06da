// Muon's Newton-Schulz iteration (src/cpu/newton_schulz.h) by its defining properties: it keeps the singular
// vectors and pushes every singular value into a band around 1 (about [0.7, 1.2] after 5 steps, not exactly 1:
// the quintic's coefficients trade that for speed), and a tall matrix is handled as the transpose of a wide one.
#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "src/cpu/newton_schulz.h"
#include "src/core/rng.h"
#include "tests/unit/singular_values.h"

namespace {

std::vector<float> random_matrix(int64_t rows, int64_t cols, uint64_t seed) {
    nb::Rng rng(seed);
    std::vector<float> m(static_cast<size_t>(rows * cols));
    for (float& x : m) x = static_cast<float>(rng.normal());
    return m;
}

}  // namespace

TEST_CASE("newton_schulz5: every singular value lands in [0.6, 1.25] after 5 steps, from a wide spread") {
    const int64_t r = 12, c = 40;
    std::vector<float> g = random_matrix(r, c, 7);
    for (int64_t j = 0; j < c; ++j) g[j] *= 30.0f;  // one row far larger: singular values spread widely
    const std::vector<float> before = nb::test::squared_singular_values(g.data(), r, c);
    CHECK(before.front() / before.back() > 100.0f);
    std::vector<float> out(g.size());
    nb::newton_schulz5(g.data(), out.data(), r, c, 5);
    for (float s2 : nb::test::squared_singular_values(out.data(), r, c)) {
        CAPTURE(s2);
        CHECK(s2 > 0.6f * 0.6f);
        CHECK(s2 < 1.25f * 1.25f);
    }
}

TEST_CASE("newton_schulz5: a tall matrix gives the transpose of its wide transpose, bit for bit") {
    const int64_t rows = 30, cols = 9;
    const std::vector<float> tall = random_matrix(rows, cols, 11);
    std::vector<float> wide(tall.size());
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) wide[j * rows + i] = tall[i * cols + j];
    std::vector<float> tall_out(tall.size()), wide_out(wide.size());
    nb::newton_schulz5(tall.data(), tall_out.data(), rows, cols, 5);
    nb::newton_schulz5(wide.data(), wide_out.data(), cols, rows, 5);
    bool same = true;
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) same &= tall_out[i * cols + j] == wide_out[j * rows + i];
    CHECK(same);
}

TEST_CASE("newton_schulz5: the scale of the input does not matter (it is normalized first)") {
    const int64_t r = 6, c = 10;
    const std::vector<float> g = random_matrix(r, c, 3);
    std::vector<float> scaled(g), a(g.size()), b(g.size());
    for (float& x : scaled) x *= 1024.0f;  // a power of two: the normalized matrix is the same bits
    nb::newton_schulz5(g.data(), a.data(), r, c, 5);
    nb::newton_schulz5(scaled.data(), b.data(), r, c, 5);
    float diff = 0;
    for (size_t i = 0; i < a.size(); ++i) diff = std::max(diff, std::abs(a[i] - b[i]));
    CHECK(diff < 1e-5f);
}
