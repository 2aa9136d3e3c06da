#include "src/plan/rank_balance.h"

#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "model/flops.h"

namespace nb {

namespace {

// The cut as its boundaries b[0] = 0 < b[1] < ... < b[parts] = L, with each part's FLOPs from per-block sums (the
// FLOP model adds up over blocks; the embedding and the head are their own terms).
class RankLoads {
public:
    RankLoads(const ModelConfig& c, int64_t seq_len, const StagePlacement& placement)
        : placement_(placement), prefix_(static_cast<size_t>(c.num_layers) + 1, 0.0) {
        for (int64_t i = 0; i < c.num_layers; ++i)
            prefix_[static_cast<size_t>(i) + 1] =
                prefix_[static_cast<size_t>(i)] + stage_flops_per_token(c, {i, i + 1, false, false}, seq_len).training();
        embedding_ = stage_flops_per_token(c, {0, 0, true, false}, seq_len).training();
        head_ = stage_flops_per_token(c, {c.num_layers, c.num_layers, false, true}, seq_len).training();
    }

    double part(const std::vector<int64_t>& b, int j) const {
        const int last = placement_.parts() - 1;
        return prefix_[static_cast<size_t>(b[j + 1])] - prefix_[static_cast<size_t>(b[j])] + (j == 0 ? embedding_ : 0) +
               (j == last ? head_ : 0);
    }

    std::vector<double> per_rank(const std::vector<int64_t>& b) const {
        std::vector<double> loads(static_cast<size_t>(placement_.ranks), 0.0);
        for (int j = 0; j < placement_.parts(); ++j) loads[static_cast<size_t>(placement_.rank_of(j))] += part(b, j);
        return loads;
    }

    // (the slowest rank's load, the sum of squares of the parts' FLOPs): smaller is better, compared in that order.
    // The second evens the parts out among the cuts whose slowest rank is as fast: a chunk's forward is one step of
    // the schedule's flow, and a part far heavier than its neighbours stalls them.
    std::pair<double, double> score(const std::vector<int64_t>& b) const {
        double most = 0, squares = 0;
        for (double load : per_rank(b)) most = std::max(most, load);
        for (int j = 0; j < placement_.parts(); ++j) squares += part(b, j) * part(b, j);
        return {most, squares};
    }

private:
    StagePlacement placement_;
    std::vector<double> prefix_;
    double embedding_ = 0, head_ = 0;
};

std::vector<int64_t> boundaries_of(const std::vector<StageSpec>& cut) {
    std::vector<int64_t> b = {0};
    for (const StageSpec& spec : cut) b.push_back(spec.end_block);
    return b;
}

std::vector<StageSpec> specs_of(const std::vector<int64_t>& b) {
    std::vector<StageSpec> cut;
    const int parts = static_cast<int>(b.size()) - 1;
    for (int j = 0; j < parts; ++j) cut.push_back({b[j], b[j + 1], j == 0, j == parts - 1});
    return cut;
}

}  // namespace

std::vector<double> rank_flops(const ModelConfig& config, int64_t seq_len, const StagePlacement& placement,
                               const std::vector<StageSpec>& cut) {
    return RankLoads(config, seq_len, placement).per_rank(boundaries_of(cut));
}

namespace {

// Steepest descent: of every move of one boundary by one block, the one that lowers the score most (the first such
// in boundary order on a tie), until none does. Each move lowers the score, so it ends.
std::vector<int64_t> descend(const RankLoads& loads, std::vector<int64_t> b, const StageFits& fits) {
    const int parts = static_cast<int>(b.size()) - 1;
    auto part_fits = [&](int j) { return !fits || fits(j, b[j], b[j + 1]); };
    std::pair<double, double> score = loads.score(b);
    for (;;) {
        int best_j = -1;
        int64_t best_to = 0;
        std::pair<double, double> best = score;
        for (int j = 1; j < parts; ++j)
            for (const int64_t to : {b[j] - 1, b[j] + 1}) {
                if (to <= b[j - 1] || to >= b[j + 1]) continue;  // each part keeps a block
                const int64_t was = b[j];
                b[j] = to;
                if (part_fits(j - 1) && part_fits(j)) {
                    const std::pair<double, double> s = loads.score(b);
                    if (s < best) best = s, best_j = j, best_to = to;
                }
                b[j] = was;
            }
        if (best_j < 0) return b;
        b[best_j] = best_to;
        score = best;
    }
}

// Branch and bound over every cut, parts placed left to right in lexicographic order of their boundaries: a
// partial cut whose score already reaches the best's is dropped (the slowest rank and the sum of squares only grow
// as parts are added). Starts from the score of `start`, a cut that fits; returns the best cut, the first in
// boundary order among equals (the start among them).
// At most `max_nodes` partial cuts are visited: past them, the best found so far.
class CutSearch {
public:
    CutSearch(const RankLoads& loads, const StagePlacement& placement, int64_t L, const StageFits& fits,
              int64_t max_nodes)
        : loads_(loads), placement_(placement), L_(L), fits_(fits), nodes_left_(max_nodes) {}

