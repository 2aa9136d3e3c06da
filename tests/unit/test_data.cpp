// Data: token files (text, llm.c shards, globs, every broken-file error) and the batch loader (windows, split,
// order, resume). All on real files in a fresh temporary directory.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "src/data/batch_loader.h"
#include "src/data/token_files.h"
#include "src/core/error.h"
#include "src/core/tensor.h"
#include "tests/unit/test_util.h"

using nb::BatchLoader;
using nb::LoaderPosition;
using nb::Split;
using nb::SplitSpec;
using nb::TokenCorpus;

namespace {

using nb::test::TempDir;

void write_bytes(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    REQUIRE(out.good());
}

std::string read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A raw shard: header fields as given (the rest zero) followed by token_bytes raw bytes of tokens.
void write_raw_shard(const std::string& path, int32_t magic, int32_t version, int32_t header_tokens,
                     size_t token_bytes) {
    std::string bytes(nb::kLlmcHeaderBytes + token_bytes, '\0');
    int32_t fields[3] = {magic, version, header_tokens};
    std::memcpy(bytes.data(), fields, sizeof(fields));
    for (size_t i = 0; i < token_bytes; i++) bytes[nb::kLlmcHeaderBytes + i] = static_cast<char>(i);
    write_bytes(path, bytes);
}

// Tokens first, first+1, ...: each token names its position, so a batch shows which window it came from.
std::vector<uint16_t> counting_tokens(size_t n, uint16_t first = 0) {
    std::vector<uint16_t> t(n);
    for (size_t i = 0; i < n; i++) t[i] = static_cast<uint16_t>(first + i);
    return t;
}

// Shards a.bin (counting tokens from 0) and b.bin (counting from b_first) in dir, opened together as dir/*.bin.
TokenCorpus two_shards(const TempDir& dir, size_t a_tokens, size_t b_tokens, uint16_t b_first) {
    nb::write_llmc_shard(dir.file("a.bin"), counting_tokens(a_tokens));
    nb::write_llmc_shard(dir.file("b.bin"), counting_tokens(b_tokens, b_first));
    return TokenCorpus::open(dir.file("*.bin"));
}

// Runs fn, requires an E (`name` in the failure), and checks that its message holds every piece, and where
// `one_line`, that it is one line.
template <typename E>
void check_thrown(const char* name, const std::function<void()>& fn, const std::vector<std::string>& pieces,
                  bool one_line) {
    try {
        fn();
        FAIL("expected ", name);
    } catch (const E& e) {
        const std::string msg = e.what();
        CAPTURE(msg);
        for (const std::string& p : pieces) CHECK_MESSAGE(msg.find(p) != std::string::npos, "missing: ", p);
        if (one_line) CHECK(msg.find('\n') == std::string::npos);
    }
}

void check_runtime_error(const std::function<void()>& fn, const std::vector<std::string>& pieces) {
    check_thrown<nb::RuntimeError>("nb::RuntimeError", fn, pieces, true);
}

// TokenCorpus::open(path) fails so: the message names the path and holds every piece.
void check_open_refuses(const std::string& path, std::vector<std::string> pieces) {
    pieces.insert(pieces.begin(), path);
    check_runtime_error([&] { TokenCorpus::open(path); }, pieces);
}

// A file of these bytes is refused so.
void check_bytes_refused(const std::string& path, const std::string& bytes, const std::vector<std::string>& pieces) {
    write_bytes(path, bytes);
    check_open_refuses(path, pieces);
}

void check_usage_error(const std::function<void()>& fn, const std::vector<std::string>& pieces) {
    check_thrown<nb::UsageError>("nb::UsageError", fn, pieces, false);
}

std::vector<int32_t> as_vector(const nb::Tensor& t) { return std::vector<int32_t>(t.i32(), t.i32() + t.numel()); }

// The window (its first token) of each row of a batch from counting tokens.
std::vector<int32_t> window_starts(const nb::Tensor& tokens, int64_t batch, int64_t seq_len) {
    std::vector<int32_t> starts;
    for (int64_t b = 0; b < batch; b++) starts.push_back(tokens.i32()[b * seq_len]);
    return starts;
}

}  // namespace

