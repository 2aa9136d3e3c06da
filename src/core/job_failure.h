// How a multi-rank job ends when some of its ranks fail (docs/DESIGN.md section 9, "Partial failures").
//
// Under mpirun a rank that fails (a flag only it was given, a file only its node lacks, an allocation, a step)
// must not leave the others waiting for it in a collective or a receive until the job's time limit. So a failing
// rank tells every other rank at once, on a communicator of its own (a duplicate of MPI_COMM_WORLD made right
// after MPI_Init, so that no other traffic matches it):
//
//   failing rank r                          every other rank, at its next MPI wait
//   --------------                          ---------------------------------------
//   sends "failed, exit code c" to all  ->  hears it (guarded_wait below, the pipeline's event loop), sends
//                                           "well" to all, and ends with exit code c, printing nothing
//   waits (at most kAgreeMs) until every
//   lower rank said "failed" or "well";
//   prints its line only when none of them
//   failed: one line per job, the lowest
//   failing rank's
//
// Then every rank calls MPI_Finalize under a deadline (kFinalizeDeadlineMs): a rank that cannot join (stopped,
// wedged in a blocking call) would hold Finalize forever, so past the deadline the process _exits with its code
// and mpirun ends the rest. Every rank exits with the lowest failing rank's code (2 usage, 1 runtime); mpirun's
// own exit code is non-zero.
//
// Waits are also bounded when no rank fails but one never arrives (a stopped or wedged peer during set-up): a
// guarded wait that lasts the watchdog's limit (set_wait_limit_s, from --watchdog-s; 300 s until the flags are
// read) fails as the watchdog does. This makes the watchdog armed from MPI_Init, not from the first step.
//
// Without MPI (one process), or in a job of one rank, all of this does nothing.
#pragma once

#include <optional>
#include <string>

namespace nb {

// The longest a failing rank waits to learn whether a lower rank failed too (and so prints instead of it).
constexpr int kAgreeMs = 2000;
// The longest MPI_Finalize may take after a failure before the process _exits without it.
constexpr int kFinalizeDeadlineMs = 3000;

// Called by MpiSession right after MPI_Init: the communicator the notices travel on (collective).
void start_failure_notices();
// Called by MpiSession before MPI_Finalize: frees it. After a failure, arms the finalize deadline first.
void end_failure_notices();

// This rank failed: tells every other rank (once), agrees on who prints, and prints `nobubble: error: LINE`
// when this rank is the lowest that failed. Returns the code the job ends with: the lowest failing rank's.
int report_this_rank_failed(int exit_code, const std::string& line);

// The exit code of another rank's failure, when one has been announced; this rank then tells the others that it
// is well (so that a failing rank above it need not wait for it before printing). Non-blocking.
std::optional<int> another_rank_failed();

// This rank ends with a non-zero exit that the ranks agreed on in a collective (each knows it already): only
// arms the finalize deadline when the process finalizes.
void this_job_ends_with(int exit_code);

// After a failure (this rank's or another's) in the middle of a run, with transports and their helper threads
// alive: keeps every other thread out of MPI, finalizes under the deadline, flushes stdio and _exits.
[[noreturn]] void end_process_after_failure(int exit_code);

// Prints `nobubble: error: LINE` on stderr, stdout flushed first (so that the line follows what the run printed).
void print_error_line(const std::string& line);

// The watchdog's limit for guarded waits (seconds; 0: none).
void set_wait_limit_s(double limit_s);
double wait_limit_s();

}  // namespace nb
