#include "src/plan/stage_placement.h"

#include <stdexcept>

#include <fmt/format.h>

namespace nb {

namespace {

// The v shape runs its odd chunks up the ranks: the rank's position within such a chunk is counted from P-1.
bool runs_up(PlacementShape shape, int chunk) { return shape == PlacementShape::v && chunk % 2 == 1; }

}  // namespace

int StagePlacement::part(int rank, int chunk) const {
    if (rank < 0 || rank >= ranks || chunk < 0 || chunk >= chunks)
        throw std::out_of_range(fmt::format("chunk {} of rank {}: {} ranks x {} chunks", chunk, rank, ranks, chunks));
    return chunk * ranks + (runs_up(shape, chunk) ? ranks - 1 - rank : rank);
}

std::vector<std::vector<int>> StagePlacement::table() const {
    std::vector<std::vector<int>> parts_of(static_cast<size_t>(ranks));
    for (int r = 0; r < ranks; ++r)
        for (int c = 0; c < chunks; ++c) parts_of[static_cast<size_t>(r)].push_back(part(r, c));
    return parts_of;
}

int StagePlacement::chunk_of(int part) const {
    if (part < 0 || part >= parts())
        throw std::out_of_range(fmt::format("part {} of {} ({} ranks x {} chunks)", part, parts(), ranks, chunks));
    return part / ranks;
}

int StagePlacement::rank_of(int part) const {
    const int chunk = chunk_of(part), position = part % ranks;
    return runs_up(shape, chunk) ? ranks - 1 - position : position;
}

}  // namespace nb
