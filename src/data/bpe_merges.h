// The merge rule of BPE: a word's symbols are merged pair by pair, the pair of lowest rank first.
//
// A BPE's merges are an ordered list of pairs (a, b) -> ab; a pair's rank is its place in that list (earlier merges
// were more frequent when the tokenizer was trained). To encode a word, start from one symbol per byte and, while
// some adjacent pair has a merge, merge the adjacent pair of lowest rank, the leftmost one among equals.
//
// Done naively that is O(n^2) per word; here as Hugging Face tokenizers does it (models/bpe/word.rs, merge_all),
// so that ties and stale pairs come out the same: a min-heap of (rank, position) holds every adjacent pair that has
// a merge; the top is popped, skipped if its left symbol is gone, is last, or no longer forms a pair whose merge
// makes the same token, and otherwise merged, the new pairs with its left and right neighbours pushed. O(n log n).
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace nb {

class BpeMerges {
public:
    // The merge (a, b) -> merged of the given rank; a pair given twice keeps its last rank (as tokenizers'
    // HashMap::collect does).
    void add(int32_t a, int32_t b, int32_t rank, int32_t merged);
    size_t size() const { return merges_.size(); }

    // The symbols (token ids) of a word after every merge, in order.
    std::vector<int32_t> merge_word(const std::vector<int32_t>& symbols) const;

private:
    struct Merge {
        int32_t rank;
        int32_t merged;
    };
    static uint64_t pair_key(int32_t a, int32_t b) {
        return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
    }
    const Merge* find(int32_t a, int32_t b) const;

    std::unordered_map<uint64_t, Merge> merges_;
};

}  // namespace nb
