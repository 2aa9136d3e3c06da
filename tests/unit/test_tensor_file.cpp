// The checkpoint's building blocks (src/core/tensor_file.h, format 1's stage file, read for older checkpoints;
// src/core/atomic_file.h): named tensors round-trip
// bit for bit; every way a file can be damaged is an nb::RuntimeError naming the file, never a crash or a read
// outside the bytes (a bounded randomized search over bit flips, truncations and random bytes); a file written
// atomically is either the old one or the new one.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "src/core/atomic_file.h"
#include "src/core/error.h"
#include "src/core/tensor_file.h"
#include "tests/unit/sample_tensors.h"
#include "tests/unit/test_util.h"

namespace nb {

namespace {

using test::runtime_error;

using test::same_bits;
using Sample = test::SampleTensors;

}  // namespace

TEST_CASE("tensor file: named tensors round-trip in order, bit for bit") {
    const Sample s;
    const auto named = s.named();
    const std::string bytes = encode_named_tensors(named);
    const auto back = decode_named_tensors(bytes, "mem");
    REQUIRE(back.size() == named.size());
    for (size_t i = 0; i < named.size(); ++i) {
        CHECK(back[i].name == named[i].first);
        CHECK(same_bits(back[i].tensor, *named[i].second));
    }
    CHECK(decode_named_tensors(encode_named_tensors({}), "mem").empty());
    CHECK_THROWS_AS(encode_named_tensors({{"a", &s.w}, {"a", &s.b}}), std::invalid_argument);
    CHECK_THROWS_AS(encode_named_tensors({{"", &s.w}}), std::invalid_argument);
}

TEST_CASE("tensor file: each kind of damage is one error naming the file and what is wrong") {
    const Sample s;
    const std::string good = encode_named_tensors(s.named());
    CHECK(runtime_error([&] { decode_named_tensors("", "f.bin"); }) ==
          "'f.bin': not a nobubble tensor file (no NBSTATE1 header)");
    CHECK(runtime_error([&] { decode_named_tensors("NBSTATE2" + good.substr(8), "f.bin"); }).find("no NBSTATE1") !=
          std::string::npos);
    CHECK(runtime_error([&] { decode_named_tensors(good.substr(0, good.size() - 1), "f.bin"); })
              .find("'f.bin': truncated: a data size needs 8 bytes at offset") == 0);  // the last tensor is empty
    CHECK(runtime_error([&] { decode_named_tensors(good + "x", "f.bin"); }) ==
          "'f.bin': 1 bytes after the last of its 5 tensors");
    std::string bad_dtype = good;
    bad_dtype[8 + 8 + 4 + std::strlen("weights.layers.0.attn.wq")] = 9;
    CHECK(runtime_error([&] { decode_named_tensors(bad_dtype, "f.bin"); }) ==
          "'f.bin': tensor 'weights.layers.0.attn.wq' has unknown dtype code 9");
    std::string huge_count = good;
    const uint64_t count = uint64_t{1} << 60;
    std::memcpy(huge_count.data() + 8, &count, sizeof count);
    CHECK(runtime_error([&] { decode_named_tensors(huge_count, "f.bin"); }).find("says 1152921504606846976 tensors") !=
          std::string::npos);
    // A dimension that would need more bytes than the file has (and would overflow a size computed naively).
    std::string huge_dim = good;
    const int64_t dim = int64_t{1} << 62;
    std::memcpy(huge_dim.data() + 8 + 8 + 4 + std::strlen("weights.layers.0.attn.wq") + 2, &dim, sizeof dim);
    CHECK(runtime_error([&] { decode_named_tensors(huge_dim, "f.bin"); }) ==
          "'f.bin': tensor 'weights.layers.0.attn.wq' is larger than the file");
}

TEST_CASE("tensor file: random damage never crashes or reads outside the bytes (3000 cases)") {
    const Sample s;
    const std::string good = encode_named_tensors(s.named());
    const test::FuzzCounts n = test::fuzz_decode(good, 20261201, 200, "fuzz.bin", [](const std::string& bytes) {
        decode_named_tensors(bytes, "fuzz.bin");
    });
    CHECK(n.refused > 1000);
    CHECK(n.accepted > 0);
}

TEST_CASE("atomic file: the target holds the old bytes or the new, no temporary is left, errors name the path") {
    test::TempDir dir;
    const std::string path = dir.file("stage_0.bin");
    write_file_atomically(path, "first");
    CHECK(read_whole_file(path) == "first");
    write_file_atomically(path, std::string(100000, 'z'));
    CHECK(read_whole_file(path) == std::string(100000, 'z'));
    int entries = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir.path)) entries += e.is_regular_file();
    CHECK(entries == 1);
    const std::string missing = dir.file("no/such/dir/x.bin");
    CHECK(runtime_error([&] { write_file_atomically(missing, "x"); }).find("cannot create '" + missing + ".tmp.") ==
          0);
    CHECK(runtime_error([&] { read_whole_file(missing); }) ==
          "cannot open '" + missing + "': No such file or directory");
}

}  // namespace nb
