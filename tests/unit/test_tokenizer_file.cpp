// A tokenizer.json's identity (src/data/tokenizer_file.h): the sha256 of its bytes, its ids (the highest + 1 over
// model.vocab and added_tokens, a Unigram vocabulary by place), the id of <|endoftext|>; one usage error naming the
// file for one that is missing or not a tokenizer.json; the default beside llm.c shards, none for byte text.
#include <doctest/doctest.h>

#include <fstream>

#include "src/core/sha256.h"
#include "src/data/tokenizer_file.h"
#include "tests/unit/test_util.h"

namespace nb {

namespace {

std::string write(const test::TempDir& dir, const std::string& name, const std::string& text) {
    std::ofstream(dir.file(name)) << text;
    return dir.file(name);
}

}  // namespace

TEST_CASE("tokenizer file: ids over the vocab and the added tokens, <|endoftext|>, the file's sha256") {
    const test::TempDir dir;
    const std::string text = R"({"added_tokens": [{"id": 7, "content": "<|endoftext|>"}, {"id": 2, "content": "<pad>"}],
        "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 5}, "merges": []}})";
    const TokenizerFile t = read_tokenizer_file(write(dir, "tokenizer.json", text));
    CHECK(t.vocab_size == 8);
    CHECK(t.eot_id == 7);
    CHECK(t.sha256 == Sha256::hex_of(text.data(), text.size()));
    CHECK(t.path == dir.file("tokenizer.json"));
    const TokenizerFile unigram = read_tokenizer_file(
        write(dir, "unigram.json", R"({"model": {"type": "Unigram", "vocab": [["<unk>", 0], ["x", -1.5], ["y", -2]]}})"));
    CHECK(unigram.vocab_size == 3);
    CHECK(!unigram.eot_id);
}

TEST_CASE("tokenizer file: missing or not a tokenizer.json is one usage error naming it") {
    const test::TempDir dir;
    const std::string missing = dir.file("missing.json");
    CHECK(test::usage_error([&] { read_tokenizer_file(missing); }) == "tokenizer '" + missing + "': no such file");
    CHECK(test::usage_error([&] { read_tokenizer_file(dir.path); }) == "tokenizer '" + dir.path + "': not a file");
    const std::string no_model = write(dir, "a.json", R"({"merges": []})");
    CHECK(test::usage_error([&] { read_tokenizer_file(no_model); }) ==
          "tokenizer '" + no_model + "' is not a Hugging Face tokenizer.json: no \"model\" object");
    const std::string no_vocab = write(dir, "b.json", R"({"model": {"type": "BPE"}})");
    CHECK(test::usage_error([&] { read_tokenizer_file(no_vocab); }).find("has no \"vocab\"") != std::string::npos);
    const std::string bad_id = write(dir, "c.json", R"({"model": {"vocab": {"a": -1}}})");
    CHECK(test::usage_error([&] { read_tokenizer_file(bad_id); }).find("not an id") != std::string::npos);
    const std::string not_json = write(dir, "d.json", "{\"model\": ");
    CHECK(test::usage_error([&] { read_tokenizer_file(not_json); }).starts_with("tokenizer: '" + not_json + "': "));
}

TEST_CASE("tokenizer file: the default is the tokenizer.json beside llm.c shards; byte text has none") {
    const test::TempDir dir;
    CHECK(!tokenizer_of_data("", dir.file("train_*.bin")));  // no tokenizer.json there: none
    write(dir, "tokenizer.json", R"({"model": {"vocab": {"a": 0, "<|endoftext|>": 1}}})");
    const auto beside = tokenizer_of_data("", dir.file("train_*.bin"));
    REQUIRE(beside);
    CHECK(beside->path == dir.file("tokenizer.json"));
    CHECK(beside->eot_id == 1);
    CHECK(tokenizer_of_data("", dir.file("shard.bin")));
    CHECK(!tokenizer_of_data("", dir.file("corpus.txt")));  // byte text: none, whatever lies beside it
    const std::string other = write(dir, "other.json", R"({"model": {"vocab": {"a": 0}}})");
    CHECK(tokenizer_of_data(other, dir.file("corpus.txt"))->vocab_size == 1);  // given: read (make_run_plan refuses)
}

}  // namespace nb
