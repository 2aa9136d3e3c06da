// The optimizer registry (optim/optimizer_registry.h) is consistent: names unique, every flag a row reads is in
// the flag table with a default of its type and in its range, every factory builds the optimizer it names, and
// validate / with_defaults / the help follow the tables.
#include <doctest/doctest.h>

#include <limits>
#include <set>
#include <stdexcept>
#include <string>

#include "optim/make_optimizer.h"
#include "optim/optimizer_registry.h"
#include "src/core/error.h"

using nb::FlagDefault;
using nb::OptimizerConfig;
using nb::OptimizerFlag;
using nb::OptimizerRow;

namespace {

const FlagDefault* default_in(const OptimizerRow& row, std::string_view flag) {
    for (const FlagDefault& d : row.reads)
        if (d.flag == flag) return &d;
    return nullptr;
}

std::string usage_error_of(const OptimizerConfig& c) {
    try {
        c.validate();
    } catch (const nb::UsageError& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("flag names and optimizer names are unique, and every flag has a reader") {
    std::set<std::string_view> flags;
    for (const OptimizerFlag& flag : nb::optimizer_flags()) {
        CHECK_MESSAGE(flags.insert(flag.name).second, "flag listed twice: ", std::string(flag.name));
        CHECK(flag.name.substr(0, 2) == "--");
        CHECK(!flag.help.empty());
        bool read = false;
        for (const OptimizerRow& row : nb::optimizer_rows()) read = read || default_in(row, flag.name);
        CHECK_MESSAGE(read, "no optimizer reads ", std::string(flag.name));
    }
    std::set<std::string_view> names;
    for (const OptimizerRow& row : nb::optimizer_rows()) {
        CHECK_MESSAGE(names.insert(row.name).second, "optimizer listed twice: ", std::string(row.name));
        CHECK(static_cast<bool>(row.make));
    }
    CHECK(nb::optimizer_names().size() == nb::optimizer_rows().size());
    CHECK(nb::optimizer_choices() == "adamw, muon, lion, adan, mars or soap");
}

TEST_CASE("every flag a row reads exists, once, with a default of its type within its range") {
    for (const OptimizerRow& row : nb::optimizer_rows()) {
        std::set<std::string_view> seen;
        for (const FlagDefault& d : row.reads) {
            INFO(std::string(row.name), " ", std::string(d.flag));
            CHECK(seen.insert(d.flag).second);
            const OptimizerFlag* flag = nb::find_optimizer_flag(d.flag);
            REQUIRE(flag != nullptr);
            if (const auto value = nb::constant_default(d)) {
                CHECK(value->index() == flag->field.index());
                CHECK(nb::in_range(flag->range, *value));
            } else {
                // A SameAs names a flag the same row reads, of the same type and range, with a value of its own.
                const std::string_view target = std::get<nb::SameAs>(d.value).flag;
                const FlagDefault* other = default_in(row, target);
                REQUIRE(other != nullptr);
                REQUIRE(nb::find_optimizer_flag(target) != nullptr);
                CHECK(nb::find_optimizer_flag(target)->field.index() == flag->field.index());
                CHECK(nb::find_optimizer_flag(target)->range == flag->range);
                CHECK(nb::constant_default(*other).has_value());
            }
        }
    }
}

TEST_CASE("with_defaults sets exactly the flags the optimizer reads, and the factory builds that optimizer") {
    nb::ParamLayout layout;
    layout.add({"embed", {8, 4}, nb::ParamKind::embedding});
    layout.add({"w", {4, 4}, nb::ParamKind::hidden_matrix});
    layout.add({"norm", {4}, nb::ParamKind::norm_gain});
    layout.add({"head", {8, 4}, nb::ParamKind::output_head});
    for (const OptimizerRow& row : nb::optimizer_rows()) {
        INFO(std::string(row.name));
        OptimizerConfig c;
        c.name = std::string(row.name);
        CHECK(usage_error_of(c).empty());
        const OptimizerConfig resolved = nb::with_defaults(c);
        CHECK(usage_error_of(resolved).empty());  // the defaults pass validate
        for (const OptimizerFlag& flag : nb::optimizer_flags())
            CHECK(nb::flag_value(resolved, flag).has_value() == (default_in(row, flag.name) != nullptr));
        const auto optimizer = nb::make_optimizer(c, layout, 1e-3, nb::Device::cpu);
        REQUIRE(optimizer != nullptr);
        CHECK(optimizer->name() == row.name);
    }
}

TEST_CASE("a given value wins over the default; SameAs follows the flag it names") {
    OptimizerConfig c;
    c.name = "soap";
    c.beta2 = 0.5f;
    const OptimizerConfig resolved = nb::with_defaults(c);
    CHECK(resolved.beta2 == 0.5f);
    CHECK(resolved.shampoo_beta == 0.5f);
    c.shampoo_beta = 0.25f;
    CHECK(nb::with_defaults(c).shampoo_beta == 0.25f);
}

TEST_CASE("validate: unknown names, flags the optimizer does not read, values out of range") {
    OptimizerConfig c;
    c.name = "sgd";
    CHECK(usage_error_of(c) == "unknown --optimizer 'sgd' (valid: adamw, muon, lion, adan, mars, soap)");
    c.name = "lion";
    c.adam_lr = 1e-3f;
    CHECK(usage_error_of(c) == "--adam-lr does not apply to --optimizer lion (it reads: --beta1 --beta2 --weight-decay)");
    c.adam_lr.reset();
    c.beta1 = 1.5f;
    CHECK(usage_error_of(c) == "--beta1 1.5 must be in [0, 1)");
    c.beta1 = std::numeric_limits<float>::quiet_NaN();
    CHECK(usage_error_of(c) == "--beta1 nan must be in [0, 1)");
    c = OptimizerConfig{};
    c.name = "muon";
    c.ns_steps = 0;
    CHECK(usage_error_of(c) == "--ns-steps 0 must be >= 1");
}

TEST_CASE("the help line names the range and every reader with its default") {
    const OptimizerFlag* beta3 = nb::find_optimizer_flag("--beta3");
    REQUIRE(beta3 != nullptr);
    CHECK(nb::optimizer_flag_help(*beta3) == "The optimizer's beta3, in [0, 1) (default: adan 0.99)");
    const OptimizerFlag* shampoo = nb::find_optimizer_flag("--shampoo-beta");
    REQUIRE(shampoo != nullptr);
    CHECK(nb::optimizer_flag_help(*shampoo) == "Preconditioner EMA, in [0, 1) (default: soap --beta2)");
    CHECK(nb::find_optimizer_flag("--lr") == nullptr);
    CHECK_THROWS_AS(nb::optimizer_row("sgd"), nb::UsageError);
}
