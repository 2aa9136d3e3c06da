// The optimizers' defaults and the flags each one reads. Defaults are the published ones (each optimizer's
// header says where from); AdamW keeps the LLM-pretraining defaults nobubble has always used (beta2 0.95, weight
// decay 0.1, as Megatron-LM's GPT recipes and nanoGPT) rather than torch's (0.999, 0.01).
#include "optim/make_optimizer.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include <fmt/format.h>

#include "src/core/error.h"
#include "optim/adamw.h"
#include "optim/adan.h"
#include "optim/lion.h"
#include "optim/mars.h"
#include "optim/muon.h"
#include "optim/soap.h"

namespace nb {

namespace {

// A flag and whether the config sets it.
struct Flag {
    const char* name;
    std::function<bool(const OptimizerConfig&)> is_set;
};

const std::vector<Flag>& all_flags() {
    static const std::vector<Flag> flags = {
        {"--beta1", [](const OptimizerConfig& c) { return c.beta1.has_value(); }},
        {"--beta2", [](const OptimizerConfig& c) { return c.beta2.has_value(); }},
        {"--beta3", [](const OptimizerConfig& c) { return c.beta3.has_value(); }},
        {"--eps", [](const OptimizerConfig& c) { return c.eps.has_value(); }},
        {"--weight-decay", [](const OptimizerConfig& c) { return c.weight_decay.has_value(); }},
        {"--momentum", [](const OptimizerConfig& c) { return c.momentum.has_value(); }},
        {"--nesterov", [](const OptimizerConfig& c) { return c.nesterov.has_value(); }},
        {"--ns-steps", [](const OptimizerConfig& c) { return c.ns_steps.has_value(); }},
        {"--gamma", [](const OptimizerConfig& c) { return c.gamma.has_value(); }},
        {"--precondition-frequency", [](const OptimizerConfig& c) { return c.precondition_frequency.has_value(); }},
        {"--shampoo-beta", [](const OptimizerConfig& c) { return c.shampoo_beta.has_value(); }},
        {"--adam-lr", [](const OptimizerConfig& c) { return c.adam_lr.has_value(); }},
        {"--adam-beta1", [](const OptimizerConfig& c) { return c.adam_beta1.has_value(); }},
        {"--adam-beta2", [](const OptimizerConfig& c) { return c.adam_beta2.has_value(); }},
        {"--adam-eps", [](const OptimizerConfig& c) { return c.adam_eps.has_value(); }},
        {"--adam-weight-decay", [](const OptimizerConfig& c) { return c.adam_weight_decay.has_value(); }},
    };
    return flags;
}

// The flags each optimizer reads.
const std::vector<std::string_view>& flags_of(std::string_view optimizer) {
    static const std::vector<std::pair<std::string_view, std::vector<std::string_view>>> table = {
        {"adamw", {"--beta1", "--beta2", "--eps", "--weight-decay"}},
        {"muon",
         {"--momentum", "--nesterov", "--ns-steps", "--weight-decay", "--adam-lr", "--adam-beta1", "--adam-beta2",
          "--adam-eps", "--adam-weight-decay"}},
        {"lion", {"--beta1", "--beta2", "--weight-decay"}},
        {"adan", {"--beta1", "--beta2", "--beta3", "--eps", "--weight-decay"}},
        {"mars",
         {"--beta1", "--beta2", "--eps", "--weight-decay", "--gamma", "--adam-lr", "--adam-beta1", "--adam-beta2",
          "--adam-weight-decay"}},
        {"soap", {"--beta1", "--beta2", "--eps", "--weight-decay", "--precondition-frequency", "--shampoo-beta"}},
    };
    for (const auto& [name, flags] : table)
        if (name == optimizer) return flags;
    throw UsageError(
        fmt::format("unknown --optimizer '{}' (valid: {})", optimizer, fmt::join(optimizer_names(), ", ")));
}

void require_beta(const std::optional<float>& value, const char* flag) {
    if (value && !(std::isfinite(*value) && *value >= 0.0f && *value < 1.0f))
        throw UsageError(fmt::format("{} {} must be in [0, 1)", flag, *value));
}

void require_positive(const std::optional<float>& value, const char* flag) {
    if (value && !(std::isfinite(*value) && *value > 0.0f))
        throw UsageError(fmt::format("{} {} must be > 0", flag, *value));
}

void require_non_negative(const std::optional<float>& value, const char* flag) {
    if (value && !(std::isfinite(*value) && *value >= 0.0f))
        throw UsageError(fmt::format("{} {} must be >= 0", flag, *value));
}

void require_at_least_one(const std::optional<int>& value, const char* flag) {
    if (value && *value < 1) throw UsageError(fmt::format("{} {} must be >= 1", flag, *value));
}

AdamWConfig aux_adamw(const OptimizerConfig& c, AdamWConfig defaults) {
    return {c.adam_beta1.value_or(defaults.beta1), c.adam_beta2.value_or(defaults.beta2),
            c.adam_eps.value_or(defaults.eps), c.adam_weight_decay.value_or(defaults.weight_decay)};
}

float lr_ratio(const OptimizerConfig& c, float default_adam_lr, double peak_lr) {
    return static_cast<float>(static_cast<double>(c.adam_lr.value_or(default_adam_lr)) / peak_lr);
}

}  // namespace

const std::vector<std::string_view>& optimizer_names() {
    static const std::vector<std::string_view> names = {"adamw", "muon", "lion", "adan", "mars", "soap"};
    return names;
}

void OptimizerConfig::validate() const {
    const std::vector<std::string_view>& reads = flags_of(name);
    for (const Flag& flag : all_flags())
        if (flag.is_set(*this) && std::find(reads.begin(), reads.end(), flag.name) == reads.end())
            throw UsageError(fmt::format("{} does not apply to --optimizer {} (it reads: {})", flag.name, name,
                                         fmt::join(reads, " ")));
    require_beta(beta1, "--beta1");
    require_beta(beta2, "--beta2");
    require_beta(beta3, "--beta3");
    require_beta(momentum, "--momentum");
    require_beta(shampoo_beta, "--shampoo-beta");
    require_beta(adam_beta1, "--adam-beta1");
    require_beta(adam_beta2, "--adam-beta2");
    require_positive(eps, "--eps");
    require_positive(adam_eps, "--adam-eps");
    require_positive(adam_lr, "--adam-lr");
    require_non_negative(weight_decay, "--weight-decay");
    require_non_negative(adam_weight_decay, "--adam-weight-decay");
    require_non_negative(gamma, "--gamma");
    require_at_least_one(ns_steps, "--ns-steps");
    require_at_least_one(precondition_frequency, "--precondition-frequency");
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& c, const ParamLayout& layout, double peak_lr,
                                          Device device) {
    c.validate();
    if (!(peak_lr > 0)) throw UsageError(fmt::format("--lr must be > 0, got {}", peak_lr));
    if (c.name == "adamw") {
        const AdamWConfig d;
        return std::make_unique<AdamW>(layout,
                                       AdamWConfig{c.beta1.value_or(d.beta1), c.beta2.value_or(d.beta2),
                                                   c.eps.value_or(d.eps), c.weight_decay.value_or(d.weight_decay)},
                                       device);
    }
    if (c.name == "muon") {
        MuonConfig m;
        m.momentum = c.momentum.value_or(m.momentum);
        m.nesterov = c.nesterov.value_or(m.nesterov);
        m.ns_steps = c.ns_steps.value_or(m.ns_steps);
        m.weight_decay = c.weight_decay.value_or(m.weight_decay);
        m.adam = aux_adamw(c, m.adam);
        m.adam_lr_ratio = lr_ratio(c, 3e-4f, peak_lr);
        return std::make_unique<Muon>(layout, m, device);
    }
    if (c.name == "lion") {
        LionConfig l;
        return std::make_unique<Lion>(layout,
                                      LionConfig{c.beta1.value_or(l.beta1), c.beta2.value_or(l.beta2),
                                                 c.weight_decay.value_or(l.weight_decay)},
                                      device);
    }
    if (c.name == "adan") {
        AdanConfig a;
        return std::make_unique<Adan>(layout,
                                      AdanConfig{c.beta1.value_or(a.beta1), c.beta2.value_or(a.beta2),
                                                 c.beta3.value_or(a.beta3), c.eps.value_or(a.eps),
                                                 c.weight_decay.value_or(a.weight_decay)},
                                      device);
    }
    if (c.name == "mars") {
        MarsConfig m;
        m.beta1 = c.beta1.value_or(m.beta1);
        m.beta2 = c.beta2.value_or(m.beta2);
        m.eps = c.eps.value_or(m.eps);
        m.weight_decay = c.weight_decay.value_or(m.weight_decay);
        m.gamma = c.gamma.value_or(m.gamma);
        m.adam = aux_adamw(c, m.adam);
        m.adam.eps = m.eps;  // MARS's 1-D AdamW shares its eps (the reference has no eps of its own for it)
        m.adam_lr_ratio = lr_ratio(c, 3e-3f, peak_lr);
        return std::make_unique<Mars>(layout, m, device);
    }
    // soap (flags_of has rejected every other name)
    SoapConfig s;
    s.beta1 = c.beta1.value_or(s.beta1);
    s.beta2 = c.beta2.value_or(s.beta2);
    s.shampoo_beta = c.shampoo_beta.value_or(s.shampoo_beta);
    s.eps = c.eps.value_or(s.eps);
    s.weight_decay = c.weight_decay.value_or(s.weight_decay);
    s.precondition_frequency = c.precondition_frequency.value_or(s.precondition_frequency);
    return std::make_unique<Soap>(layout, s, device);
}

}  // namespace nb