    std::vector<int64_t> best_from(std::vector<int64_t> start) {
        best_ = std::move(start);
        best_score_ = loads_.score(best_);
        b_.assign(static_cast<size_t>(placement_.parts()) + 1, 0);
        b_.back() = L_;
        rank_load_.assign(static_cast<size_t>(placement_.ranks), 0.0);
        place(0, 0.0);
        return best_;
    }

private:
    // Before any cut is found, the start's score itself may be matched (by a cut earlier in boundary order, or the
    // start when it comes); after, only beaten.
    bool beaten(double squares) const {
        double most = 0;
        for (double load : rank_load_) most = std::max(most, load);
        const std::pair<double, double> s{most, squares};
        return found_ ? s >= best_score_ : s > best_score_;
    }

    // Parts 0..j-1 are placed (b_[0..j]); `squares` is the sum of their squared FLOPs.
    void place(int j, double squares) {
        if (nodes_left_-- <= 0) return;
        const int parts = placement_.parts();
        const int64_t first = b_[static_cast<size_t>(j)];
        const int64_t end_lo = first + 1, end_hi = j == parts - 1 ? L_ : L_ - (parts - 1 - j);
        const int64_t end_from = j == parts - 1 ? L_ : end_lo;
        double& rank = rank_load_[static_cast<size_t>(placement_.rank_of(j))];
        for (int64_t end = end_from; end <= end_hi; ++end) {
            if (fits_ && !fits_(j, first, end)) break;  // a longer range of a part that does not fit does not either
            b_[static_cast<size_t>(j) + 1] = end;
            const double cost = loads_.part(b_, j);
            rank += cost;
            const double sq = squares + cost * cost;
            if (!beaten(sq)) {
                if (j == parts - 1) {
                    best_ = b_;
                    best_score_ = loads_.score(b_);
                    found_ = true;
                } else {
                    place(j + 1, sq);
                }
            }
            rank -= cost;
            if (nodes_left_ <= 0) return;
        }
    }

    const RankLoads& loads_;
    const StagePlacement placement_;
    const int64_t L_;
    const StageFits& fits_;
    int64_t nodes_left_;
    std::vector<int64_t> b_, best_;
    std::vector<double> rank_load_;
    std::pair<double, double> best_score_;
    bool found_ = false;
};

}  // namespace

std::vector<StageSpec> balance_ranks(const ModelConfig& config, int64_t seq_len, const StagePlacement& placement,
                                     const std::vector<StageSpec>& cut, const StageFits& fits, int64_t max_nodes) {
    if (static_cast<int>(cut.size()) != placement.parts())
        throw std::invalid_argument(
            fmt::format("balance_ranks: a cut of {} parts for {} ranks x {} chunks", cut.size(), placement.ranks,
                        placement.chunks));
    if (placement.chunks == 1) return cut;  // a part is a rank: the cost cut balanced it already
    const RankLoads loads(config, seq_len, placement);
    const std::vector<int64_t> descended = descend(loads, boundaries_of(cut), fits);
    return specs_of(CutSearch(loads, placement, config.num_layers, fits, max_nodes).best_from(descended));
}

}  // namespace nb
