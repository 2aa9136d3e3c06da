// StagePlacement: which part of the model each chunk of each rank runs.
//
// The model is cut into ranks x chunks parts, in forward order: part j feeds part j + 1, part 0 holds the
// embedding, the last part the head and the loss. A part is also called a virtual stage; its index is what the
// runtime above the transport, the checkpoints and the traces call its stage. With one chunk per rank, part r is
// rank r. With more (docs/DESIGN.md section 2):
//
//   loop   interleaved 1F1B (Narayanan et al. 2021, Megatron-LM): chunk c of rank r is part c P + r. Each chunk
//          loops over the ranks 0, 1, ..., P-1 once more, so part P-1 hands to part P on rank 0.
//            P = 2:  rank 0: parts 0, 2    rank 1: parts 1, 3
//   v      zb-v (Qi et al. 2024, "Pipeline Parallelism with Controllable Memory"): chunk 0 of rank r is part r,
//          chunk 1 is part 2P-1-r. The data runs down the ranks and back up, so part P-1 hands to part P on the
//          same rank (rank P-1, no message between ranks), and rank 0 holds the first part (the embedding) and
//          the last (the head and the loss): a V cannot put them on different ranks.
//            P = 2:  rank 0: parts 0, 3    rank 1: parts 1, 2
#pragma once

#include <vector>

namespace nb {

enum class PlacementShape { loop, v };

struct StagePlacement {
    int ranks = 1;
    int chunks = 1;
    PlacementShape shape = PlacementShape::loop;

    int parts() const { return ranks * chunks; }
    // The part chunk `chunk` of rank `rank` runs; std::out_of_range outside [0, ranks) x [0, chunks).
    int part(int rank, int chunk) const;
    // The rank and the chunk that run `part`; std::out_of_range outside [0, parts()).
    int rank_of(int part) const;
    int chunk_of(int part) const;
    // table[r][c] = part(r, c): the placement as plain data (for the chunk transport, a floor below this one).
    std::vector<std::vector<int>> table() const;
    bool operator==(const StagePlacement&) const = default;
};

}  // namespace nb
