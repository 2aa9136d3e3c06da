// Splitting text at added tokens (the rules in src/data/added_tokens.h).
#include "src/data/added_tokens.h"

#include <algorithm>

#include "src/data/unicode_classes.h"
#include "src/data/utf8.h"

namespace nb {

namespace {

// Where the white space that ends text[0, end) starts (text is well-formed UTF-8): step back over whole code
// points while they are White_Space.
size_t white_space_start_before(std::string_view text, size_t end) {
    size_t start = end;
    while (start > 0) {
        size_t lead = start - 1;
        while (lead > 0 && (static_cast<uint8_t>(text[lead]) & 0xC0) == 0x80) --lead;  // back to the lead byte
        if (!is_unicode_white_space(decode_utf8_at(text, lead).cp)) break;
        start = lead;
    }
    return start;
}

// Where the white space that starts text[begin, ...) ends.
size_t white_space_end_after(std::string_view text, size_t begin) {
    size_t end = begin;
    while (end < text.size()) {
        const DecodedCodePoint d = decode_utf8_at(text, end);
        if (!is_unicode_white_space(d.cp)) break;
        end += d.length;
    }
    return end;
}

}  // namespace

void AddedTokenSplitter::TokenSet::index() {
    for (auto& bucket : by_first_byte) bucket.clear();
    for (size_t i = 0; i < tokens.size(); ++i)
        by_first_byte[static_cast<uint8_t>(tokens[i].content.front())].push_back(static_cast<int32_t>(i));
    for (auto& bucket : by_first_byte)
        std::stable_sort(bucket.begin(), bucket.end(), [&](int32_t a, int32_t b) {
            return tokens[a].content.size() > tokens[b].content.size();
        });
}

const AddedToken* AddedTokenSplitter::TokenSet::longest_at(std::string_view text, size_t pos) const {
    for (const int32_t i : by_first_byte[static_cast<uint8_t>(text[pos])])
        if (text.substr(pos).starts_with(tokens[i].content)) return &tokens[i];
    return nullptr;
}

AddedTokenSplitter::AddedTokenSplitter(const std::vector<AddedToken>& tokens) {
    for (const AddedToken& t : tokens) (t.normalized ? normalized_ : not_normalized_).tokens.push_back(t);
    not_normalized_.index();
    normalized_.index();
}

void AddedTokenSplitter::split_with(const TokenSet& set, std::string_view text, std::vector<TextSegment>& out) {
    const auto emit = [&](size_t begin, size_t end, int32_t id) {
        if (end > begin) out.push_back({text.substr(begin, end - begin), id});
    };
    size_t done = 0;  // the end of the last match (rstrip's spaces included): text before it is emitted
    for (size_t pos = 0; pos < text.size();) {
        const AddedToken* token = set.tokens.empty() ? nullptr : set.longest_at(text, pos);
        if (token == nullptr) {
            ++pos;
            continue;
        }
        size_t start = pos;
        const size_t match_end = pos + token->content.size();
        size_t stop = match_end;
        if (token->lstrip) start = std::max(white_space_start_before(text, start), done);
        if (token->rstrip) stop = white_space_end_after(text, stop);
        if (start > done) emit(done, start, -1);
        emit(start, stop, token->id);
        done = stop;
        pos = match_end;  // the search goes on after the token itself, as tokenizers' find_iter does
    }
    if (done < text.size()) emit(done, text.size(), -1);
}

std::vector<TextSegment> AddedTokenSplitter::split(std::string_view text) const {
    std::vector<TextSegment> first;
    split_with(not_normalized_, text, first);
    std::vector<TextSegment> out;
    for (const TextSegment& s : first) {
        if (s.id >= 0) {
            out.push_back(s);
        } else {
            split_with(normalized_, s.text, out);
        }
    }
    return out;
}

}  // namespace nb
