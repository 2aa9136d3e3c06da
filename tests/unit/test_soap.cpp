// SOAP (optim/soap.h) on parameters small enough to recompute by hand: the skipped first call, Adam's closed form
// wherever there is no eigenbasis, one matrix update written out with the optimizer's own bases, the first
// moment's invariance under basis changes, the bases' defining properties, and the state's names.
#include <doctest/doctest.h>

#include "tests/unit/test_util.h"

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "src/cpu/cpu_ops.h"
#include "optim/soap.h"
#include "src/core/rng.h"

using namespace nb;
using namespace nb::test;

namespace {

Tensor random_tensor(const nb::Shape& shape, nb::Rng& rng) {
    Tensor t = Tensor::zeros(shape);
    for (int64_t k = 0; k < t.numel(); ++k) t.f32()[k] = rng.normal();
    return t;
}

TensorSet random_set(const ParamLayout& layout, nb::Rng& rng) {
    TensorSet set;
    for (const ParamInfo& p : layout.params()) set.tensors.push_back(random_tensor(p.shape, rng));
    return set;
}

TensorSet clone_set(const TensorSet& set) {
    TensorSet out;
    for (const Tensor& t : set.tensors) out.tensors.push_back(t.clone());
    return out;
}

std::vector<double> to_double(const Tensor& t) { return std::vector<double>(t.f32(), t.f32() + t.numel()); }

// Q [n, n] row-major: |Q^T Q - I| within tol.
void check_orthonormal(const Tensor& q, double tol) {
    const int64_t n = q.dim(0);
    const float* d = q.f32();
    for (int64_t a = 0; a < n; ++a)
        for (int64_t b = 0; b < n; ++b) {
            double dot = 0.0;
            for (int64_t i = 0; i < n; ++i) dot += double(d[i * n + a]) * double(d[i * n + b]);
            CHECK(std::fabs(dot - (a == b ? 1.0 : 0.0)) < tol);
        }
}

// Plain Adam with SOAP's bias correction and decay placement, in double, for one element over the update calls.
struct AdamOracle {
    double m = 0, v = 0;
    double step(double p, double g, double lr, int64_t s, const SoapConfig& cfg, bool decay) {
        const double b1 = cfg.beta1, b2 = cfg.beta2;
        m = b1 * m + (1 - b1) * g;
        v = b2 * v + (1 - b2) * g * g;
        const double step_size = lr * std::sqrt(1 - std::pow(b2, double(s))) / (1 - std::pow(b1, double(s)));
        p -= step_size * m / (std::sqrt(v) + cfg.eps);
        if (decay) p -= lr * double(cfg.weight_decay) * p;
        return p;
    }
};

}  // namespace

TEST_CASE("the first call builds the preconditioners and leaves weights and moments untouched") {
    ParamLayout layout;
    layout.add({"w", {4, 3}, ParamKind::hidden_matrix});
    layout.add({"norm", {5}, ParamKind::norm_gain});
    Soap soap(layout, SoapConfig{});
    nb::CpuOps ops;
    nb::Rng rng(1);
    TensorSet weights = random_set(layout, rng), grads = random_set(layout, rng);
    const TensorSet before = clone_set(weights);
    soap.step(ops, layout, weights, grads, 0.1f);
    CHECK(soap.steps_taken() == 1);
    for (int i = 0; i < layout.size(); ++i) {
        CHECK(to_double(weights[i]) == to_double(before[i]));
        for (auto& [name, t] : soap.state_tensors())
            if (name.rfind("exp_avg", 0) == 0)
                for (int64_t k = 0; k < t->numel(); ++k) CHECK(t->f32()[k] == 0.0f);
    }
    // GG0 = (1 - beta2) G G^T: the default shampoo_beta (-1) means beta2.
    const Tensor* gg0 = soap.preconditioner(0, 0);
    REQUIRE(gg0 != nullptr);
    const float* g = grads[0].f32();
    for (int64_t i = 0; i < 4; ++i)
        for (int64_t j = 0; j < 4; ++j) {
            double outer = 0.0;
            for (int64_t k = 0; k < 3; ++k) outer += double(g[i * 3 + k]) * double(g[j * 3 + k]);
            CHECK(gg0->f32()[i * 4 + j] == doctest::Approx((1.0 - 0.95f) * outer).epsilon(1e-5));
        }
}

