// RankLayout: which MPI rank runs which stage of which pipeline replica (docs/DESIGN.md section 2, "Data
// parallelism").
//
//   rank = replica x P + stage        (P = the ranks of one pipeline, D = --data-parallel-size)
//
// A replica's pipeline is a block of consecutive ranks, replica 0 being ranks 0 .. P-1: with D = 1 the layout is
// the pipeline's own, rank 0 is stage 0 of replica 0 (it prints and writes the manifest), and with mpirun's
// default by-slot mapping a replica's stages, which exchange activations every microbatch, share a node where they
// fit, while the D replicas of a stage exchange gradients once per step. (Megatron orders data parallelism inside
// the pipeline for the same reason at the tensor-parallel level; with no tensor parallelism the pipeline is the
// chattiest group and goes innermost.)
#pragma once

#include <string>

#include <fmt/format.h>

namespace nb {

struct RankLayout {
    int pipeline_ranks = 1;  // P
    int replicas = 1;        // D

    int world() const { return pipeline_ranks * replicas; }
    int replica_of(int rank) const { return rank / pipeline_ranks; }
    int stage_of(int rank) const { return rank % pipeline_ranks; }
    int rank_of(int replica, int stage) const { return replica * pipeline_ranks + stage; }
    // "rank 3 (stage 1)", with D > 1 "rank 3 (stage 1 of replica 1)": how errors and the watchdog name a rank.
    std::string describe(int rank) const {
        if (replicas == 1) return fmt::format("rank {} (stage {})", rank, stage_of(rank));
        return fmt::format("rank {} (stage {} of replica {})", rank, stage_of(rank), replica_of(rank));
    }
};

}  // namespace nb
