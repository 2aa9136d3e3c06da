#include "optim/soap.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

#include "optim/optimizer_state.h"

namespace nb {

// As AdamWConfig::validate: the flags' ranges are the registry's to check; this guards the struct's invariants.
void SoapConfig::validate() const {
    auto in_unit = [](float b) { return std::isfinite(b) && b >= 0.0f && b < 1.0f; };
    const bool ok = in_unit(beta1) && in_unit(beta2) && std::isfinite(shampoo_beta) && shampoo_beta < 1.0f &&
                    std::isfinite(eps) && eps > 0.0f && std::isfinite(weight_decay) && weight_decay >= 0.0f &&
                    precondition_frequency >= 1;
    if (!ok)
        throw std::logic_error(fmt::format("SoapConfig out of range: beta1 {} beta2 {} shampoo_beta {} eps {} "
                                           "weight_decay {} precondition_frequency {} (the optimizer registry "
                                           "checks the flags)",
                                           beta1, beta2, shampoo_beta, eps, weight_decay, precondition_frequency));
}

Soap::Soap(const ParamLayout& layout, const SoapConfig& cfg, Device device) : cfg_(cfg), device_(device) {
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
        slot.m = Tensor::zeros(info.shape, DType::f32, device);
        slot.v = Tensor::zeros(info.shape, DType::f32, device);
        // precondition_1d is off: a vector's only "side" would be the whole vector, and it gets no basis.
        if (matrix) {
            for (int d = 0; d < 2; ++d) {
                const int64_t n = info.shape[static_cast<size_t>(d)];
                if (n > cfg_.max_precond_dim) continue;
                slot.gg[static_cast<size_t>(d)] = Tensor::zeros({n, n}, DType::f32, device);
                slot.q[static_cast<size_t>(d)] = Tensor::zeros({n, n}, DType::f32, device);
            }
        }
        slots_.push_back(std::move(slot));
    }
}

// The state was sized for one layout on one device; anything else is a programming error, not a user error.
static void check_state(const ParamLayout& layout, size_t slots, Device state, Device backend) {
    if (state != backend)
        throw std::logic_error(fmt::format("Soap::step: the state lives on {} but the ops run on {}",
                                           device_name(state), device_name(backend)));
    if (static_cast<size_t>(layout.size()) != slots)
        throw std::logic_error(fmt::format("Soap::step: layout has {} params, state {}", layout.size(), slots));
}

int64_t Soap::state_bytes(const ParamLayout& layout, const SoapConfig& cfg) {
    int64_t floats = 0;
    for (const ParamInfo& info : layout.params()) {
        floats += 2 * shape_numel(info.shape);  // m, v
        if (info.shape.size() != 2) continue;
        for (const int64_t n : info.shape)
            if (n <= cfg.max_precond_dim) floats += 2 * n * n;  // GG_d and Q_d
    }
    return floats * static_cast<int64_t>(dtype_bytes(DType::f32));
}

void Soap::step(Ops& ops, const ParamLayout& layout, TensorSet& weights, const TensorSet& grads, float lr) {
    check_state(layout, slots_.size(), device_, ops.device());
    check_step_arguments("Soap", layout, weights, grads);
    // The reference counts its step from 0 at the first call and skips that call's update, so its s is the
    // number of calls before this one.
    const int64_t s = steps_taken_;
    for (int i = 0; i < layout.size(); ++i) {
        Slot& slot = slots_[static_cast<size_t>(i)];
        if (s == 0)
            first_step(ops, slot, grads[i]);
        else
            update_step(ops, slot, layout[i], weights[i], grads[i], lr, s);
    }
    steps_taken_ = s + 1;
}

// GG_d <- lerp(GG_d, outer_d, w) (torch.lerp's formula, so GG accumulates as the reference's does),
// outer_0 = G G^T [r, r], outer_1 = G^T G [c, c]; g is the gradient viewed [r, c].
static void accumulate_outer(Ops& ops, Tensor& gg, int dim, const Tensor& g, float w) {
    Tensor outer = ops.f32_output(gg.shape());
    ops.matmul(outer, g, g, dim == 1, dim == 0, 1.0f, 0.0f);
    ops.lerp_inplace(gg, outer, w);
}

// The basis's first version: the exact eigenvectors. The 1e-30 on the diagonal is the reference's guard for an
// all-zero GG (a parameter with zero gradient), where it makes the eigenproblem well posed.
static void initial_eigenbasis(Ops& ops, const Tensor& gg, Tensor& q) {
    Tensor a = ops.copy_of(gg);
    ops.add_to_diagonal(a, 1e-30f);
    ops.symmetric_eigenvectors_descending(q, a);
}

// The permutation that sorts `values` descending, ties in index order (a stable sort, as the CPU always did).
static std::vector<int64_t> descending_order(const Tensor& values_on_host) {
    const float* est = values_on_host.f32();
    std::vector<int64_t> order(static_cast<size_t>(values_on_host.numel()));
    std::iota(order.begin(), order.end(), int64_t{0});
    std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return est[x] > est[y]; });
    return order;
}

