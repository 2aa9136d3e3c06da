// nobubble: pipeline-parallel LLM pretraining. This file only parses the command line and turns every
// failure into one line `nobubble: error: ...` with exit code 2 (usage) or 1 (runtime).
//
// Under mpirun every rank runs this program, usually on the same command line, so a usage error is usually found
// by every rank alike: rank 0 alone prints it, and every rank exits 2. When only some ranks fail (their own flags
// or files, an allocation), the others are told and end with the same code, and the lowest failing rank prints
// (src/core/job_failure.h). An error during a pipeline run ends the job the same way (src/run/pipeline_driver.h).
#include <algorithm>
#include <cstdio>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "src/cli/choice_lists.h"
#include "src/cli/commands.h"
#include "src/core/error.h"
#include "src/core/job_failure.h"
#include "src/core/mpi_env.h"
#include "src/core/name_table.h"

namespace {

// This rank failed: under mpirun the other ranks are told (they may be waiting for this one in a collective),
// and the lowest rank that failed prints the line, once for the job (src/core/job_failure.h). A line from a rank
// other than 0 names it.
int fail(const std::string& what, int code) {
    const int rank = nb::mpi_world_rank();
    return nb::report_this_rank_failed(code, rank == 0 ? what : fmt::format("rank {}: {}", rank, what));
}

// Another rank reported the error: this one exits with its code.
int reported_elsewhere(const nb::ReportedElsewhere& e) {
    nb::this_job_ends_with(e.exit_code);
    return e.exit_code;
}

// The subcommand named first on the command line, checked before CLI11 parses (CLI11 would say only "A
// subcommand is required"): an error naming the word it did not know and the known ones, or nothing. Words that
// begin with '-' (--help) are CLI11's.
std::vector<std::string> subcommand_names(std::span<const nb::cli::Command> commands) {
    std::vector<std::string> names;
    for (const auto& command : commands) names.push_back(command.app->get_name());
    return names;
}

std::string no_subcommand_error(std::span<const nb::cli::Command> commands) {
    return fmt::format("no subcommand given (one of: {})", fmt::join(subcommand_names(commands), ", "));
}

std::optional<std::string> subcommand_error(int argc, char** argv, std::span<const nb::cli::Command> commands) {
    const std::vector<std::string> names = subcommand_names(commands);
    if (argc < 2) return no_subcommand_error(commands);
    const std::string first = argv[1];
    if (first.starts_with("-") || std::ranges::find(names, first) != names.end()) return std::nullopt;
    return fmt::format("unknown subcommand '{}' (one of: {})", first, fmt::join(names, ", "));
}

// --list KIND: the names, one per line (a script's list of optimizers, schedules, ...).
int print_choice_names(const std::string& kind) {
    for (const std::string& name : nb::cli::choice_names(kind)) fmt::print("{}\n", name);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    nb::MpiSession mpi(argc, argv);  // MPI_Init_thread under mpirun; MPI_Finalize when main returns
    CLI::App app{"nobubble: pipeline-parallel LLM pretraining (sync 1F1B, GPipe, PipeDream, PipeDream-2BW)",
                 "nobubble"};
    // A subcommand, or --list alone (checked after parsing: CLI11 would demand a subcommand).
    app.require_subcommand(0, 1);
    std::string list_kind;
    CLI::Option* list_option = app.add_option("--list", list_kind,
                   fmt::format("Print the names KIND accepts, one per line, and exit (KIND: {})",
                               nb::comma_list(nb::cli::choice_kinds())))
        ->option_text("KIND");
    // A flag given twice takes its last value: the command line overrides a --config file.
    app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    app.set_help_all_flag("--help-all", "Show help for every subcommand");
    const nb::cli::Command commands[] = {nb::cli::add_train_command(app), nb::cli::add_info_command(app),
                                         nb::cli::add_bench_command(app), nb::cli::add_schedule_command(app),
                                         nb::cli::add_reference_command(app), nb::cli::add_export_command(app),
                                         nb::cli::add_eval_command(app),
                                         nb::cli::add_generate_command(app), nb::cli::add_tokenize_command(app)};
    if (const auto error = subcommand_error(argc, argv, commands)) return fail(*error, nb::kExitUsage);
    try {
        std::vector<std::string> args = nb::cli::expand_config_file(app, std::vector<std::string>(argv, argv + argc));
        std::vector<const char*> c_args;
        for (const auto& a : args) c_args.push_back(a.c_str());
        app.parse(static_cast<int>(c_args.size()), c_args.data());
    } catch (const nb::UsageError& e) {
        return fail(e.what(), nb::kExitUsage);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        return fail(e.what(), nb::kExitUsage);
    }
    try {
        const auto parsed = std::ranges::find_if(commands, [](const auto& command) { return command.app->parsed(); });
        if (list_option->count() > 0) {
            if (parsed != std::end(commands))
                return fail(fmt::format("--list takes no subcommand (got '{}')", parsed->app->get_name()),
                            nb::kExitUsage);
            return print_choice_names(list_kind);
        }
        if (parsed != std::end(commands)) {
            const int code = parsed->run();
            // MPI_Finalize waits for every rank, with no bound: a rank that is stopped or wedged at the end would
            // hold the others there forever. This meeting is bounded by the watchdog (src/core/job_failure.h).
            nb::mpi_wait_for_every_rank("the end of the job");
            return code;
        }
        return fail(no_subcommand_error(commands), nb::kExitUsage);
    } catch (const nb::ReportedElsewhere& e) {
        return reported_elsewhere(e);
    } catch (const nb::UsageError& e) {
        return fail(e.what(), nb::kExitUsage);
    } catch (const nb::RuntimeError& e) {
        return fail(e.what(), nb::kExitRuntime);
    } catch (const std::exception& e) {
        return fail(nb::error_text(e), nb::kExitRuntime);
    }
}
