// BPE's merge loop over a heap of candidate pairs (the rule in src/data/bpe_merges.h).
#include "src/data/bpe_merges.h"

#include <functional>
#include <queue>

namespace nb {

namespace {

// A symbol of the word being merged, in a doubly linked list over the initial positions; a symbol merged into its
// left neighbour is marked gone.
struct Symbol {
    int32_t id;
    int32_t prev, next;  // -1 at either end
    bool gone = false;
};

// A candidate merge of the pair that starts at `pos`: the heap pops the lowest rank, then the lowest position.
struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t merged;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

}  // namespace

void BpeMerges::add(int32_t a, int32_t b, int32_t rank, int32_t merged) { merges_[pair_key(a, b)] = {rank, merged}; }

const BpeMerges::Merge* BpeMerges::find(int32_t a, int32_t b) const {
    const auto it = merges_.find(pair_key(a, b));
    return it == merges_.end() ? nullptr : &it->second;
}

std::vector<int32_t> BpeMerges::merge_word(const std::vector<int32_t>& ids) const {
    const auto n = static_cast<int32_t>(ids.size());
    if (n < 2) return ids;
    std::vector<Symbol> symbols(ids.size());
    for (int32_t i = 0; i < n; ++i) symbols[i] = {ids[i], i - 1, i + 1 < n ? i + 1 : -1};
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
    const auto push_pair = [&](int32_t left) {  // the pair (left, its next), if it has a merge
        const int32_t right = symbols[left].next;
        if (right < 0) return;
        if (const Merge* m = find(symbols[left].id, symbols[right].id)) heap.push({m->rank, left, m->merged});
    };
    for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);

    while (!heap.empty()) {
        const Candidate top = heap.top();
        heap.pop();
        Symbol& left = symbols[top.pos];
        if (left.gone || left.next < 0) continue;
        Symbol& right = symbols[left.next];
        // A stale candidate: the pair at pos changed since it was pushed. tokenizers compares the merged token only.
        const Merge* now = find(left.id, right.id);
        if (now == nullptr || now->merged != top.merged) continue;
        left.id = top.merged;
        right.gone = true;
        left.next = right.next;
        if (right.next >= 0) symbols[right.next].prev = top.pos;
        if (left.prev >= 0) push_pair(left.prev);
        push_pair(top.pos);
    }

    std::vector<int32_t> out;
    for (int32_t i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
    return out;
}

}  // namespace nb