// One power iteration towards GG_d's eigenbasis from the current one. The columns are first put in the order
// of their Rayleigh quotients (the estimated eigenvalues), and V's entries along dim d follow them, so that V
// keeps describing the same directions; QR then restores orthonormality. v is the second moment viewed [r, c].
static void refresh_eigenbasis(Ops& ops, const Tensor& gg, Tensor& q, Tensor& v, int dim) {
    const int64_t n = gg.dim(0);
    Tensor gq = ops.f32_output({n, n});  // GG Q
    ops.matmul(gq, gg, q, false, false, 1.0f, 0.0f);
    Tensor estimates = ops.f32_output({n});  // diag(Q^T GG Q): column j's q_j . (GG q_j)
    ops.column_dots(estimates, q, gq);
    const std::vector<int64_t> order = descending_order(estimates.to(Device::cpu));  // n floats to the host

    // V <- V.index_select(dim, order)
    Tensor v_sorted = ops.f32_output(v.shape());
    ops.index_select(v_sorted, v, dim, order);
    ops.cast(v, v_sorted);

    // GG (Q[:, order]) is (GG Q)[:, order]: permute the product rather than compute it again.
    Tensor power = ops.f32_output({n, n});
    ops.index_select(power, gq, 1, order);
    ops.qr_orthonormal(q, power);
}

// Q_0^T X Q_1 (back: Q_0 X Q_1^T), side 0 first as the reference contracts; a side without a basis is skipped.
Tensor Soap::project(Ops& ops, const Slot& slot, const Tensor& x, bool back) const {
    const Shape matrix = {slot.rows, slot.cols};
    Tensor cur = x.reshaped(matrix);
    bool fresh = false;  // cur is a new tensor, not x
    if (slot.q[0].defined()) {
        Tensor next = ops.f32_output(matrix);
        ops.matmul(next, slot.q[0], cur, !back, false, 1.0f, 0.0f);
        cur = next;
        fresh = true;
    }
    if (slot.q[1].defined()) {
        Tensor next = ops.f32_output(matrix);
        ops.matmul(next, cur, slot.q[1], false, back, 1.0f, 0.0f);
        cur = next;
        fresh = true;
    }
    return (fresh ? cur : ops.copy_of(cur)).reshaped(x.shape());
}

void Soap::first_step(Ops& ops, Slot& slot, const Tensor& g) {
    // GG starts at zero, so its lerp is (1 - beta_s) times the outer product.
    const float w = static_cast<float>(1.0 - static_cast<double>(cfg_.effective_shampoo_beta()));
    const Tensor g_matrix = g.reshaped({slot.rows, slot.cols});
    for (int d = 0; d < 2; ++d) {
        const size_t ud = static_cast<size_t>(d);
        if (!slot.gg[ud].defined()) continue;
        accumulate_outer(ops, slot.gg[ud], d, g_matrix, w);
        initial_eigenbasis(ops, slot.gg[ud], slot.q[ud]);
    }
}

void Soap::update_step(Ops& ops, Slot& slot, const ParamInfo& info, Tensor& p, const Tensor& g, float lr,
                       int64_t s) {
    const Tensor gp = project(ops, slot, g, false);

    // The step size as the reference computes it: in double (Python floats), rounded once to f32.
    const double b1 = cfg_.beta1, b2 = cfg_.beta2;
    const double step_size = static_cast<double>(lr) * std::sqrt(1.0 - std::pow(b2, static_cast<double>(s))) /
                             (1.0 - std::pow(b1, static_cast<double>(s)));

    Tensor direction = ops.f32_output(slot.m.shape());  // M / (sqrt(V) + eps), in the eigenbasis
    ops.adam_direction(direction, slot.m, slot.v, gp, cfg_.beta1, cfg_.beta2, cfg_.eps);
    const Tensor update = project(ops, slot, direction, true);
    ops.add_scaled_inplace(p, update, static_cast<float>(-step_size));
    // Decoupled decay after the update, scaled by lr alone (not by the bias correction), as the reference does.
    if (cfg_.weight_decay > 0.0f && info.weight_decay()) {
        const float decay = static_cast<float>(-static_cast<double>(lr) * static_cast<double>(cfg_.weight_decay));
        ops.add_scaled_inplace(p, p, decay);
    }
    update_preconditioner(ops, slot, g, s);
}

void Soap::update_preconditioner(Ops& ops, Slot& slot, const Tensor& g, int64_t s) {
    // Without a basis on either side there is no GG to follow and M's change of basis is the identity.
    if (!slot.q[0].defined() && !slot.q[1].defined()) return;
    // M leaves the old basis before GG (and perhaps the basis) changes, and enters the new one afterwards.
    const Tensor m_original = project(ops, slot, slot.m, true);
    const float w = static_cast<float>(1.0 - static_cast<double>(cfg_.effective_shampoo_beta()));
    const Tensor g_matrix = g.reshaped({slot.rows, slot.cols});
    for (int d = 0; d < 2; ++d)
        if (slot.gg[static_cast<size_t>(d)].defined())
            accumulate_outer(ops, slot.gg[static_cast<size_t>(d)], d, g_matrix, w);
    if (s > 0 && s % cfg_.precondition_frequency == 0) {
        Tensor v_matrix = slot.v.reshaped({slot.rows, slot.cols});
        for (int d = 0; d < 2; ++d)
            if (slot.gg[static_cast<size_t>(d)].defined())
                refresh_eigenbasis(ops, slot.gg[static_cast<size_t>(d)], slot.q[static_cast<size_t>(d)], v_matrix, d);
    }
    const Tensor m_projected = project(ops, slot, m_original, false);
    ops.cast(slot.m, m_projected);
}

void Soap::restore_steps_taken(int64_t steps) {
    if (steps < 0) throw std::logic_error(fmt::format("soap: restore_steps_taken({}): negative", steps));
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

Tensor Soap::exp_avg_original_space(Ops& ops, int param) const {
    check_index(slots_.size(), param, 0);
    const Slot& slot = slots_[static_cast<size_t>(param)];
    return project(ops, slot, slot.m, true);
}

}  // namespace nb