// ---------------------------------------------------------------- token files

TEST_CASE("data: a text file is read as byte tokens") {
    TempDir dir;
    const std::string path = dir.file("tiny.txt");
    const std::string bytes = std::string("hello\n\xff\x80 ") + '\0' + "end";
    write_bytes(path, bytes);
    TokenCorpus c = TokenCorpus::open(path);
    CHECK(c.format() == nb::TokenFormat::text_bytes);
    REQUIRE(c.num_files() == 1);
    CHECK(c.file_path(0) == path);
    REQUIRE(c.num_tokens() == static_cast<int64_t>(bytes.size()));
    auto tokens = c.file_tokens(0);
    for (size_t i = 0; i < bytes.size(); i++) CHECK(tokens[i] == static_cast<unsigned char>(bytes[i]));
    CHECK(c.max_token() == 255);
    CHECK(c.describe().find(path) != std::string::npos);
}

TEST_CASE("data: an llm.c shard written and read back") {
    TempDir dir;
    const std::string path = dir.file("shard.bin");
    std::vector<uint16_t> tokens = {0, 1, 50256, 65535, 7, 7, 300};
    nb::write_llmc_shard(path, tokens);
    CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
    // The bytes on disk are the llm.c layout.
    const std::string raw = read_bytes(path);
    REQUIRE(raw.size() == nb::kLlmcHeaderBytes + 2 * tokens.size());
    int32_t header[3];
    std::memcpy(header, raw.data(), sizeof(header));
    CHECK(header[0] == 20240520);
    CHECK(header[1] == 1);
    CHECK(header[2] == 7);

    TokenCorpus c = TokenCorpus::open(path);
    CHECK(c.format() == nb::TokenFormat::llmc_shard);
    REQUIRE(c.num_files() == 1);
    auto got = c.file_tokens(0);
    CHECK(std::vector<uint16_t>(got.begin(), got.end()) == tokens);
    CHECK(c.max_token() == 65535);

    // The open shard survives moving the corpus (the loader's owner may move it into place).
    TokenCorpus moved = std::move(c);
    auto again = moved.file_tokens(0);
    CHECK(std::vector<uint16_t>(again.begin(), again.end()) == tokens);
}

TEST_CASE("data: a glob opens its shards sorted by name") {
    TempDir dir;
    // Written out of order, with contents telling them apart.
    nb::write_llmc_shard(dir.file("train_02.bin"), counting_tokens(30, 2000));
    nb::write_llmc_shard(dir.file("train_00.bin"), counting_tokens(10, 0));
    nb::write_llmc_shard(dir.file("train_01.bin"), counting_tokens(20, 1000));
    write_bytes(dir.file("val_00.bin.txt"), "not matched");
    TokenCorpus c = TokenCorpus::open(dir.file("train_*.bin"));
    REQUIRE(c.num_files() == 3);
    CHECK(c.file_path(0) == dir.file("train_00.bin"));
    CHECK(c.file_path(1) == dir.file("train_01.bin"));
    CHECK(c.file_path(2) == dir.file("train_02.bin"));
    CHECK(c.file_tokens(1)[0] == 1000);
    CHECK(c.file_tokens(2).size() == 30);
    CHECK(c.num_tokens() == 60);
    CHECK(c.max_token() == 2029);
    CHECK(c.describe().find("3 llm.c shards") != std::string::npos);

    TokenCorpus q = TokenCorpus::open(dir.file("train_0?.bin"));
    CHECK(q.num_files() == 3);
    TokenCorpus r = TokenCorpus::open(dir.file("train_0[12].bin"));
    CHECK(r.num_files() == 2);
}

TEST_CASE("data: glob errors") {
    TempDir dir;
    const std::string nothing = dir.file("nothing_*.bin");
    check_runtime_error([&] { TokenCorpus::open(nothing); }, {"no file matches", nothing});
    write_bytes(dir.file("notes.txt"), "hello");
    nb::write_llmc_shard(dir.file("a.bin"), counting_tokens(5));
    check_runtime_error([&] { TokenCorpus::open(dir.file("*")); }, {dir.file("notes.txt"), "not an llm.c shard"});
}

