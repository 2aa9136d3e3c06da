// MpiTransport: one stage per MPI rank (stage = rank in MPI_COMM_WORLD, or in a split of it), host tensors moved as bytes with
// MPI_Isend / MPI_Irecv, readiness by MPI_Test. Compiled only where nobubble is built with MPI.
//
// Tags: MPI tag = index * kNumChannels + channel, so every (channel, index) of transport.h has its own tag and
// messages cannot be confused. Indices beyond MPI_TAG_UB / kNumChannels wrap around; that is still safe
// because two messages that share a tag are then hundreds of millions of messages apart on their channel, and
// MPI matches messages with equal (source, tag) in the order they were sent.
#pragma once

#include <memory>

#include "pipeline/transport/transport.h"

namespace nb {

// The transport over MPI_COMM_WORLD (duplicated, so that no other MPI traffic can match its tags). MPI must be
// initialised (src/core/mpi_env.h).
std::unique_ptr<Transport> make_mpi_transport();
// The transport among the ranks that pass the same `color` (>= 0; collective over MPI_COMM_WORLD), stage = the
// rank's index among them in world order: with data parallelism a replica's pipeline (color = replica), or one
// stage's D replicas (color = the rank's stage). Every transport of the process shares one lock on MPI.
std::unique_ptr<Transport> make_mpi_transport_of_color(int color);

}  // namespace nb
