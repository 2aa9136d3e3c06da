// ComputeTurns: the order in which the chunks of one rank compute, when the rank holds several (interleaved 1F1B,
// zb-v): its merged action list (PipelineSetup::rank_actions, read as the turns pass), the order the schedule was
// made for and the simulator
// times. Each chunk's runner (one per part) keeps its own list; a forward, backward, B or W may run only when it is
// that chunk's turn in the rank's list. Everything else (receives, sends, optimizer steps, evaluation, reports,
// saves) runs as the runner's own list allows. Without turns, the chunks would go round-robin: a chunk that can
// run keeps running (rank 0's chunk 0 would run every forward of the step before anything else, holding m
// stashes where zb-v plans 2P - 1), and the order, the memory and the bubble would be the messages' timing, not the
// schedule's.
//
// Following the merged list cannot deadlock where the list itself does not: it waits for no more than the
// simulator does, which runs the whole list in order.
#pragma once

#include <memory>

#include "pipeline/schedule/action_stream.h"

namespace nb {

class ComputeTurns {
public:
    explicit ComputeTurns(std::unique_ptr<ActionSource> rank_actions);

    // Whether `chunk` holds the next turn (false when every turn is taken).
    bool is_turn(int chunk) const { return next_chunk_ >= 0 && next_chunk_ == chunk; }
    // `chunk` ran its compute: the turn passes on. std::logic_error when it was not its turn.
    void took(int chunk);
    // The chunk whose turn it is, or -1 when none is left (for the watchdog's report).
    int next_chunk() const { return next_chunk_; }

private:
    void find_next();

    std::unique_ptr<ActionSource> rank_actions_;
    int next_chunk_ = -1;  // the chunk of the rank's next compute; -1 when none is left
};

}  // namespace nb
