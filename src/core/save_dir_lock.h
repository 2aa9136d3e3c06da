// One run at a time writes into a checkpoint directory (--save DIR), and it finds out before its first step that
// it can: SaveDirLock::claim creates DIR, locks it for the whole run, and checks that its file system has room
// for the checkpoints the run will hold at its peak. Every failure is one nb::UsageError naming DIR (exit 2, before
// any training).
//
// The lock is flock(LOCK_EX | LOCK_NB) on DIR/.lock, opened O_CLOEXEC and held by one process of the run (the
// in-process drivers; rank 0 under mpirun) until it ends. The kernel releases a flock when the last descriptor of
// its open file goes, so a run killed by SIGKILL, a crashed node's requeued Slurm job or a job ended by its time
// limit never leaves DIR locked: only a living holder blocks. After taking the lock the holder writes its host,
// pid and start time (UTC) into the file, which a second run quotes in its error; that text is never what
// decides (it stays behind when the holder ends, and is then stale), only flock does.
//
// What this relies on: flock semantics. On a local file system (ext4, xfs, tmpfs) they are the kernel's own. On
// NFS, Linux emulates flock with fcntl byte-range locks on the whole file, which the server arbitrates (NFSv4
// natively; NFSv3 through lockd), so runs on different nodes exclude each other too. Lustre honours flock across
// clients only when mounted with `-o flock` (`-o localflock`: within one node only; neither: flock fails, and
// the error says so). GPFS / Spectrum Scale: check that your mount honours flock across nodes (not tested here).
//
// Checkpoint listing and --save-keep's pruning (src/core/checkpoint_dir.h) look only at DIR/step_<t>, so the
// lock file is never taken for a checkpoint and never removed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace nb {

inline constexpr const char* kSaveLockFile = ".lock";

class SaveDirLock {
public:
    // DIR created when missing (with its parents) and writable, locked by this process, and, where the file system
    // says how much room it has (statvfs), room for `peak_checkpoints` checkpoints of `checkpoint_bytes` each plus a
    // margin (--save-keep K: K + 1, the K kept and the one being written beside them). nb::UsageError otherwise:
    //   "--save 'DIR': cannot create the directory: Not a directory"
    //   "--save 'DIR' is not writable: cannot create 'DIR/.lock': Read-only file system"
    //   "--save 'DIR' is in use by another run (host H, pid P, started T); ..."
    //   "--save 'DIR': 3 checkpoints of about 1.2 MB ... need 3.6 MB but its file system has 60 kB free"
    static SaveDirLock claim(const std::string& dir, int64_t checkpoint_bytes, int64_t peak_checkpoints);

    SaveDirLock(SaveDirLock&& other) noexcept;
    SaveDirLock& operator=(SaveDirLock&& other) noexcept;
    SaveDirLock(const SaveDirLock&) = delete;
    SaveDirLock& operator=(const SaveDirLock&) = delete;
    ~SaveDirLock();  // closing the file releases the lock

private:
    explicit SaveDirLock(int fd) : fd_(fd) {}
    int fd_ = -1;
};

// The bytes an unprivileged writer may still use on the file system holding `dir` (statvfs: f_bavail blocks of
// f_frsize), or nothing when it cannot be asked.
std::optional<int64_t> free_disk_bytes(const std::string& dir);

}  // namespace nb