TEST_CASE("data: every broken shard names the file and the problem") {
    TempDir dir;

    SUBCASE("missing file") {
        check_open_refuses(dir.file("missing.bin"), {"cannot open", "No such file or directory"});
        check_open_refuses(dir.file("missing.txt"), {"cannot open"});
    }
    SUBCASE("empty file") { check_bytes_refused(dir.file("empty.bin"), "", {"empty file (0 bytes)"}); }
    SUBCASE("shorter than the header") {
        check_bytes_refused(dir.file("short.bin"), std::string(100, 'x'),
                            {"truncated header", "100 bytes", "1024 bytes"});
    }
    SUBCASE("a header that does not fit the file: magic, version, token count") {
        struct BadHeader {
            const char* file;
            int32_t magic, version, header_tokens;
            size_t token_bytes;
            std::vector<std::string> pieces;
        };
        const BadHeader headers[] = {
            {"magic.bin", 12345, 1, 4, 8, {"wrong magic 12345", "expected 20240520"}},
            {"version.bin", 20240520, 2, 4, 8, {"unsupported shard version 2", "expected 1"}},
            {"count.bin", 20240520, 1, 10, 16, {"header says 10 tokens but the file holds 16 bytes of tokens"}},
            // An odd number of token bytes can never match.
            {"count.bin", 20240520, 1, 8, 17, {"header says 8 tokens but the file holds 17 bytes of tokens"}},
            {"count.bin", 20240520, 1, -3, 0, {"header says -3 tokens"}},
            {"zero.bin", 20240520, 1, 0, 0, {"zero tokens"}},
        };
        for (const BadHeader& h : headers) {
            CAPTURE(h.pieces[0]);
            write_raw_shard(dir.file(h.file), h.magic, h.version, h.header_tokens, h.token_bytes);
            check_open_refuses(dir.file(h.file), h.pieces);
        }
    }
    SUBCASE("empty text file") { check_bytes_refused(dir.file("empty.txt"), "", {"empty"}); }
    SUBCASE("a directory") {
        std::filesystem::create_directory(dir.file("corpus"));
        check_open_refuses(dir.file("corpus"), {"is a directory"});
        std::filesystem::create_directory(dir.file("d.bin"));
        check_open_refuses(dir.file("d.bin"), {"is a directory"});
    }
    SUBCASE("a broken shard inside a glob") {
        nb::write_llmc_shard(dir.file("s0.bin"), counting_tokens(5));
        write_raw_shard(dir.file("s1.bin"), 7, 1, 4, 8);
        check_runtime_error([&] { TokenCorpus::open(dir.file("s*.bin")); }, {dir.file("s1.bin"), "wrong magic 7"});
    }
}

// ---------------------------------------------------------------- windows and split

TEST_CASE("data: windows of seq_len+1 with stride seq_len, never across files") {
    TempDir dir;
    nb::write_llmc_shard(dir.file("a.bin"), counting_tokens(100));
    TokenCorpus one = TokenCorpus::open(dir.file("a.bin"));
    CHECK(nb::count_windows(one, 9) == 11);    // window 10 covers tokens [90, 99]
    CHECK(nb::count_windows(one, 10) == 9);    // window 8 covers [80, 90]; tokens 91..99 are dropped
    CHECK(nb::count_windows(one, 99) == 1);
    CHECK(nb::count_windows(one, 100) == 0);

    nb::write_llmc_shard(dir.file("b.bin"), counting_tokens(15, 1000));
    TokenCorpus two = TokenCorpus::open(dir.file("*.bin"));
    CHECK(nb::count_windows(two, 9) == 11 + 1);  // b: one window [0, 9], its 5-token tail dropped
    CHECK(nb::count_windows(two, 15) == 6 + 0);  // b has 15 < 16 tokens: no window
}