TEST_CASE("a vector, and a matrix too long for any preconditioner, follow Adam with SOAP's bias correction") {
    ParamLayout layout;
    layout.add({"norm", {3}, ParamKind::norm_gain});       // no decay
    layout.add({"bias", {2}, ParamKind::hidden_matrix});   // decayed
    layout.add({"wide", {3, 2}, ParamKind::hidden_matrix});  // both sides > max_precond_dim: no basis
    SoapConfig cfg;
    cfg.weight_decay = 0.1f;
    cfg.max_precond_dim = 1;
    Soap soap(layout, cfg);
    CHECK(soap.eigenbasis(2, 0) == nullptr);
    CHECK(soap.eigenbasis(2, 1) == nullptr);
    nb::CpuOps ops;
    nb::Rng rng(2);
    TensorSet weights = random_set(layout, rng);
    std::vector<std::vector<double>> expected;
    for (int i = 0; i < layout.size(); ++i) expected.push_back(to_double(weights[i]));
    std::vector<std::vector<AdamOracle>> oracle;
    for (int i = 0; i < layout.size(); ++i) oracle.emplace_back(size_t(weights[i].numel()));

    // Call 1 is skipped; calls 2, 3, 4 are Adam steps s = 1, 2, 3 with their own learning rates.
    const float lrs[] = {0.5f, 0.1f, 0.2f, 0.05f};
    for (int call = 0; call < 4; ++call) {
        TensorSet grads = random_set(layout, rng);
        soap.step(ops, layout, weights, grads, lrs[call]);
        if (call == 0) continue;
        for (int i = 0; i < layout.size(); ++i)
            for (int64_t k = 0; k < weights[i].numel(); ++k) {
                double& p = expected[size_t(i)][size_t(k)];
                p = oracle[size_t(i)][size_t(k)].step(p, grads[i].f32()[k], lrs[call], call, cfg,
                                                      layout[i].weight_decay());
            }
    }
    CHECK(soap.steps_taken() == 4);
    for (int i = 0; i < layout.size(); ++i)
        for (int64_t k = 0; k < weights[i].numel(); ++k) {
            CAPTURE(layout[i].name);
            CAPTURE(k);
            CHECK(weights[i].f32()[k] == doctest::Approx(expected[size_t(i)][size_t(k)]).epsilon(1e-5));
        }
}

TEST_CASE("after the first call, Q0 and Q1 are orthonormal and diagonalize GG0 and GG1, largest first") {
    ParamLayout layout;
    layout.add({"w", {6, 4}, ParamKind::hidden_matrix});
    Soap soap(layout, SoapConfig{});
    nb::CpuOps ops;
    nb::Rng rng(3);
    TensorSet weights = random_set(layout, rng), grads = random_set(layout, rng);
    soap.step(ops, layout, weights, grads, 0.1f);
    for (int d = 0; d < 2; ++d) {
        CAPTURE(d);
        const Tensor* q = soap.eigenbasis(0, d);
        const Tensor* gg = soap.preconditioner(0, d);
        REQUIRE(q != nullptr);
        REQUIRE(gg != nullptr);
        const int64_t n = q->dim(0);
        CHECK(n == layout[0].shape[size_t(d)]);
        check_orthonormal(*q, 1e-5);
        // D = Q^T GG Q: diagonal, descending.
        double scale = 0.0;
        for (int64_t k = 0; k < n; ++k) scale = std::max(scale, std::fabs(double(gg->f32()[k * n + k])));
        std::vector<double> diag;
        for (int64_t a = 0; a < n; ++a)
            for (int64_t b = 0; b < n; ++b) {
                double sum = 0.0;
                for (int64_t i = 0; i < n; ++i)
                    for (int64_t j = 0; j < n; ++j)
                        sum += double(q->f32()[i * n + a]) * double(gg->f32()[i * n + j]) * double(q->f32()[j * n + b]);
                if (a == b)
                    diag.push_back(sum);
                else
                    CHECK(std::fabs(sum) < 1e-5 * scale);
            }
        for (size_t k = 1; k < diag.size(); ++k) CHECK(diag[k - 1] >= diag[k] - 1e-5 * scale);
    }
}

