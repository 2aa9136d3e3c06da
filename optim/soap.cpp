#include "optim/soap.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

#include "error.h"
#include "optim/linalg.h"

namespace nb {

void SoapConfig::validate() const {
    auto in_unit = [](float b) { return std::isfinite(b) && b >= 0.0f && b < 1.0f; };
    if (!in_unit(beta1)) throw UsageError(fmt::format("--beta1 {} must be in [0, 1)", beta1));
    if (!in_unit(beta2)) throw UsageError(fmt::format("--beta2 {} must be in [0, 1)", beta2));
    if (!(std::isfinite(shampoo_beta) && shampoo_beta < 1.0f))
        throw UsageError(fmt::format("--shampoo-beta {} must be in [0, 1) (or < 0 for --beta2)", shampoo_beta));
    if (!(std::isfinite(eps) && eps > 0.0f)) throw UsageError(fmt::format("--eps {} must be > 0", eps));
    if (!(std::isfinite(weight_decay) && weight_decay >= 0.0f))
        throw UsageError(fmt::format("--weight-decay {} must be >= 0", weight_decay));
    if (precondition_frequency < 1)
        throw UsageError(fmt::format("--precondition-frequency {} must be >= 1", precondition_frequency));
}

Soap::Soap(const ParamLayout& layout, const SoapConfig& cfg) : cfg_(cfg) {
    cfg_.validate();
    for (const ParamInfo& info : layout.params()) {
        if (info.shape.size() > 2)
            throw std::logic_error(fmt::format("Soap: {} has shape {}; only vectors and matrices are supported",
                                               info.name, shape_string(info.shape)));
        Slot slot;
        slot.name = info.name;
        const bool matrix = info.shape.size() == 2;
        slot.rows = matrix ? info.shape[0] : 1;
        slot.cols = matrix ? info.shape[1] : shape_numel(info.shape);
        slot.m = Tensor::zeros(info.shape, DType::f32, Device::cpu);
        slot.v = Tensor::zeros(info.shape, DType::f32, Device::cpu);
        // precondition_1d is off: a vector's only "side" would be the whole vector, and it gets no basis.
        if (matrix) {
            for (int d = 0; d < 2; ++d) {
                const int64_t n = info.shape[static_cast<size_t>(d)];
                if (n > cfg_.max_precond_dim) continue;
                slot.gg[static_cast<size_t>(d)] = Tensor::zeros({n, n}, DType::f32, Device::cpu);
                slot.q[static_cast<size_t>(d)] = Tensor::zeros({n, n}, DType::f32, Device::cpu);
            }
        }
        slots_.push_back(std::move(slot));
    }
}

// The state was sized for one layout; a different one is a programming error, not a user error.
static void check_matches(const ParamLayout& layout, size_t slots, const TensorSet& weights, const TensorSet& grads) {
    if (static_cast<size_t>(layout.size()) != slots || static_cast<size_t>(weights.size()) != slots ||
        static_cast<size_t>(grads.size()) != slots)
        throw std::logic_error(fmt::format("Soap::step: layout has {} params, state {}, weights {}, grads {}",
                                           layout.size(), slots, weights.size(), grads.size()));
    for (int i = 0; i < layout.size(); ++i) {
        const Shape& shape = layout[i].shape;
        if (weights[i].shape() != shape || grads[i].shape() != shape)
            throw std::logic_error(fmt::format("Soap::step: {} expects shape {}, got weight {} grad {}", layout[i].name,
                                               shape_string(shape), shape_string(weights[i].shape()),
                                               shape_string(grads[i].shape())));
    }
}

void Soap::step(Ops& ops, const ParamLayout& layout, TensorSet& weights, const TensorSet& grads, float lr) {
    check_matches(layout, slots_.size(), weights, grads);
    // The reference counts its step from 0 at the first call and skips that call's update, so its s is the
    // number of calls before this one.
    const int64_t s = steps_taken_;
    for (int i = 0; i < layout.size(); ++i) {
        Slot& slot = slots_[static_cast<size_t>(i)];
        if (s == 0)
            first_step(slot, grads[i].f32());
        else
            update_step(slot, layout[i], weights[i].f32(), grads[i].f32(), lr, s);
    }
    steps_taken_ = s + 1;
}

// torch.lerp's formula (two forms, whichever keeps the rounding small), so GG accumulates as the reference's does.
static float lerp(float from, float to, float w) {
    return std::fabs(w) < 0.5f ? from + w * (to - from) : to - (to - from) * (1.0f - w);
}

// GG_d <- lerp(GG_d, outer_d, w), outer_0 = G G^T [r, r], outer_1 = G^T G [c, c].
static void accumulate_outer(Tensor& gg, int dim, const float* g, int64_t r, int64_t c, float w) {
    const int64_t n = dim == 0 ? r : c;
    std::vector<float> outer(static_cast<size_t>(n * n));
    if (dim == 0)
        linalg::gemm(false, true, r, r, c, 1.0f, g, g, 0.0f, outer.data());
    else
        linalg::gemm(true, false, c, c, r, 1.0f, g, g, 0.0f, outer.data());
    float* a = gg.f32();
    for (size_t k = 0; k < outer.size(); ++k) a[k] = lerp(a[k], outer[k], w);
}

// The basis's first version: the exact eigenvectors. The 1e-30 on the diagonal is the reference's guard for an
// all-zero GG (a parameter with zero gradient), where it makes the eigenproblem well posed.
static void initial_eigenbasis(const Tensor& gg, Tensor& q) {
    const int64_t n = gg.dim(0);
    std::vector<float> a(gg.f32(), gg.f32() + n * n);
    for (int64_t k = 0; k < n; ++k) a[static_cast<size_t>(k * n + k)] += 1e-30f;
    linalg::symmetric_eigenvectors_descending(n, a.data(), q.f32());
}

// One power iteration towards GG_d's eigenbasis from the current one. The columns are first put in the order
// of their Rayleigh quotients (the estimated eigenvalues), and V's entries along dim d follow them, so that V
// keeps describing the same directions; QR then restores orthonormality.
static void refresh_eigenbasis(const Tensor& gg, Tensor& q, Tensor& v, int dim, int64_t r, int64_t c) {
    const int64_t n = gg.dim(0);
    const size_t un = static_cast<size_t>(n);
    float* qd = q.f32();
    std::vector<float> gq(un * un);  // GG Q
    linalg::gemm(false, false, n, n, n, 1.0f, gg.f32(), qd, 0.0f, gq.data());
    std::vector<float> est(un, 0.0f);  // diag(Q^T GG Q): column j's q_j . (GG q_j)
    for (size_t i = 0; i < un; ++i)
        for (size_t j = 0; j < un; ++j) est[j] += qd[i * un + j] * gq[i * un + j];
    std::vector<int64_t> order(un);
    std::iota(order.begin(), order.end(), int64_t{0});
    std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
        return est[static_cast<size_t>(x)] > est[static_cast<size_t>(y)];
    });

    // V <- V.index_select(dim, order)
    float* vd = v.f32();
    std::vector<float> old(vd, vd + r * c);
    const size_t ur = static_cast<size_t>(r), uc = static_cast<size_t>(c);
    for (size_t a = 0; a < ur; ++a)
        for (size_t b = 0; b < uc; ++b) {
            const size_t src_a = dim == 0 ? static_cast<size_t>(order[a]) : a;
            const size_t src_b = dim == 1 ? static_cast<size_t>(order[b]) : b;
            vd[a * uc + b] = old[src_a * uc + src_b];
        }

    // GG (Q[:, order]) is (GG Q)[:, order]: permute the product rather than compute it again.
    std::vector<float> power(un * un);
    for (size_t i = 0; i < un; ++i)
        for (size_t j = 0; j < un; ++j) power[i * un + j] = gq[i * un + static_cast<size_t>(order[j])];
    linalg::qr_orthonormal(n, power.data(), qd);
}