TEST_CASE("data: val_window_count is the ceiling, robust to rounding") {
    CHECK(nb::val_window_count(10, 0.0) == 0);
    CHECK(nb::val_window_count(10, 0.1) == 1);
    CHECK(nb::val_window_count(10, 0.15) == 2);
    CHECK(nb::val_window_count(10, 0.7) == 7);  // 0.7 * 10 = 7.000000000000001 in doubles
    CHECK(nb::val_window_count(3, 1e-12) == 1);
    CHECK(nb::val_window_count(1000, 0.999) == 999);
}

TEST_CASE("data: the split holds out the last windows for validation") {
    TempDir dir;
    const int64_t T = 8, B = 3;
    nb::write_llmc_shard(dir.file("a.bin"), counting_tokens(20 * T + 1));  // exactly 20 windows
    TokenCorpus c = TokenCorpus::open(dir.file("a.bin"));
    SplitSpec spec{0.1, nullptr};
    BatchLoader train(c, Split::train, spec, B, T, 1);
    BatchLoader val(c, Split::val, spec, 2, T, 1);
    CHECK(train.num_windows() == 18);
    CHECK(val.num_windows() == 2);

    // Validation is the last two windows, in order, then wraps.
    nb::Tensor x, y;
    val.next(x, y);
    CHECK(window_starts(x, 2, T) == std::vector<int32_t>{18 * T, 19 * T});
    val.next(x, y);
    CHECK(window_starts(x, 2, T) == std::vector<int32_t>{18 * T, 19 * T});
    CHECK(val.position() == LoaderPosition{2, 0});

    // Training never sees them.
    std::set<int32_t> seen;
    nb::Tensor tx, ty;
    for (int i = 0; i < 30; i++) {
        train.next(tx, ty);
        for (int32_t s : window_starts(tx, B, T)) seen.insert(s);
    }
    CHECK(seen.size() == 18);
    CHECK(*seen.rbegin() == 17 * T);
    CHECK(train.describe().find("train: 18 windows of 8+1 tokens") != std::string::npos);
}

TEST_CASE("data: a separate validation corpus") {
    TempDir dir;
    const int64_t T = 4;
    nb::write_llmc_shard(dir.file("train.bin"), counting_tokens(10 * T + 1));
    nb::write_llmc_shard(dir.file("val.bin"), counting_tokens(3 * T + 1, 5000));
    TokenCorpus train_c = TokenCorpus::open(dir.file("train.bin"));
    TokenCorpus val_c = TokenCorpus::open(dir.file("val.bin"));
    SplitSpec spec{0.0, &val_c};
    BatchLoader train(train_c, Split::train, spec, 2, T, 1);
    BatchLoader val(train_c, Split::val, spec, 3, T, 1);
    CHECK(train.num_windows() == 10);
    CHECK(val.num_windows() == 3);
    nb::Tensor x, y;
    val.next(x, y);
    CHECK(window_starts(x, 3, T) == std::vector<int32_t>{5000, 5000 + T, 5000 + 2 * T});
}

// ---------------------------------------------------------------- batches and order

TEST_CASE("data: targets are the tokens shifted by one, rows are [b][t]") {
    TempDir dir;
    const int64_t T = 16, B = 4;
    TokenCorpus c = two_shards(dir, 50 * T + 1, 50 * T + 1, 20000);
    BatchLoader train(c, Split::train, SplitSpec{}, B, T, 5);
    nb::Tensor x, y;
    for (int step = 0; step < 40; step++) {
        train.next(x, y);
        REQUIRE(x.shape() == nb::Shape{B * T});
        REQUIRE(y.shape() == nb::Shape{B * T});
        for (int64_t b = 0; b < B; b++) {
            const int32_t start = x.i32()[b * T];
            CHECK((start % 20000) % T == 0);  // a window start
            for (int64_t t = 0; t < T; t++) {
                REQUIRE(x.i32()[b * T + t] == start + t);
                REQUIRE(y.i32()[b * T + t] == start + t + 1);
            }
        }
    }
}

