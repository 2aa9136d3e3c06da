// NameTable: the names a command-line choice accepts and the enum values they stand for, written once next to
// the enum. Everything that names the choices is derived from it: the parser and its "unknown --flag 'x'
// (valid: a, b, c)" error, the value's name for output, the choices in --help, `nobubble --list KIND`.
//
//   inline constexpr auto kDelayFixKinds = name_table<DelayFixKind>("--delay-fix", {
//       {"none", DelayFixKind::none}, {"ef", DelayFixKind::ef, "update-level error feedback"}, ...});
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "src/core/error.h"

namespace nb {

template <typename Enum>
struct NamedValue {
    constexpr NamedValue() = default;
    constexpr NamedValue(std::string_view name_, Enum value_, std::string_view about_ = {})
        : name(name_), value(value_), about(about_) {}

    std::string_view name;   // as the command line writes it
    Enum value{};
    std::string_view about;  // optional: what the choice means, shown in --help after the name in parentheses
};

// "unknown --flag 'name' (valid: a, b, c)": the one wording of a name no table (or registry) knows.
UsageError unknown_name_error(std::string_view flag, std::string_view name, std::span<const std::string_view> valid);
// "a, b, c", as the errors list the names.
std::string comma_list(std::span<const std::string_view> names);
// "a, b or c", as --help writes the choices.
std::string or_list(std::span<const std::string> choices);

template <typename Enum, std::size_t N>
class NameTable {
public:
    constexpr NameTable(std::string_view flag, const std::array<NamedValue<Enum>, N>& entries)
        : flag_(flag), entries_(entries) {}

    std::optional<Enum> find(std::string_view name) const {
        for (const NamedValue<Enum>& e : entries_)
            if (e.name == name) return e.value;
        return std::nullopt;
    }

    // The value named `name`; anything else: unknown_name_error naming the table's flag.
    Enum parse(std::string_view name) const {
        if (const std::optional<Enum> value = find(name)) return *value;
        throw unknown_name_error(flag_, name, names());
    }

    // The value's name; "?" for a value outside the enum's declared ones.
    std::string_view name(Enum value) const {
        for (const NamedValue<Enum>& e : entries_)
            if (e.value == value) return e.name;
        return "?";
    }

    // Every value, in the table's order (a loop over all schedules, say).
    std::vector<Enum> values() const {
        std::vector<Enum> out;
        for (const NamedValue<Enum>& e : entries_) out.push_back(e.value);
        return out;
    }

    std::vector<std::string_view> names() const {
        std::vector<std::string_view> out;
        for (const NamedValue<Enum>& e : entries_) out.push_back(e.name);
        return out;
    }

    // "a, b, c".
    std::string valid_text() const { return comma_list(names()); }

    // The choices as --help lists them: "a, b (what b is) or c".
    std::string choices_text() const {
        std::vector<std::string> choices;
        for (const NamedValue<Enum>& e : entries_)
            choices.push_back(e.about.empty() ? std::string(e.name) : std::string(e.name) + " (" +
                                                                          std::string(e.about) + ")");
        return or_list(choices);
    }

private:
    std::string_view flag_;
    std::array<NamedValue<Enum>, N> entries_;
};

// The table of `Enum` for `flag`; N is counted from the braced list of entries.
template <typename Enum, std::size_t N>
constexpr NameTable<Enum, N> name_table(std::string_view flag, const NamedValue<Enum> (&entries)[N]) {
    std::array<NamedValue<Enum>, N> copy{};
    for (std::size_t i = 0; i < N; ++i) copy[i] = entries[i];
    return NameTable<Enum, N>(flag, copy);
}

}  // namespace nb
