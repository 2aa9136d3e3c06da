// Test-only faults (the --fail-at-step, --stall-at-step and --kill-at-step flags of the fault tests): how a
// stage misbehaves on purpose, as a wedged or dead node would. Nothing here runs unless a test flag asks.
#pragma once

#include <string>
#include <string_view>

namespace nb {

// --stall-at-step: hang as a wedged rank does, without progressing and without ending (only a signal or the
// job's abort ends it).
[[noreturn]] void stall_forever();

// --kill-at-step: the process dies at once by SIGKILL (no handler, no cleanup), as when its node dies.
[[noreturn]] void die_by_sigkill();

// --kill-during checkpoint: dies halfway through writing `path` the way write_file_atomically writes it (its
// temporary name), leaving what a crash mid-write leaves.
[[noreturn]] void die_writing_half(const std::string& path, std::string_view bytes);

}  // namespace nb
