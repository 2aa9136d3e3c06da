// The byte-level BPE tokenizer's parts (src/data/): UTF-8 replacement as Python's bytes.decode("utf-8",
// "replace"), GPT-2's pre-tokenizer pattern, the Digits split, the merge order. The whole tokenizer against Hugging
// Face tokenizers: tests/interop/test_hf_bpe_tokenizer.py.
#include <doctest/doctest.h>

#include <string>
#include <string_view>
#include <vector>

#include "src/data/bpe_merges.h"
#include "src/data/byte_level_alphabet.h"
#include "src/data/byte_level_split.h"
#include "src/data/unicode_classes.h"
#include "src/data/utf8.h"

namespace {

const std::string kFffd = "\xEF\xBF\xBD";

std::vector<std::string> strings(const std::vector<std::string_view>& views) { return {views.begin(), views.end()}; }

}  // namespace

TEST_CASE("ill-formed UTF-8 becomes one U+FFFD per maximal subpart, as Python's decode('utf-8', 'replace')") {
    // Each expectation is what Python 3.11 prints for b"...".decode("utf-8", "replace").
    const std::string valid = "plain ascii, caf\xC3\xA9, \xF0\x9F\x98\x80";
    CHECK(nb::replace_invalid_utf8(valid) == valid);
    CHECK(nb::replace_invalid_utf8("\xE2\x82" "A") == kFffd + "A");            // truncated 3-byte: one
    CHECK(nb::replace_invalid_utf8("\xC0\xAF") == kFffd + kFffd);             // C0 starts nothing
    CHECK(nb::replace_invalid_utf8("\xED\xA0\x80") == kFffd + kFffd + kFffd);  // a surrogate: ED's 2nd byte <= 9F
    CHECK(nb::replace_invalid_utf8("\xF0\x9F\x98") == kFffd);                 // truncated 4-byte at the end
    CHECK(nb::replace_invalid_utf8("\xF4\x90\x80\x80") == kFffd + kFffd + kFffd + kFffd);  // above U+10FFFF
    CHECK(nb::replace_invalid_utf8("\xE0\x80\x80") == kFffd + kFffd + kFffd);  // overlong
    CHECK(nb::replace_invalid_utf8("a\x80\xFF" "b") == "a" + kFffd + kFffd + "b");
    CHECK(nb::replace_invalid_utf8(kFffd) == kFffd);  // a real U+FFFD stays
}

TEST_CASE("the Unicode classes: White_Space is not Python's isspace") {
    CHECK(nb::is_unicode_white_space(0x85));
    CHECK(nb::is_unicode_white_space(0x3000));
    CHECK_FALSE(nb::is_unicode_white_space(0x1C));  // str.isspace() is True for U+001C..U+001F
    CHECK_FALSE(nb::is_unicode_white_space(0x200B));
    CHECK(nb::is_unicode_letter(U'ß'));
    CHECK(nb::is_unicode_letter(0x65E5));  // 日
    CHECK(nb::is_unicode_number(U'½'));
    CHECK(nb::is_unicode_number(0x0661));  // Arabic-Indic one
    CHECK_FALSE(nb::is_unicode_letter(0x0301));  // a combining mark is neither
    CHECK_FALSE(nb::is_unicode_number(0x0301));
}

TEST_CASE("GPT-2's pattern: contractions, runs with one leading space, white space that leaves one space") {
    using V = std::vector<std::string>;
    CHECK(strings(nb::split_gpt2_pattern("Hello world")) == V{"Hello", " world"});
    CHECK(strings(nb::split_gpt2_pattern("it's we're I'M")) == V{"it", "'s", " we", "'re", " I", "'", "M"});
    CHECK(strings(nb::split_gpt2_pattern("a   b")) == V{"a", "  ", " b"});
    CHECK(strings(nb::split_gpt2_pattern("x  \n  \n")) == V{"x", "  \n  \n"});
    CHECK(strings(nb::split_gpt2_pattern("a \tb")) == V{"a", " ", "\t", "b"});  // a single \t before b: \s+
    CHECK(strings(nb::split_gpt2_pattern("abc123 45!?")) == V{"abc", "123", " 45", "!?"});
    CHECK(strings(nb::split_gpt2_pattern("e\xCC\x81")) == V{"e", "\xCC\x81"});  // the combining mark is "other"
    CHECK(nb::split_gpt2_pattern("").empty());
}

TEST_CASE("Digits: each number its own word, or each run of them") {
    using V = std::vector<std::string>;
    CHECK(strings(nb::split_digits("ab123c4", nb::DigitsSplit::individual)) == V{"ab", "1", "2", "3", "c", "4"});
    CHECK(strings(nb::split_digits("ab123c4", nb::DigitsSplit::contiguous)) == V{"ab", "123", "c", "4"});
    nb::ByteLevelPreTokenizer smollm{{nb::DigitsSplit::individual}, false, true};
    std::vector<std::string> words;
    smollm.split("in 2024 it's", words);
    CHECK(words == V{"in", " ", "2", "0", "2", "4", " it", "'s"});
    nb::ByteLevelPreTokenizer gpt2{{}, true, true};
    words.clear();
    gpt2.split("Hi", words);
    CHECK(words == V{" Hi"});
}

TEST_CASE("BPE merges lowest rank first, leftmost among equals") {
    // ids: a=0 b=1 ab=2 bb=3 abb=4; merges: (a,b) rank 0 -> ab, (b,b) rank 1 -> bb, (ab,b) rank 2 -> abb
    nb::BpeMerges merges;
    merges.add(0, 1, 0, 2);
    merges.add(1, 1, 1, 3);
    merges.add(2, 1, 2, 4);
    CHECK(merges.merge_word({0, 1, 1}) == std::vector<int32_t>{4});        // a b b -> ab b -> abb
    CHECK(merges.merge_word({1, 1, 1}) == std::vector<int32_t>{3, 1});     // the leftmost b b first
    CHECK(merges.merge_word({1, 1, 0, 1}) == std::vector<int32_t>{3, 2});  // bb ab
    CHECK(merges.merge_word({}) .empty());
}

TEST_CASE("GPT-2's byte alphabet: space is U+0120, printable bytes are themselves") {
    CHECK(nb::byte_to_unicode(' ') == 0x120);
    CHECK(nb::byte_to_unicode('\n') == 0x10A);
    CHECK(nb::byte_to_unicode('a') == U'a');
    CHECK(nb::byte_to_unicode(0xAD) == 0x143);
    CHECK(nb::byte_level_token_bytes("\xC4\xA0the") == std::string(" the"));  // Ġthe
    CHECK_FALSE(nb::byte_level_token_bytes("<|im start|>").has_value());      // ' ' is not in the alphabet
}