TEST_CASE("data: same seed, same batches; another seed, another order") {
    TempDir dir;
    const int64_t T = 8, B = 4;
    nb::write_llmc_shard(dir.file("a.bin"), counting_tokens(100 * T + 1));
    TokenCorpus c = TokenCorpus::open(dir.file("a.bin"));
    BatchLoader a(c, Split::train, SplitSpec{0.1}, B, T, 42);
    BatchLoader b(c, Split::train, SplitSpec{0.1}, B, T, 42);
    BatchLoader other(c, Split::train, SplitSpec{0.1}, B, T, 43);
    nb::Tensor xa, ya, xb, yb, xo, yo;
    bool all_equal_other = true;
    for (int i = 0; i < 50; i++) {
        a.next(xa, ya);
        b.next(xb, yb);
        other.next(xo, yo);
        REQUIRE(as_vector(xa) == as_vector(xb));
        REQUIRE(as_vector(ya) == as_vector(yb));
        all_equal_other = all_equal_other && as_vector(xa) == as_vector(xo);
    }
    CHECK_FALSE(all_equal_other);
}

TEST_CASE("data: every training window exactly once per epoch, a new order each epoch") {
    TempDir dir;
    const int64_t T = 4, B = 4;
    nb::write_llmc_shard(dir.file("a.bin"), counting_tokens(18 * T + 1));
    TokenCorpus c = TokenCorpus::open(dir.file("a.bin"));
    BatchLoader train(c, Split::train, SplitSpec{}, B, T, 3);
    REQUIRE(train.num_windows() == 18);
    // 9 batches of 4 = 36 windows = two epochs; batch 5 spans the boundary (windows 16..19).
    std::vector<int32_t> visits;
    nb::Tensor x, y;
    for (int i = 0; i < 9; i++) {
        train.next(x, y);
        for (int32_t s : window_starts(x, B, T)) visits.push_back(s / T);
    }
    CHECK(train.position() == LoaderPosition{2, 0});
    std::vector<int32_t> epoch0(visits.begin(), visits.begin() + 18), epoch1(visits.begin() + 18, visits.end());
    std::vector<int32_t> sorted0 = epoch0, sorted1 = epoch1, all(18);
    std::sort(sorted0.begin(), sorted0.end());
    std::sort(sorted1.begin(), sorted1.end());
    for (int i = 0; i < 18; i++) all[i] = i;
    CHECK(sorted0 == all);
    CHECK(sorted1 == all);
    CHECK(epoch0 != epoch1);
    CHECK(epoch0 != all);  // shuffled, not in file order
}

TEST_CASE("data: the epoch shuffle is unbiased (all orders of 3 windows equally often)") {
    // A Fisher-Yates off by one (e.g. Sattolo's variant) still visits every window once, but makes some orders
    // impossible; count the orders of 3 windows over 1200 epochs: each of the 6 should appear ~200 times.
    TempDir dir;
    const int64_t T = 2;
    nb::write_llmc_shard(dir.file("a.bin"), counting_tokens(3 * T + 1));
    TokenCorpus c = TokenCorpus::open(dir.file("a.bin"));
    BatchLoader train(c, Split::train, SplitSpec{}, 3, T, 2024);
    std::map<std::vector<int32_t>, int> counts;
    nb::Tensor x, y;
    for (int epoch = 0; epoch < 1200; epoch++) {
        train.next(x, y);  // one batch of 3 = exactly one epoch
        counts[window_starts(x, 3, T)]++;
    }
    CHECK(counts.size() == 6);
    for (const auto& [order, n] : counts) CHECK(std::abs(n - 200) < 65);  // sd ~12.9; 5 sigma
}