// Q_0^T X Q_1 (back: Q_0 X Q_1^T), side 0 first as the reference contracts; a side without a basis is skipped.
std::vector<float> Soap::project(const Slot& slot, const float* x, bool back) const {
    const int64_t r = slot.rows, c = slot.cols;
    std::vector<float> cur(x, x + r * c), next(cur.size());
    if (slot.q[0].defined()) {
        linalg::gemm(!back, false, r, c, r, 1.0f, slot.q[0].f32(), cur.data(), 0.0f, next.data());
        cur.swap(next);
    }
    if (slot.q[1].defined()) {
        linalg::gemm(false, back, r, c, c, 1.0f, cur.data(), slot.q[1].f32(), 0.0f, next.data());
        cur.swap(next);
    }
    return cur;
}

void Soap::first_step(Slot& slot, const float* g) {
    // GG starts at zero, so its lerp is (1 - beta_s) times the outer product.
    const float w = static_cast<float>(1.0 - static_cast<double>(cfg_.effective_shampoo_beta()));
    for (int d = 0; d < 2; ++d) {
        const size_t ud = static_cast<size_t>(d);
        if (!slot.gg[ud].defined()) continue;
        accumulate_outer(slot.gg[ud], d, g, slot.rows, slot.cols, w);
        initial_eigenbasis(slot.gg[ud], slot.q[ud]);
    }
}

