// The optimizer registry: every optimizer hyperparameter flag once (its name, what it means, its valid range and
// the OptimizerConfig field it lands in), and one row per optimizer (its name, the flags it reads with their
// published defaults, its factory). Everything else is derived from these two tables: the command line's flags
// and their help (src/cli/train_flags.cpp loops over optimizer_flags()), the names in --optimizer's help and in
// its error, OptimizerConfig::validate, the defaults make_optimizer fills in.
//
// A new optimizer: its row in optimizer_rows() (optim/optimizer_registry.cpp), plus its kernels and its oracle
// (docs/ARCHITECTURE.md, "Where a change goes"). A new hyperparameter: its field in OptimizerConfig and its row
// in optimizer_flags(). Plain data: no command-line library here (the floors: src/cli makes the CLI11 calls).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "model/params.h"
#include "optim/optimizer.h"
#include "optim/optimizer_config.h"
#include "src/core/tensor.h"

namespace nb {

// A flag's value, of its field's type (the same order as OptimizerFlag::Field's alternatives).
using OptimizerFlagValue = std::variant<float, int, bool>;

// What a flag accepts; floats must also be finite. The usage error says "--beta1 1.5 must be in [0, 1)".
enum class FlagRange {
    any,            // (a bool)
    unit_interval,  // in [0, 1): betas, momenta
    positive,       // > 0: epsilons, learning rates
    non_negative,   // >= 0: weight decays, scales
    at_least_one,   // >= 1: iteration counts, intervals
};

struct OptimizerFlag {
    using Field = std::variant<std::optional<float> OptimizerConfig::*, std::optional<int> OptimizerConfig::*,
                               std::optional<bool> OptimizerConfig::*>;
    std::string_view name;  // "--beta1"
    std::string_view help;  // what it is; optimizer_flag_help adds its range and who reads it with which default
    Field field;            // where a given value lands
    FlagRange range;
};

// A default that is another flag's value (soap: --shampoo-beta defaults to --beta2).
struct SameAs {
    std::string_view flag;
};

// A flag an optimizer reads and its default there (the published one; the optimizer's header says where from).
struct FlagDefault {
    std::string_view flag;
    std::variant<float, int, bool, SameAs> value;  // the first three as OptimizerFlagValue
};

// The default as a value; nullopt for a SameAs.
std::optional<OptimizerFlagValue> constant_default(const FlagDefault& d);

// Builds the optimizer from a config that has a value for every flag the row reads (with_defaults); `peak_lr` is
// --lr (optimizers with an auxiliary AdamW scale its lr by --adam-lr / --lr).
using OptimizerFactory = std::unique_ptr<Optimizer> (*)(const OptimizerConfig& resolved, const ParamLayout& layout,
                                                         double peak_lr, Device device);

// The bytes of state that optimizer would allocate for `layout` (its static state_bytes), from a resolved config.
using OptimizerStateBytes = int64_t (*)(const OptimizerConfig& resolved, const ParamLayout& layout);

struct OptimizerRow {
    std::string_view name;            // --optimizer NAME
    std::vector<FlagDefault> reads;   // in the order the "does not apply" error lists them and validate checks them
    OptimizerFactory make;
    OptimizerStateBytes state_bytes;
};

// The tables, in the order --help and the errors list them.
const std::vector<OptimizerFlag>& optimizer_flags();
const std::vector<OptimizerRow>& optimizer_rows();

// "adamw", "muon", "lion", "adan", "mars", "soap" (the rows' names).
const std::vector<std::string_view>& optimizer_names();
// The flag named `name`, or nullptr.
const OptimizerFlag* find_optimizer_flag(std::string_view name);
// The row named `name`; nb::UsageError "unknown --optimizer 'NAME' (valid: adamw, muon, ...)" otherwise.
const OptimizerRow& optimizer_row(std::string_view name);

// The value `config` holds for `flag`, if any; set one (its type must be the field's).
std::optional<OptimizerFlagValue> flag_value(const OptimizerConfig& config, const OptimizerFlag& flag);
void set_flag_value(OptimizerConfig& config, const OptimizerFlag& flag, const OptimizerFlagValue& value);
bool in_range(FlagRange range, const OptimizerFlagValue& value);
// The value as the command line writes it ("0.95", "5", "true").
std::string value_text(const OptimizerFlagValue& value);
// "in [0, 1)", "> 0", ">= 0", ">= 1"; "" for FlagRange::any.
std::string_view range_text(FlagRange range);

// `config` (validated) with every flag its optimizer reads set: the given values, the rest the row's defaults.
OptimizerConfig with_defaults(const OptimizerConfig& config);

// The bytes of state the optimizer of `config` (validated) keeps for `layout`, without allocating it.
int64_t optimizer_state_bytes(const OptimizerConfig& config, const ParamLayout& layout);

// The help line of a flag: what it is, its range and each optimizer that reads it with its default, e.g.
// "The optimizer's beta3, in [0, 1) (default: adan 0.99)".
std::string optimizer_flag_help(const OptimizerFlag& flag);
// "adamw, muon, lion, adan, mars or soap".
std::string optimizer_choices();

}  // namespace nb