TEST_CASE("data: position and seek resume with identical batches") {
    TempDir dir;
    const int64_t T = 8, B = 3;
    TokenCorpus c = two_shards(dir, 25 * T + 1, 12 * T + 5, 30000);
    const SplitSpec spec{0.2};
    BatchLoader a(c, Split::train, spec, B, T, 11);
    REQUIRE(a.num_windows() == 37 - 8);
    nb::Tensor x, y, x2, y2;
    CHECK(a.position() == LoaderPosition{0, 0});
    for (int stop : {0, 4, 9, 10, 23}) {  // positions inside epochs 0, 1 and 2
        CAPTURE(stop);
        a.reset();
        for (int i = 0; i < stop; i++) a.next(x, y);
        const LoaderPosition pos = a.position();
        BatchLoader b(c, Split::train, spec, B, T, 11);
        b.seek(pos);
        CHECK(b.position() == pos);
        for (int i = 0; i < 15; i++) {
            a.next(x, y);
            b.next(x2, y2);
            REQUIRE(as_vector(x) == as_vector(x2));
            REQUIRE(as_vector(y) == as_vector(y2));
        }
    }
    // 10 batches of 3 = 30 windows = one epoch of 29 and one window.
    a.reset();
    for (int i = 0; i < 10; i++) a.next(x, y);
    CHECK(a.position() == LoaderPosition{1, 1});

    check_runtime_error([&] { a.seek(LoaderPosition{0, 29}); }, {dir.file("*.bin"), "past the 29 train windows"});
}

TEST_CASE("data: validation resets to the same batches") {
    TempDir dir;
    const int64_t T = 8;
    nb::write_llmc_shard(dir.file("a.bin"), counting_tokens(40 * T + 1));
    TokenCorpus c = TokenCorpus::open(dir.file("a.bin"));
    BatchLoader val(c, Split::val, SplitSpec{0.25}, 3, T, 1);
    REQUIRE(val.num_windows() == 10);
    nb::Tensor x, y;
    std::vector<std::vector<int32_t>> first, second;
    for (int i = 0; i < 4; i++) {
        val.next(x, y);
        first.push_back(as_vector(x));
    }
    val.reset();
    for (int i = 0; i < 4; i++) {
        val.next(x, y);
        second.push_back(as_vector(x));
    }
    CHECK(first == second);
    CHECK(window_starts(x, 3, T) == std::vector<int32_t>{39 * T, 30 * T, 31 * T});  // the 4th batch wraps
}

TEST_CASE("data: batch tensors are allocated when undefined and checked when given") {
    TempDir dir;
    nb::write_llmc_shard(dir.file("a.bin"), counting_tokens(100));
    TokenCorpus c = TokenCorpus::open(dir.file("a.bin"));
    BatchLoader train(c, Split::train, SplitSpec{}, 2, 4, 1);
    nb::Tensor x = nb::Tensor::zeros({2, 4}, nb::DType::i32), y;
    train.next(x, y);  // a [B, T] tensor has the right element count
    CHECK(y.shape() == nb::Shape{8});
    CHECK(y.dtype() == nb::DType::i32);
    nb::Tensor wrong = nb::Tensor::zeros({7}, nb::DType::i32), f32 = nb::Tensor::zeros({8});
    CHECK_THROWS_AS(train.next(wrong, y), std::invalid_argument);
    CHECK_THROWS_AS(train.next(x, f32), std::invalid_argument);
}

// ---------------------------------------------------------------- loader errors

TEST_CASE("data: loader flag errors are UsageErrors naming the flag") {
    TempDir dir;
    nb::write_llmc_shard(dir.file("a.bin"), counting_tokens(1000));
    TokenCorpus c = TokenCorpus::open(dir.file("a.bin"));
    check_usage_error([&] { BatchLoader(c, Split::train, SplitSpec{}, 0, 8, 1); }, {"--micro-batch-size", "got 0"});
    check_usage_error([&] { BatchLoader(c, Split::train, SplitSpec{}, 4, -1, 1); }, {"--seq-length", "got -1"});
    check_usage_error([&] { BatchLoader(c, Split::train, SplitSpec{1.0}, 4, 8, 1); }, {"--val-fraction", "got 1"});
    check_usage_error([&] { BatchLoader(c, Split::train, SplitSpec{-0.1}, 4, 8, 1); }, {"--val-fraction", "-0.1"});
    check_usage_error([&] { BatchLoader(c, Split::train, SplitSpec{std::nan("")}, 4, 8, 1); }, {"--val-fraction"});
    check_usage_error([&] { BatchLoader(c, Split::val, SplitSpec{}, 4, 8, 1); }, {"no validation split"});
    check_usage_error([&] { BatchLoader(c, Split::train, SplitSpec{0.1, &c}, 4, 8, 1); },
                      {"--val-fraction", "cannot both"});
}

