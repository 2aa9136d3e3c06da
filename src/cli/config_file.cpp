// `--config FILE.toml` for subcommands.
//
// The file is parsed by toml++ (a complete TOML 1.0 parser that says where in the file it stopped), and each of
// its keys becomes `--key=value`, spliced into the command line right after the subcommand name (CLI11 2.1 reads
// config files for the top-level app only). Options take their last value, so a flag given on the command line
// overrides the file.
//
// Every problem of the file is one UsageError naming the file, the line and (but for a syntax error) the key,
// before anything runs: the TOML syntax and a key given twice (toml++), a key that is no flag of the subcommand,
// a value whose TOML type is not the flag's (a string for a number, an array or a table for a single value), and
// a value the flag itself refuses (its own CLI11 conversion and checks, run here on that value alone). Keys are
// top-level: a `[section]` is a table, which no flag takes. (CLI11's own reader, used before, skipped section
// headers and let damaged lines through.)
#include <algorithm>
#include <cctype>
#include <tuple>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "src/cli/commands.h"
#include "src/core/atomic_file.h"
#include "src/core/error.h"

namespace nb::cli {

namespace {

// The --config value in args[from..] (empty if absent); accepts `--config F` and `--config=F`.
std::string find_config_path(const std::vector<std::string>& args, size_t from) {
    for (size_t i = from; i < args.size(); ++i) {
        if (args[i] == "--config") {
            if (i + 1 >= args.size()) throw UsageError("--config needs a file name");
            return args[i + 1];
        }
        if (args[i].rfind("--config=", 0) == 0) return args[i].substr(9);
    }
    return {};
}

// Text from the file (a key, toml++'s description of a damaged line) fit for one line of stderr: control
// characters as \xNN.
std::string printable(std::string_view text) {
    std::string out;
    for (const char c : text) {
        const auto byte = static_cast<unsigned char>(c);
        if (byte < 0x20 || byte == 0x7f)
            out += fmt::format("\\x{:02x}", byte);
        else
            out += c;
    }
    return out;
}

// "--config 'FILE' line N", the front of every error about the file's contents.
std::string at_line(const std::string& path, const toml::source_position& where) {
    return fmt::format("--config '{}' line {}", path, where.line);
}

// The bare key that line `line` (from 1) of the file assigns (`key = ...`), or "" where it assigns none (a table
// header, a damaged line): what a syntax error names besides the line.
std::string key_on_line(const std::string& text, toml::source_index line) {
    size_t begin = 0;
    for (toml::source_index l = 1; l < line && begin != std::string::npos; ++l) {
        begin = text.find('\n', begin);
        if (begin != std::string::npos) ++begin;
    }
    if (begin == std::string::npos) return "";
    const std::string row = text.substr(begin, text.find('\n', begin) - begin);
    const size_t first = row.find_first_not_of(" \t");
    const size_t equals = row.find('=');
    if (first == std::string::npos || equals == std::string::npos || equals <= first) return "";
    std::string key = row.substr(first, row.find_last_not_of(" \t", equals - 1) + 1 - first);
    const bool bare = std::all_of(key.begin(), key.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
    });
    return bare ? key : "";
}

toml::table parse_config(const std::string& path) {
    std::string text;
    try {
        text = read_whole_file(path);
    } catch (const RuntimeError&) {
        throw UsageError(fmt::format("--config '{}': cannot read the file", path));
    }
    try {
        return toml::parse(text, path);
    } catch (const toml::parse_error& e) {
        const std::string_view what = e.description();
        const toml::source_position where = e.source().begin;
        const char* kind = what.find("cannot redefine") != std::string_view::npos ? "given twice" : "syntax error";
        const std::string key = key_on_line(text, where.line);
        throw UsageError(fmt::format("{}, column {}: {}{}: {}", at_line(path, where), where.column,
                                     key.empty() ? "" : fmt::format("key '{}': ", printable(key)), kind,
                                     printable(what)));
    }
}

// What TOML value a flag takes: a flag without a value takes true or false; an option, by its CLI11 type name
// ("INT", "UINT", "FLOAT", "TEXT", each perhaps followed by ":" and its checks), an integer, a number or a string.
enum class Expects { boolean, integer, number, string };

Expects expects(const CLI::Option& opt) {
    if (opt.get_expected_max() == 0) return Expects::boolean;  // CLI11's flags expect no value
    const std::string type = opt.get_type_name();
    const std::string base = type.substr(0, type.find(':'));
    if (base == "INT" || base == "UINT") return Expects::integer;
    if (base == "FLOAT") return Expects::number;
    return Expects::string;
}

const char* expects_name(Expects e) {
    switch (e) {
        case Expects::boolean: return "true or false";
        case Expects::integer: return "an integer";
        case Expects::number: return "a number";
        case Expects::string: return "a string";
    }
    return "?";
}

const char* toml_type_name(toml::node_type type) {
    switch (type) {
        case toml::node_type::string: return "a string";
        case toml::node_type::integer: return "an integer";
        case toml::node_type::floating_point: return "a float";
        case toml::node_type::boolean: return "a boolean";
        case toml::node_type::date: return "a date";
        case toml::node_type::time: return "a time";
        case toml::node_type::date_time: return "a date-time";
        case toml::node_type::array: return "an array";
        case toml::node_type::table: return "a table";
        case toml::node_type::none: break;
    }
    return "nothing";
}

// One scalar as the flag's value text, or nothing when its TOML type is not what the flag takes. Numbers are
// written back exactly (fmt's shortest round-trip form).
std::optional<std::string> value_text(const toml::node& value, Expects want) {
    switch (want) {
        case Expects::boolean:
            if (const auto b = value.value_exact<bool>()) return *b ? "true" : "false";
            return std::nullopt;
        case Expects::integer:
            if (const auto i = value.value_exact<int64_t>()) return fmt::format("{}", *i);
            return std::nullopt;
        case Expects::number:
            if (const auto i = value.value_exact<int64_t>()) return fmt::format("{}", *i);
            if (const auto d = value.value_exact<double>()) return fmt::format("{}", *d);
            return std::nullopt;
        case Expects::string:
            if (const auto s = value.value_exact<std::string>()) return *s;
            return std::nullopt;
    }
    return std::nullopt;
}

// A key of the file with its value and where the key stands.
struct Entry {
    std::string key;
    const toml::node* value;
    toml::source_position where;
};

// The top-level keys in the order of the file (a toml::table is sorted by key).
std::vector<Entry> entries_in_file_order(const toml::table& table) {
    std::vector<Entry> entries;
    for (const auto& [key, value] : table) entries.push_back({std::string(key.str()), &value, key.source().begin});
    std::ranges::sort(entries, [](const Entry& a, const Entry& b) {
        return std::tie(a.where.line, a.where.column) < std::tie(b.where.line, b.where.column);
    });
    return entries;
}

// The value texts of one key: one, or, for a flag that takes several values, one per element of an array.
std::vector<std::string> value_texts(const CLI::Option& opt, const Entry& e, const std::string& front) {
    const Expects want = expects(opt);
    const auto wrong = [&](const toml::node& got) {
        return UsageError(fmt::format("{}: key '{}': expected {}, got {}", front, printable(e.key), expects_name(want),
                                      toml_type_name(got.type())));
    };
    std::vector<const toml::node*> scalars;
    if (const toml::array* array = e.value->as_array(); array && opt.get_items_expected_max() > 1)
        for (const toml::node& element : *array) scalars.push_back(&element);
    else
        scalars.push_back(e.value);
    std::vector<std::string> texts;
    for (const toml::node* scalar : scalars) {
        const std::optional<std::string> text = value_text(*scalar, want);
        if (!text) throw wrong(*scalar);
        texts.push_back(*text);
    }
    return texts;
}

// The flag's own conversion and checks (a number out of its type's range, a name not among its choices) on the
// file's value alone, so that their error names the line and the key too. The option is left as unparsed as it
// was: the command line's parse gives it its value.
void check_with_option(CLI::Option& opt, const std::string& name, const std::vector<std::string>& texts,
                       const std::string& front, const std::string& key) {
    if (texts.empty()) return;  // an empty array: nothing to check (CLI11's callbacks expect a value)
    try {
        for (const std::string& text : texts)
            opt.add_result(expects(opt) == Expects::boolean ? opt.get_flag_value(name, text) : text);
        opt.run_callback();
    } catch (const CLI::ParseError& e) {
        opt.clear();
        throw UsageError(fmt::format("{}: key '{}': {}", front, printable(key), printable(e.what())));
    }
    opt.clear();
}

std::vector<std::string> config_args(CLI::App& sub, const std::string& path) {
    const toml::table table = parse_config(path);
    std::vector<std::string> out;
    for (const Entry& e : entries_in_file_order(table)) {
        const std::string front = at_line(path, e.where);
        const std::string flag = "--" + e.key;
        CLI::Option* opt = e.key == "config" ? nullptr : sub.get_option_no_throw(flag);
        if (opt == nullptr)
            throw UsageError(fmt::format("{}: unknown key '{}' for `nobubble {}`", front, printable(e.key),
                                         sub.get_name()));
        const std::vector<std::string> texts = value_texts(*opt, e, front);
        check_with_option(*opt, e.key, texts, front, e.key);
        for (const std::string& text : texts) out.push_back(flag + "=" + text);
    }
    return out;
}

}  // namespace

std::vector<std::string> expand_config_file(CLI::App& app, std::vector<std::string> args) {
    // args[0] is the program; the first argument naming a subcommand is where its flags begin.
    for (size_t i = 1; i < args.size(); ++i) {
        auto subs = app.get_subcommands([&](CLI::App* s) { return s->check_name(args[i]); });
        if (subs.empty()) continue;
        CLI::App* sub = subs.front();
        const std::string path = find_config_path(args, i + 1);
        if (path.empty()) return args;
        std::vector<std::string> extra = config_args(*sub, path);
        args.insert(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, extra.begin(), extra.end());
        return args;
    }
    return args;
}

}  // namespace nb::cli