TEST_CASE("the second call's matrix update is Q0 (M / (sqrt(V) + eps)) Q1^T in the first call's bases") {
    ParamLayout layout;
    layout.add({"w", {5, 3}, ParamKind::hidden_matrix});
    const SoapConfig cfg;
    Soap soap(layout, cfg);
    nb::CpuOps ops;
    nb::Rng rng(4);
    TensorSet weights = random_set(layout, rng);
    TensorSet grads = random_set(layout, rng);
    soap.step(ops, layout, weights, grads, 0.1f);
    const std::vector<double> q0 = to_double(*soap.eigenbasis(0, 0)), q1 = to_double(*soap.eigenbasis(0, 1));
    const std::vector<double> p = to_double(weights[0]);
    grads = random_set(layout, rng);
    const std::vector<double> g = to_double(grads[0]);
    const double lr = 0.2;
    soap.step(ops, layout, weights, grads, float(lr));

    const int64_t r = 5, c = 3;
    const double b1 = cfg.beta1, b2 = cfg.beta2;
    // A = (1 - b1) G' / (sqrt((1 - b2) G'^2) + eps), G' = Q0^T G Q1.
    std::vector<double> a(size_t(r * c));
    for (int64_t i = 0; i < r; ++i)
        for (int64_t j = 0; j < c; ++j) {
            double gp = 0.0;
            for (int64_t k = 0; k < r; ++k)
                for (int64_t l = 0; l < c; ++l) gp += q0[size_t(k * r + i)] * g[size_t(k * c + l)] * q1[size_t(l * c + j)];
            a[size_t(i * c + j)] = (1 - b1) * gp / (std::sqrt((1 - b2) * gp * gp) + cfg.eps);
        }
    const double step_size = lr * std::sqrt(1 - b2) / (1 - b1);
    for (int64_t i = 0; i < r; ++i)
        for (int64_t j = 0; j < c; ++j) {
            double n = 0.0;  // (Q0 A Q1^T)[i, j]
            for (int64_t k = 0; k < r; ++k)
                for (int64_t l = 0; l < c; ++l) n += q0[size_t(i * r + k)] * a[size_t(k * c + l)] * q1[size_t(j * c + l)];
            double expected = p[size_t(i * c + j)] - step_size * n;
            expected -= lr * cfg.weight_decay * expected;
            CHECK(weights[0].f32()[i * c + j] == doctest::Approx(expected).epsilon(1e-5));
        }
}

TEST_CASE("the first moment in original coordinates is the EMA of the gradients, through basis refreshes") {
    ParamLayout layout;
    layout.add({"w", {6, 4}, ParamKind::hidden_matrix});
    SoapConfig cfg;
    cfg.precondition_frequency = 2;  // refreshes at s = 2 and 4
    cfg.shampoo_beta = 0.5f;
    Soap soap(layout, cfg);
    nb::CpuOps ops;
    nb::Rng rng(5);
    TensorSet weights = random_set(layout, rng);
    std::vector<double> ema(24, 0.0);
    std::vector<double> q0_after_s1;
    for (int call = 0; call < 6; ++call) {
        TensorSet grads = random_set(layout, rng);
        soap.step(ops, layout, weights, grads, 0.01f);
        if (call == 0) continue;
        for (size_t k = 0; k < ema.size(); ++k) ema[k] = cfg.beta1 * ema[k] + (1.0 - cfg.beta1) * grads[0].f32()[k];
        if (call == 1) q0_after_s1 = to_double(*soap.eigenbasis(0, 0));
        if (call == 2) CHECK(to_double(*soap.eigenbasis(0, 0)) != q0_after_s1);  // s = 2 refreshed the basis
        const Tensor m = soap.exp_avg_original_space(ops, 0);
        for (size_t k = 0; k < ema.size(); ++k) CHECK(std::fabs(m.f32()[k] - ema[k]) < 1e-5);
        check_orthonormal(*soap.eigenbasis(0, 0), 1e-5);
        check_orthonormal(*soap.eigenbasis(0, 1), 1e-5);
    }
}

TEST_CASE("state tensors: moments for all, GG and Q where a side fits, in the documented order") {
    ParamLayout layout;
    layout.add({"emb", {12, 4}, ParamKind::embedding});  // 12 > max_precond_dim: only side 1
    layout.add({"w", {4, 3}, ParamKind::hidden_matrix});
    layout.add({"norm", {4}, ParamKind::norm_gain});     // vectors get no preconditioner
    SoapConfig cfg;
    cfg.max_precond_dim = 8;
    Soap soap(layout, cfg);
    const std::vector<std::string> names = {
        "exp_avg.emb", "exp_avg.w", "exp_avg.norm", "exp_avg_sq.emb", "exp_avg_sq.w", "exp_avg_sq.norm",
        "GG0.w",       "GG1.emb",   "GG1.w",        "Q0.w",           "Q1.emb",       "Q1.w"};
    const std::vector<nb::Shape> shapes = {{12, 4}, {4, 3}, {4}, {12, 4}, {4, 3}, {4},
                                           {4, 4},  {4, 4}, {3, 3}, {4, 4}, {4, 4}, {3, 3}};
    auto state = soap.state_tensors();
    REQUIRE(state.size() == names.size());
    for (size_t k = 0; k < names.size(); ++k) {
        CHECK(state[k].first == names[k]);
        CHECK(state[k].second->shape() == shapes[k]);
        CHECK(state[k].second->dtype() == nb::DType::f32);
        CHECK(state[k].second->device() == nb::Device::cpu);
    }
    // Stable pointers: the same tensors before and after steps.
    nb::CpuOps ops;
    nb::Rng rng(6);
    TensorSet weights = random_set(layout, rng), grads = random_set(layout, rng);
    soap.step(ops, layout, weights, grads, 0.1f);
    soap.step(ops, layout, weights, grads, 0.1f);
    auto again = soap.state_tensors();
    for (size_t k = 0; k < names.size(); ++k) CHECK(again[k].second == state[k].second);
    CHECK(soap.eigenbasis(0, 0) == nullptr);
    CHECK(soap.eigenbasis(0, 1) == state[10].second);
    CHECK(soap.eigenbasis(2, 0) == nullptr);
    CHECK(soap.name() == "soap");
}

