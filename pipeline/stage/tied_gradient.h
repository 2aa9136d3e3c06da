// TiedGradient: tied embeddings with more than one stage (docs/DESIGN.md section 2, "Tied embeddings"). The first
// stage (the embedding) holds the matrix and the last stage (the head) a copy under the same name,
// "embedding.weight", slot 0 of both layouts. Each sums its own half of the matrix's gradient over the step's
// microbatches (and over the replicas, D > 1); at the optimizer step each sends its half to the other end and adds
// the other's onto its own, g = E + H on the first and H + E on the last, the same bits (f32 adds commute), which
// are the one-stage model's (model/tied_head_grad.h). Both copies then take the same clip and the same update, so
// they never drift:
//
//   clip   the matrix counts once: the copy's sum of squares is 0 in every norm; under --clip-scope stage the
//          copy is clipped by the first stage's norm (sent beside the halves), the rest of the last stage by its own.
//
// zb-v puts both ends on rank 0 (its first and last chunk), interleaved 1F1B on the first chunk of rank 0 and the
// last chunk of the last rank: the messages go between those parts like any other (pipeline/transport).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/params.h"
#include "pipeline/schedule/pipeline_setup.h"
#include "pipeline/stage/stage_checkpoint.h"
#include "pipeline/transport/transport.h"

namespace nb {

class TiedGradient {
public:
    // Inactive unless the model is tied and `stage` is the first or the last of several.
    TiedGradient(const PipelineSetup& setup, int stage, Transport& transport, Ops& ops);

    bool active() const { return peer_ >= 0; }
    // The last stage: it holds the copy, which counts 0 in the norms and is clipped by the first stage's norm.
    bool holds_copy() const { return active() && copy_; }
    // The last stage under --clip-scope stage with clipping on: its copy waits for the first stage's norm.
    bool needs_first_norm() const { return holds_copy() && stage_clip_; }
    // The first stage under --clip-scope stage with clipping on: it sends its norm to the last.
    bool sends_norm() const { return active() && !copy_ && stage_clip_; }

    // The step's half is summed: a copy of it to the other end, and the other end's receive posted. In debug
    // builds also the sha256 of this end's `matrix` (its master copy, before the update): the two must be equal.
    void start(int64_t step, const Tensor& half, const Tensor& matrix);
    // Once the other end's half of `step` has come: added onto `half` (true); false until then. In debug builds
    // it waits for the other end's hash too, and throws std::logic_error where the copies differ.
    bool try_add(int64_t step, Tensor& half);
    // The first stage under --clip-scope stage: its norm of `step` to the last stage.
    void send_norm(int64_t step, double norm);
    // The last stage: the first stage's norm of `step` once it has come.
    std::optional<double> try_take_norm(int64_t step);
    std::string waits_for() const;

private:
    Transport& transport_;
    Ops& ops_;
    int peer_ = -1;
    bool copy_ = false;
    bool stage_clip_ = false;
    bool norm_posted_ = false;
    std::optional<Tensor> other_half_;     // the other end's half, once it has come
    std::string matrix_hash_;              // debug builds: this end's matrix before the step's update
    std::optional<std::string> peer_hash_;  // ... and the other end's, once it has come
};

// Checkpoints hold the tied matrix once: the first stage's file has its weights and optimizer state, and the last
// stage reads its copy's from there by name (any cut, so P = 1 <-> P > 1 reshards too). The older weight versions
// each end holds (2bw, pipedream) are written by that end, under the same names: where both hold a version, the
// two tensors are equal bit for bit and the loader takes either (tensors_by_name).
// A stage's checkpoint file (stage_state_pieces), without its tied copy's tensors where `holds_copy`.
SafetensorsPieces stage_file_pieces(const std::vector<std::pair<std::string, const Tensor*>>& carried,
                                   const ParamLayout& layout, const OlderVersions& older, bool holds_copy);
// Whether a carried or version tensor's name ("weights.embedding.weight", "exp_avg.embedding.weight",
// "version.3.embedding.weight", ...) is the tied matrix's.
bool names_tied_matrix(const std::string& name);

}  // namespace nb
