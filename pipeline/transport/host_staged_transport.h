// HostStagedTransport: a host transport (MPI) that carries the tensors of a device backend, by copying them
// through the host: send() sends tensor.to(cpu), try_take() hands out the arrived tensor copied to `device`.
// Everything else is the inner transport's. With --device cuda and D > 1 replicas, the replicas' messages that
// are not the gradient sum (reports, the stop vote, the distributed optimizer's rows and state, the finals'
// hashes) go this way: rare or small next to a step, where the gradient sum has NCCL (nccl_replica_sum.h).
#pragma once

#include <memory>

#include "pipeline/transport/transport.h"

namespace nb {

// `inner` moves host tensors; `device` is where the tensors handed out live (Device::cpu: `inner` as it is).
std::unique_ptr<Transport> make_host_staged_transport(std::unique_ptr<Transport> inner, Device device);

}  // namespace nb
