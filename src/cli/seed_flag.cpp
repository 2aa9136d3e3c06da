// --seed, for every command that takes one (train, reference, bench schedules, bench data-parallel). Its value is
// read here, not by CLI11's conversion, which wraps -1 to 2^64 - 1 and clips 2^64 to it without a word.
#include <charconv>
#include <string>

#include <fmt/format.h>

#include "src/cli/commands.h"

namespace nb::cli {

namespace {

// The decimal digits of `text` as a uint64_t, or nothing: a sign, a fraction or a value past 2^64 - 1 is no seed.
std::optional<uint64_t> parse_seed(const std::string& text) {
    uint64_t value = 0;
    const char* end = text.data() + text.size();
    const bool digits_only = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
    const auto [stop, error] = std::from_chars(text.data(), end, value);
    if (!digits_only || error != std::errc() || stop != end) return std::nullopt;
    return value;
}

}  // namespace

void add_seed_flag(CLI::App& app, uint64_t& seed, const std::string& help) {
    app.add_option_function<std::string>(
           "--seed",
           [&seed](const std::string& text) {
               const std::optional<uint64_t> value = parse_seed(text);
               // A CLI11 error, so that a --config file's value is refused with its line and key too.
               if (!value)
                   throw CLI::ValidationError(fmt::format(
                       "--seed must be a non-negative integer of at most {} (64 bits), got '{}'", UINT64_MAX, text));
               seed = *value;
           },
           help)
        ->type_name("UINT")
        ->default_str(std::to_string(seed));
}

}  // namespace nb::cli