void Soap::update_step(Slot& slot, const ParamInfo& info, float* p, const float* g, float lr, int64_t s) {
    const size_t numel = static_cast<size_t>(slot.rows * slot.cols);
    const std::vector<float> gp = project(slot, g, false);

    // The coefficients as the reference computes them: in double (Python floats), rounded once to f32.
    const double b1 = cfg_.beta1, b2 = cfg_.beta2;
    const float beta1 = cfg_.beta1, beta2 = cfg_.beta2;
    const float one_minus_b1 = static_cast<float>(1.0 - b1), one_minus_b2 = static_cast<float>(1.0 - b2);
    const double step_size = static_cast<double>(lr) * std::sqrt(1.0 - std::pow(b2, static_cast<double>(s))) /
                             (1.0 - std::pow(b1, static_cast<double>(s)));

    float* m = slot.m.f32();
    float* v = slot.v.f32();
    std::vector<float> adam(numel);  // M / (sqrt(V) + eps), in the eigenbasis
    for (size_t k = 0; k < numel; ++k) {
        m[k] = m[k] * beta1 + one_minus_b1 * gp[k];
        v[k] = v[k] * beta2 + one_minus_b2 * (gp[k] * gp[k]);
        adam[k] = m[k] / (std::sqrt(v[k]) + cfg_.eps);
    }
    const std::vector<float> update = project(slot, adam.data(), true);
    const float alpha = static_cast<float>(-step_size);
    for (size_t k = 0; k < numel; ++k) p[k] = p[k] + alpha * update[k];
    // Decoupled decay after the update, scaled by lr alone (not by the bias correction), as the reference does.
    if (cfg_.weight_decay > 0.0f && info.weight_decay()) {
        const float decay = static_cast<float>(-static_cast<double>(lr) * static_cast<double>(cfg_.weight_decay));
        for (size_t k = 0; k < numel; ++k) p[k] = p[k] + decay * p[k];
    }
    update_preconditioner(slot, g, s);
}

void Soap::update_preconditioner(Slot& slot, const float* g, int64_t s) {
    // M leaves the old basis before GG (and perhaps the basis) changes, and enters the new one afterwards.
    const std::vector<float> m_original = project(slot, slot.m.f32(), true);
    const float w = static_cast<float>(1.0 - static_cast<double>(cfg_.effective_shampoo_beta()));
    for (int d = 0; d < 2; ++d)
        if (slot.gg[static_cast<size_t>(d)].defined())
            accumulate_outer(slot.gg[static_cast<size_t>(d)], d, g, slot.rows, slot.cols, w);
    if (s > 0 && s % cfg_.precondition_frequency == 0)
        for (int d = 0; d < 2; ++d)
            if (slot.gg[static_cast<size_t>(d)].defined())
                refresh_eigenbasis(slot.gg[static_cast<size_t>(d)], slot.q[static_cast<size_t>(d)], slot.v, d,
                                   slot.rows, slot.cols);
    const std::vector<float> m_projected = project(slot, m_original.data(), false);
    std::copy(m_projected.begin(), m_projected.end(), slot.m.f32());
}

void Soap::set_steps_taken(int64_t steps) {
    if (steps < 0) throw std::logic_error(fmt::format("Soap::set_steps_taken({}): negative", steps));
    steps_taken_ = steps;
}

std::vector<std::pair<std::string, Tensor*>> Soap::state_tensors() {
    std::vector<std::pair<std::string, Tensor*>> out;
    for (Slot& slot : slots_) out.emplace_back("exp_avg." + slot.name, &slot.m);
    for (Slot& slot : slots_) out.emplace_back("exp_avg_sq." + slot.name, &slot.v);
    auto add_sides = [&](const char* state, std::array<Tensor, 2> Slot::*member) {
        for (size_t d = 0; d < 2; ++d)
            for (Slot& slot : slots_) {
                Tensor& t = (slot.*member)[d];
                if (t.defined()) out.emplace_back(fmt::format("{}{}.{}", state, d, slot.name), &t);
            }
    };
    add_sides("GG", &Slot::gg);
    add_sides("Q", &Slot::q);
    return out;
}

static void check_index(size_t slots, int param, int dim) {
    if (param < 0 || static_cast<size_t>(param) >= slots || dim < 0 || dim > 1)
        throw std::logic_error(fmt::format("Soap: no parameter {} side {} ({} parameters)", param, dim, slots));
}

const Tensor* Soap::eigenbasis(int param, int dim) const {
    check_index(slots_.size(), param, dim);
    const Tensor& q = slots_[static_cast<size_t>(param)].q[static_cast<size_t>(dim)];
    return q.defined() ? &q : nullptr;
}

const Tensor* Soap::preconditioner(int param, int dim) const {
    check_index(slots_.size(), param, dim);
    const Tensor& gg = slots_[static_cast<size_t>(param)].gg[static_cast<size_t>(dim)];
    return gg.defined() ? &gg : nullptr;
}

Tensor Soap::exp_avg_original_space(int param) const {
    check_index(slots_.size(), param, 0);
    const Slot& slot = slots_[static_cast<size_t>(param)];
    const std::vector<float> back = project(slot, slot.m.f32(), true);
    Tensor out = Tensor::empty(slot.m.shape(), DType::f32, Device::cpu);
    std::copy(back.begin(), back.end(), out.f32());
    return out;
}

}  // namespace nb