TEST_CASE("a parameter of rank 3 is rejected, and a config out of range is an internal error") {
    ParamLayout layout;
    layout.add({"conv", {2, 2, 2}, ParamKind::hidden_matrix});
    CHECK_THROWS_AS(Soap(layout, SoapConfig{}), std::logic_error);

    auto validate = [](auto mutate) {
        SoapConfig cfg;
        mutate(cfg);
        cfg.validate();
    };
    CHECK_NOTHROW(validate([](SoapConfig&) {}));
    CHECK_NOTHROW(validate([](SoapConfig& c) { c.shampoo_beta = 0.9f; }));
    // The user's flags get their one-line usage error from the optimizer registry (test_optimizer_registry.cpp);
    // a SoapConfig out of range is a caller's bug.
    CHECK_THROWS_AS(validate([](SoapConfig& c) { c.beta1 = 1.0f; }), std::logic_error);
    CHECK_THROWS_AS(validate([](SoapConfig& c) { c.beta2 = -0.1f; }), std::logic_error);
    CHECK_THROWS_AS(validate([](SoapConfig& c) { c.shampoo_beta = 1.0f; }), std::logic_error);
    CHECK_THROWS_AS(validate([](SoapConfig& c) { c.eps = 0.0f; }), std::logic_error);
    CHECK_THROWS_AS(validate([](SoapConfig& c) { c.weight_decay = -1.0f; }), std::logic_error);
    CHECK_THROWS_AS(validate([](SoapConfig& c) { c.precondition_frequency = 0; }), std::logic_error);
}

TEST_CASE("a basis refresh that reorders the eigenvectors reorders the second moment with them") {
    // Gradients with at most one non-zero per row and per column keep GG0 and GG1 diagonal, so every basis is a
    // signed permutation and the second moment in the basis is a permutation of the element-wise EMA of G^2.
    // The first gradient makes row 1 and column 1 the largest; the later ones make row 0 and column 0 overtake
    // them, so the refresh at s = 2 must swap V's rows and columns along with Q's columns.
    ParamLayout layout;
    layout.add({"w", {2, 3}, ParamKind::hidden_matrix});
    SoapConfig cfg;
    cfg.precondition_frequency = 2;
    cfg.shampoo_beta = 0.5f;
    Soap soap(layout, cfg);
    nb::CpuOps ops;
    TensorSet weights;
    weights.tensors.push_back(Tensor::zeros({2, 3}));
    const std::vector<std::vector<float>> gradients = {
        {1, 0, 0, 0, 2, 0}, {5, 0, 0, 0, 0, 0.5f}, {4, 0, 0, 0, 0.5f, 0}, {6, 0, 0, 0, 0, 1}, {3, 0, 0, 0, 1, 0}};
    std::vector<double> v_original(6, 0.0);
    // Which unit vector column `a` of Q_d is (up to sign).
    auto source = [&](int d, int64_t a) {
        const Tensor& q = *soap.eigenbasis(0, d);
        const int64_t n = q.dim(0);
        int64_t best = 0;
        for (int64_t i = 1; i < n; ++i)
            if (std::fabs(q.f32()[i * n + a]) > std::fabs(q.f32()[best * n + a])) best = i;
        return best;
    };
    bool swapped = false;
    for (size_t call = 0; call < gradients.size(); ++call) {
        TensorSet grads;
        grads.tensors.push_back(Tensor::zeros({2, 3}));
        std::copy(gradients[call].begin(), gradients[call].end(), grads[0].f32());
        soap.step(ops, layout, weights, grads, 0.01f);
        if (call == 0) {
            CHECK(source(0, 0) == 1);  // row 1 has the larger gradient at first
            CHECK(source(1, 0) == 1);
            continue;
        }
        for (size_t k = 0; k < 6; ++k)
            v_original[k] = cfg.beta2 * v_original[k] + (1.0 - cfg.beta2) * double(gradients[call][k]) * gradients[call][k];
        const float* v = soap.state_tensors()[1].second->f32();  // exp_avg_sq.w
        for (int64_t a = 0; a < 2; ++a)
            for (int64_t b = 0; b < 3; ++b) {
                CAPTURE(call);
                CAPTURE(a);
                CAPTURE(b);
                CHECK(v[a * 3 + b] == doctest::Approx(v_original[size_t(source(0, a) * 3 + source(1, b))]).epsilon(1e-5));
            }
        swapped = swapped || source(0, 0) == 0;
    }
    CHECK(swapped);
}