TEST_CASE("data: too little data is a RuntimeError naming the data, seq-length and counts") {
    TempDir dir;
    const std::string path = dir.file("small.txt");
    write_bytes(path, std::string(150, 'a'));
    TokenCorpus c = TokenCorpus::open(path);
    check_runtime_error([&] { BatchLoader(c, Split::train, SplitSpec{}, 4, 200, 1); },
                        {path, "150 tokens make 0 windows of seq-length 200+1"});
    // 150 tokens, T = 10: 14 windows, 2 held out, 12 < 16.
    check_runtime_error([&] { BatchLoader(c, Split::train, SplitSpec{0.1}, 16, 10, 1); },
                        {path, "12 training windows of seq-length 10+1", "2 of 14 held out",
                         "fewer than the batch size 16 (--micro-batch-size)"});
    // Validation may be smaller than a batch: it wraps.
    BatchLoader val(c, Split::val, SplitSpec{0.1}, 16, 10, 1);
    CHECK(val.num_windows() == 2);

    // Shards each too short for one window: the message says windows do not cross files.
    nb::write_llmc_shard(dir.file("s0.bin"), counting_tokens(6));
    nb::write_llmc_shard(dir.file("s1.bin"), counting_tokens(6));
    TokenCorpus shards = TokenCorpus::open(dir.file("s*.bin"));
    check_runtime_error([&] { BatchLoader(shards, Split::train, SplitSpec{}, 1, 8, 1); },
                        {dir.file("s*.bin"), "12 tokens make 0 windows of seq-length 8+1", "file boundaries"});

    // An empty validation corpus is named as such.
    TokenCorpus tiny_val = TokenCorpus::open(dir.file("s0.bin"));
    check_runtime_error([&] { BatchLoader(c, Split::val, SplitSpec{0.0, &tiny_val}, 1, 8, 1); },
                        {dir.file("s0.bin"), "6 tokens make 0 windows"});
}

TEST_CASE("data: random damage to an llm.c shard is an error naming it or a readable corpus, never a crash") {
    // Bounded (2000 cases, about a second): bit flips anywhere (the header's magic, version and token count
    // included), truncations, and random bytes behind a valid header.
    TempDir dir;
    const std::string good_path = dir.file("good.bin");
    nb::write_llmc_shard(good_path, counting_tokens(300, 7));
    std::ifstream in(good_path, std::ios::binary);
    const std::string good((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::mt19937_64 rng(1201);
    int errors = 0, opened = 0;
    for (int c = 0; c < 2000; ++c) {
        std::string bytes = good;
        switch (c % 3) {
            case 0:
                for (int k = 0; k <= static_cast<int>(rng() % 3); ++k) {
                    const size_t at = c % 2 ? rng() % 12 : rng() % bytes.size();  // half of them in the header
                    bytes[at] ^= static_cast<char>(1 << (rng() % 8));
                }
                break;
            case 1: bytes.resize(rng() % bytes.size()); break;
            default:
                bytes.resize(nb::kLlmcHeaderBytes);
                for (size_t k = rng() % 400; k > 0; --k) bytes += static_cast<char>(rng());
        }
        const std::string path = dir.file("fuzz.bin");
        write_bytes(path, bytes);
        try {
            const TokenCorpus corpus = TokenCorpus::open(path);
            int64_t sum = corpus.max_token();  // reads every token of the file
            for (uint16_t t : corpus.file_tokens(0)) sum += t;
            CHECK(sum >= 0);
            ++opened;
        } catch (const nb::RuntimeError& e) {
            CHECK(std::string(e.what()).find(path) != std::string::npos);
            ++errors;
        }
    }
    CHECK(errors > 500);
    CHECK(opened > 0);
}
