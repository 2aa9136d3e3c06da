// The two tables (optim/optimizer_registry.h) and what is derived from them. Defaults are the published ones,
// read from each optimizer's config struct (its header says where they come from); AdamW keeps the
// LLM-pretraining defaults nobubble has always used (beta2 0.95, weight decay 0.1, as Megatron-LM's GPT recipes
// and nanoGPT) rather than torch's (0.999, 0.01).
#include "optim/optimizer_registry.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <type_traits>

#include <fmt/format.h>

#include "src/core/error.h"
#include "src/core/name_table.h"
#include "optim/adamw.h"
#include "optim/adan.h"
#include "optim/lion.h"
#include "optim/mars.h"
#include "optim/muon.h"
#include "optim/soap.h"

namespace nb {

const std::vector<OptimizerFlag>& optimizer_flags() {
    using C = OptimizerConfig;
    using R = FlagRange;
    static const std::vector<OptimizerFlag> flags = {
        {"--beta1", "The optimizer's beta1", &C::beta1, R::unit_interval},
        {"--beta2", "The optimizer's beta2", &C::beta2, R::unit_interval},
        {"--beta3", "The optimizer's beta3", &C::beta3, R::unit_interval},
        {"--eps", "The optimizer's epsilon", &C::eps, R::positive},
        {"--weight-decay", "Decoupled weight decay (never on norm gains)", &C::weight_decay, R::non_negative},
        {"--momentum", "Momentum", &C::momentum, R::unit_interval},
        {"--nesterov", "Nesterov momentum", &C::nesterov, R::any},
        {"--ns-steps", "Newton-Schulz iterations", &C::ns_steps, R::at_least_one},
        {"--gamma", "Variance-reduction scale", &C::gamma, R::non_negative},
        {"--precondition-frequency", "Steps between eigenbasis refreshes", &C::precondition_frequency,
         R::at_least_one},
        {"--shampoo-beta", "Preconditioner EMA", &C::shampoo_beta, R::unit_interval},
        // The auxiliary AdamW: it takes the parameters the optimizer leaves out (muon: embedding, head and norm
        // gains; mars: the 1-D parameters), on the same schedule scaled by --adam-lr / --lr.
        {"--adam-lr", "Peak lr of the AdamW for the parameters the optimizer leaves out", &C::adam_lr, R::positive},
        {"--adam-beta1", "That AdamW's beta1", &C::adam_beta1, R::unit_interval},
        {"--adam-beta2", "That AdamW's beta2", &C::adam_beta2, R::unit_interval},
        {"--adam-eps", "That AdamW's epsilon", &C::adam_eps, R::positive},
        {"--adam-weight-decay", "That AdamW's weight decay", &C::adam_weight_decay, R::non_negative},
    };
    return flags;
}

namespace {

// Each optimizer's config struct, from a config that with_defaults has completed; `peak_lr` is --lr.
AdamWConfig adamw_config(const OptimizerConfig& c, double) {
    return {c.beta1.value(), c.beta2.value(), c.eps.value(), c.weight_decay.value()};
}

LionConfig lion_config(const OptimizerConfig& c, double) {
    return {c.beta1.value(), c.beta2.value(), c.weight_decay.value()};
}

AdanConfig adan_config(const OptimizerConfig& c, double) {
    return {c.beta1.value(), c.beta2.value(), c.beta3.value(), c.eps.value(), c.weight_decay.value()};
}

// The auxiliary AdamW of muon and mars, and its lr as a ratio to the scheduled one.
AdamWConfig aux_adamw(const OptimizerConfig& c, float eps) {
    return {c.adam_beta1.value(), c.adam_beta2.value(), eps, c.adam_weight_decay.value()};
}

float adam_lr_ratio(const OptimizerConfig& c, double peak_lr) {
    return static_cast<float>(static_cast<double>(c.adam_lr.value()) / peak_lr);
}

MuonConfig muon_config(const OptimizerConfig& c, double peak_lr) {
    return {.momentum = c.momentum.value(),
            .nesterov = c.nesterov.value(),
            .ns_steps = c.ns_steps.value(),
            .weight_decay = c.weight_decay.value(),
            .adam = aux_adamw(c, c.adam_eps.value()),
            .adam_lr_ratio = adam_lr_ratio(c, peak_lr)};
}

// The 1-D parameters' AdamW shares MARS's eps (the reference has no eps of its own for it).
MarsConfig mars_config(const OptimizerConfig& c, double peak_lr) {
    return {.beta1 = c.beta1.value(),
            .beta2 = c.beta2.value(),
            .eps = c.eps.value(),
            .weight_decay = c.weight_decay.value(),
            .gamma = c.gamma.value(),
            .adam = aux_adamw(c, c.eps.value()),
            .adam_lr_ratio = adam_lr_ratio(c, peak_lr)};
}

SoapConfig soap_config(const OptimizerConfig& c, double) {
    return {.beta1 = c.beta1.value(),
            .beta2 = c.beta2.value(),
            .shampoo_beta = c.shampoo_beta.value(),
            .eps = c.eps.value(),
            .weight_decay = c.weight_decay.value(),
            .precondition_frequency = c.precondition_frequency.value()};  // max_precond_dim: its default
}

// The factory of optimizer `Opt`, whose config struct `config_of` fills.
template <typename Opt, auto config_of>
std::unique_ptr<Optimizer> build(const OptimizerConfig& c, const ParamLayout& layout, double peak_lr, Device device) {
    return std::make_unique<Opt>(layout, config_of(c, peak_lr), device);
}

// The state size of optimizer `Opt`. Its state's shapes do not depend on the learning rate, so any positive
// --lr stands in for config_of's.
template <typename Opt, auto config_of>
int64_t state_bytes_of(const OptimizerConfig& c, const ParamLayout& layout) {
    return Opt::state_bytes(layout, config_of(c, 1.0));
}

const OptimizerFlag& flag_named(std::string_view name) {
    const OptimizerFlag* flag = find_optimizer_flag(name);
    if (!flag) throw std::logic_error(fmt::format("the optimizer registry has no flag {}", name));
    return *flag;
}

}  // namespace

std::string value_text(const OptimizerFlagValue& value) {
    return std::visit([](auto v) { return fmt::format("{}", v); }, value);
}

std::optional<OptimizerFlagValue> constant_default(const FlagDefault& d) {
    return std::visit(
        [](auto v) -> std::optional<OptimizerFlagValue> {
            if constexpr (std::is_same_v<decltype(v), SameAs>) return std::nullopt;
            else return v;
        },
        d.value);
}

const std::vector<OptimizerRow>& optimizer_rows() {
    static const std::vector<OptimizerRow> rows = [] {
        // The defaults: each optimizer's config struct's (its header cites them), and two learning rates.
        const AdamWConfig adamw;
        const MuonConfig muon;
        const LionConfig lion;
        const AdanConfig adan;
        const MarsConfig mars;
        const SoapConfig soap;
        const float muon_adam_lr = 3e-4f;  // muon.h: the published AdamW lr
        const float mars_adam_lr = 3e-3f;  // mars.h: the published lr of the 1-D parameters
        return std::vector<OptimizerRow>{
            {"adamw",
             {{"--beta1", adamw.beta1}, {"--beta2", adamw.beta2}, {"--eps", adamw.eps},
              {"--weight-decay", adamw.weight_decay}},
             build<AdamW, adamw_config>, state_bytes_of<AdamW, adamw_config>},
            {"muon",
             {{"--momentum", muon.momentum}, {"--nesterov", muon.nesterov}, {"--ns-steps", muon.ns_steps},
              {"--weight-decay", muon.weight_decay}, {"--adam-lr", muon_adam_lr}, {"--adam-beta1", muon.adam.beta1},
              {"--adam-beta2", muon.adam.beta2}, {"--adam-eps", muon.adam.eps},
              {"--adam-weight-decay", muon.adam.weight_decay}},
             build<Muon, muon_config>, state_bytes_of<Muon, muon_config>},
            {"lion",
             {{"--beta1", lion.beta1}, {"--beta2", lion.beta2}, {"--weight-decay", lion.weight_decay}},
             build<Lion, lion_config>, state_bytes_of<Lion, lion_config>},
            {"adan",
             {{"--beta1", adan.beta1}, {"--beta2", adan.beta2}, {"--beta3", adan.beta3}, {"--eps", adan.eps},
              {"--weight-decay", adan.weight_decay}},
             build<Adan, adan_config>, state_bytes_of<Adan, adan_config>},
            {"mars",
             {{"--beta1", mars.beta1}, {"--beta2", mars.beta2}, {"--eps", mars.eps},
              {"--weight-decay", mars.weight_decay}, {"--gamma", mars.gamma}, {"--adam-lr", mars_adam_lr},
              {"--adam-beta1", mars.adam.beta1}, {"--adam-beta2", mars.adam.beta2},
              {"--adam-weight-decay", mars.adam.weight_decay}},
             build<Mars, mars_config>, state_bytes_of<Mars, mars_config>},
            {"soap",
             {{"--beta1", soap.beta1}, {"--beta2", soap.beta2}, {"--eps", soap.eps},
              {"--weight-decay", soap.weight_decay}, {"--precondition-frequency", soap.precondition_frequency},
              {"--shampoo-beta", SameAs{"--beta2"}}},  // soap.h: SoapConfig::effective_shampoo_beta
             build<Soap, soap_config>, state_bytes_of<Soap, soap_config>},
        };
    }();
    return rows;
}

const std::vector<std::string_view>& optimizer_names() {
    static const std::vector<std::string_view> names = [] {
        std::vector<std::string_view> out;
        for (const OptimizerRow& row : optimizer_rows()) out.push_back(row.name);
        return out;
    }();
    return names;
}

const OptimizerFlag* find_optimizer_flag(std::string_view name) {
    for (const OptimizerFlag& flag : optimizer_flags())
        if (flag.name == name) return &flag;
    return nullptr;
}

const OptimizerRow& optimizer_row(std::string_view name) {
    for (const OptimizerRow& row : optimizer_rows())
        if (row.name == name) return row;
    throw unknown_name_error("--optimizer", name, optimizer_names());
}

std::optional<OptimizerFlagValue> flag_value(const OptimizerConfig& config, const OptimizerFlag& flag) {
    return std::visit(
        [&](auto field) -> std::optional<OptimizerFlagValue> {
            if (const auto& value = config.*field) return *value;
            return std::nullopt;
        },
        flag.field);
}

void set_flag_value(OptimizerConfig& config, const OptimizerFlag& flag, const OptimizerFlagValue& value) {
    std::visit(
        [&](auto field) {
            using T = typename std::remove_reference_t<decltype(config.*field)>::value_type;
            config.*field = std::get<T>(value);
        },
        flag.field);
}

bool in_range(FlagRange range, const OptimizerFlagValue& value) {
    return std::visit(
        [range](auto v) {
            if constexpr (std::is_same_v<decltype(v), bool>) {
                return range == FlagRange::any;
            } else {
                if (!std::isfinite(static_cast<double>(v))) return false;
                switch (range) {
                    case FlagRange::any: return true;
                    case FlagRange::unit_interval: return v >= 0 && v < 1;
                    case FlagRange::positive: return v > 0;
                    case FlagRange::non_negative: return v >= 0;
                    case FlagRange::at_least_one: return v >= 1;
                }
                return false;
            }
        },
        value);
}

std::string_view range_text(FlagRange range) {
    switch (range) {
        case FlagRange::any: return "";
        case FlagRange::unit_interval: return "in [0, 1)";
        case FlagRange::positive: return "> 0";
        case FlagRange::non_negative: return ">= 0";
        case FlagRange::at_least_one: return ">= 1";
    }
    return "";
}

void OptimizerConfig::validate() const {
    const OptimizerRow& row = optimizer_row(name);
    std::vector<std::string_view> reads;
    for (const FlagDefault& d : row.reads) reads.push_back(d.flag);
    for (const OptimizerFlag& flag : optimizer_flags())
        if (flag_value(*this, flag) && std::find(reads.begin(), reads.end(), flag.name) == reads.end())
            throw UsageError(fmt::format("{} does not apply to --optimizer {} (it reads: {})", flag.name, name,
                                         fmt::join(reads, " ")));
    for (std::string_view read : reads) {
        const OptimizerFlag& flag = flag_named(read);
        const std::optional<OptimizerFlagValue> value = flag_value(*this, flag);
        if (value && !in_range(flag.range, *value))
            throw UsageError(fmt::format("{} {} must be {}", flag.name, value_text(*value), range_text(flag.range)));
    }
}

OptimizerConfig with_defaults(const OptimizerConfig& config) {
    OptimizerConfig c = config;
    const OptimizerRow& row = optimizer_row(c.name);
    for (const FlagDefault& d : row.reads)
        if (const auto value = constant_default(d); value && !flag_value(c, flag_named(d.flag)))
            set_flag_value(c, flag_named(d.flag), *value);
    // Then the SameAs defaults, which take the value (given or default) of the flag they name.
    for (const FlagDefault& d : row.reads)
        if (const auto* same = std::get_if<SameAs>(&d.value); same && !flag_value(c, flag_named(d.flag)))
            set_flag_value(c, flag_named(d.flag), flag_value(c, flag_named(same->flag)).value());
    return c;
}

int64_t optimizer_state_bytes(const OptimizerConfig& config, const ParamLayout& layout) {
    return optimizer_row(config.name).state_bytes(with_defaults(config), layout);
}

std::string optimizer_flag_help(const OptimizerFlag& flag) {
    std::vector<std::string> defaults;
    for (const OptimizerRow& row : optimizer_rows())
        for (const FlagDefault& d : row.reads)
            if (d.flag == flag.name) {
                const auto value = constant_default(d);
                defaults.push_back(fmt::format("{} {}", row.name,
                                               value ? value_text(*value) : std::string(std::get<SameAs>(d.value).flag)));
            }
    const std::string_view range = range_text(flag.range);
    return fmt::format("{}{}{} (default: {})", flag.help, range.empty() ? "" : ", ", range, fmt::join(defaults, ", "));
}

std::string optimizer_choices() {
    const std::vector<std::string_view>& names = optimizer_names();
    return or_list(std::vector<std::string>(names.begin(), names.end()));
}

}  // namespace nb
