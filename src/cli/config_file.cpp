// `--config FILE.toml` for subcommands.
//
// CLI11 2.1 reads config files for the top-level app only, so we read the file with CLI11's own TOML reader
// and splice its keys into the command line as `--key=value` right after the subcommand name. Options
// take their last value, so a flag given on the command line overrides the file.
#include <algorithm>

#include <fmt/format.h>

#include "src/cli/commands.h"
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

std::vector<std::string> config_args(CLI::App& sub, const std::string& path) {
    std::vector<CLI::ConfigItem> items;
    try {
        items = CLI::ConfigTOML().from_file(path);
    } catch (const CLI::FileError&) {
        throw UsageError(fmt::format("--config '{}': cannot read the file", path));
    } catch (const CLI::Error& e) {
        throw UsageError(fmt::format("--config '{}': {}", path, e.what()));
    }
    std::vector<std::string> out;
    for (const auto& item : items) {
        if (item.name == "++" || item.name == "--") continue;  // section markers
        const std::string flag = "--" + item.name;
        if (item.name == "config" || sub.get_option_no_throw(flag) == nullptr)
            throw UsageError(fmt::format("--config '{}': unknown key '{}' for `nobubble {}`", path, item.name,
                                         sub.get_name()));
        for (const auto& value : item.inputs) out.push_back(flag + "=" + value);
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
