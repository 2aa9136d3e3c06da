// What a checkpoint records of the data it was trained on (docs/formats.md "Data fingerprints"): each file's size
// and a fingerprint of its content, so that a resume accepts the same files under any path (relative, absolute, a
// symlink, a copy) and refuses changed ones, naming the file.
//
// The fingerprint is the SHA-256 of the file's size (8 bytes, little-endian) followed by 16 blocks of 64 KiB: the
// first, the last and 14 spread evenly between them (a file of at most 1 MiB: all of it). It reads at most 1 MiB
// per file, whatever its size, in 16 reads: for a terabyte in 100 MB shards, 10 GB in 160,000 reads, a second or
// so per 1 GB/s of read rate. It catches any change of size (an appended, truncated or re-tokenized shard), a
// shard replaced by another (they differ everywhere), and a change within the sampled blocks (the header, the
// first and the last tokens); it misses an edit of the same size that lies wholly between the samples.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nb {

struct DataFileFingerprint {
    std::string path;  // as this run names it (for messages; never compared)
    int64_t bytes = 0;
    std::string sha256;  // of the samples above, lower-case hex
    bool operator==(const DataFileFingerprint& o) const { return bytes == o.bytes && sha256 == o.sha256; }
};

// One file's; nb::RuntimeError naming it when it cannot be read.
DataFileFingerprint fingerprint_data_file(const std::string& path);

// Every file `path_or_glob` names (src/data/token_files.h token_file_paths), in order; none for "".
std::vector<DataFileFingerprint> fingerprint_data(const std::string& path_or_glob);

}  // namespace nb
