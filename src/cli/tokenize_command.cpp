// `nobubble tokenize`: a tokenizer.json's byte-level BPE (src/data/bpe_tokenizer.h) applied from the command line:
// --text or --text-file encode, printing the ids on one line, separated by spaces (as Hugging Face tokenizers'
// encode(text, add_special_tokens=False).ids); --decode "ID ID ..." writes the ids' bytes to stdout as they are
// (no newline added; an id that is not in the vocabulary is a usage error).
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <sstream>

#include <fmt/format.h>

#include "src/cli/commands.h"
#include "src/core/atomic_file.h"
#include "src/core/error.h"
#include "src/data/bpe_tokenizer.h"

namespace nb::cli {

namespace {

struct TokenizeFlags {
    std::string tokenizer, text, text_file, decode;
};

// "ID ID ...": whitespace-separated decimal ids; anything else is a usage error naming the word.
std::vector<int32_t> parse_ids(const std::string& text) {
    std::vector<int32_t> ids;
    std::istringstream words(text);
    std::string word;
    while (words >> word) {
        char* end = nullptr;
        errno = 0;
        const long long id = std::strtoll(word.c_str(), &end, 10);
        if (*end != '\0' || errno != 0 || id < 0 || id > INT32_MAX)
            throw UsageError(fmt::format("--decode: '{}' is not a token id (a non-negative integer)", word));
        ids.push_back(static_cast<int32_t>(id));
    }
    return ids;
}

int run_tokenize(const TokenizeFlags& f, const CLI::App& sub) {
    const size_t inputs = sub.count("--text") + sub.count("--text-file") + sub.count("--decode");
    if (inputs != 1) throw UsageError("tokenize needs exactly one of --text, --text-file, --decode");
    const BpeTokenizer tok = BpeTokenizer::load(f.tokenizer);
    if (sub.count("--decode") > 0) {
        const std::string bytes = tok.decode(parse_ids(f.decode));
        std::fwrite(bytes.data(), 1, bytes.size(), stdout);
        return 0;
    }
    const std::string text = sub.count("--text") > 0 ? f.text : read_whole_file(f.text_file);
    const std::vector<int32_t> ids = tok.encode(text);
    std::string line;
    for (size_t i = 0; i < ids.size(); ++i) fmt::format_to(std::back_inserter(line), "{}{}", i ? " " : "", ids[i]);
    line += '\n';
    std::fwrite(line.data(), 1, line.size(), stdout);
    return 0;
}

}  // namespace

Command add_tokenize_command(CLI::App& app) {
    auto* sub = app.add_subcommand("tokenize", "Encode text to token ids, or decode ids to text, with a Hugging Face "
                                               "byte-level BPE tokenizer.json (ids as the tokenizers library's)");
    auto flags = std::make_shared<TokenizeFlags>();
    sub->add_option("--tokenizer", flags->tokenizer, "The tokenizer.json (a byte-level BPE: GPT-2's, SmolLM's, "
                                                     "run/prepare_tokens.py's)")
        ->required();
    sub->add_option("--text", flags->text, "Encode this text; prints the ids on one line, space-separated");
    sub->add_option("--text-file", flags->text_file, "Encode this file's bytes (ill-formed UTF-8 as U+FFFD)");
    sub->add_option("--decode", flags->decode, "Decode these ids (\"ID ID ...\"); writes their bytes to stdout");
    return {sub, [flags, sub] { return run_tokenize(*flags, *sub); }};
}

}  // namespace nb::cli
