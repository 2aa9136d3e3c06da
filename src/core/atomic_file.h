// Writing a file so that it is either all there or not there at all (checkpoints, docs/DESIGN.md section 8): the bytes
// go to a temporary name beside the target, are flushed and fsynced, the temporary is renamed onto the target
// (rename is atomic within one file system), and the directory is fsynced so that the rename itself survives a
// crash. A reader therefore never sees a half-written file under the target's name; a crash leaves at most a
// stray "*.tmp.<pid>" file, never a damaged target.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace nb {

// nb::RuntimeError naming `path` and the system's reason when any step fails (the temporary is removed then).
void write_file_atomically(const std::string& path, std::string_view bytes);
// The same for a file given as pieces, written one after the other (a checkpoint's tensors, where they lie).
void write_file_atomically(const std::string& path, const std::vector<std::string_view>& pieces);

// The temporary name write_file_atomically writes `path` under in this process ("PATH.tmp.<pid>").
std::string temporary_path_of(const std::string& path);

// All of `bytes` to the open file `fd`, through short writes and EINTR; nb::RuntimeError naming `path`.
void write_all(int fd, std::string_view bytes, const std::string& path);

// The whole file, or nb::RuntimeError naming `path` and the system's reason.
std::string read_whole_file(const std::string& path);

// fsync of a directory (after creating or removing entries in it); nb::RuntimeError naming it on failure.
void sync_directory(const std::string& dir);

}  // namespace nb
