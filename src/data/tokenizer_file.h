// The tokenizer that made a run's token ids (docs/formats.md, "Data and batches"): a Hugging Face tokenizer.json
// (run/prepare_tokens.py writes one beside its shards), known to the trainer by its identity only: the file's
// sha256, its number of ids and the id of "<|endoftext|>". A checkpoint records that identity and keeps a copy of
// the file, and `export` writes it into the Hugging Face folder with the files transformers' AutoTokenizer reads.
// Encoding is not done here (the merges are not read).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace nb {

inline constexpr const char* kTokenizerFileName = "tokenizer.json";
inline constexpr const char* kEndOfText = "<|endoftext|>";

struct TokenizerFile {
    std::string path;             // as given (for messages and to copy it)
    std::string sha256;           // of the file's bytes, lower-case hex
    int64_t vocab_size = 0;       // the highest id + 1, over model.vocab and added_tokens
    std::optional<int32_t> eot_id;  // the id of "<|endoftext|>", where the tokenizer has it
};

// The identity of the tokenizer.json at `path`. nb::UsageError, one line naming the file, when it cannot be read
// or is not a tokenizer.json (JSON with a "model" object holding a "vocab" of ids).
TokenizerFile read_tokenizer_file(const std::string& path);

// The bytes of `tokenizer`'s file, which must still be those its identity was read from (a checkpoint's copy, an
// export's); nb::RuntimeError naming the file where they are not.
std::string read_tokenizer_bytes(const TokenizerFile& tokenizer);

// The tokenizer of a run on `data_path`: `given` (--tokenizer) where not empty; otherwise, where the data are llm.c
// shards (a *.bin path or a glob), the tokenizer.json in their folder (the folder of the path as written) if one is
// there; otherwise none (byte text is its own vocabulary of 256).
std::optional<TokenizerFile> tokenizer_of_data(const std::string& given, const std::string& data_path);

}  // namespace nb
