// A stop asked of the process by a signal: SIGTERM (what Slurm and `scancel` send; also `kill`), SIGINT (Ctrl-C)
// and SIGUSR1 (Slurm's warning before the time limit with `--signal=USR1@SECONDS`; `mpirun` forwards it to every
// rank; it does not forward TERM or INT: it answers them by ending the job, docs/DESIGN.md section 9). The
// handler only records the signal, which is all a handler may safely do; the training loop reads it at the end
// of each iteration, saves a checkpoint and stops (docs/DESIGN.md section 9, src/run/checkpoint.h). A second signal
// changes nothing: the first one's save goes on, and its files are written atomically anyway.
#pragma once

namespace nb {

// Installs the handlers (idempotent). Only runs that save (--save) install them: without a place to save, a
// signal keeps its default meaning and ends the process. A SIGINT ignored at start (a shell's background job)
// stays ignored.
void install_stop_signal_handlers();

// The first stop signal received (SIGTERM, SIGINT or SIGUSR1), or 0 when none has been.
int stop_signal_received();

// Test-only: record `signal` as if it had arrived (the injected --signal-at-step).
void record_stop_signal(int signal);

// "SIGTERM", "SIGINT", "SIGUSR1", or "a signal".
const char* stop_signal_name(int signal);

}  // namespace nb
