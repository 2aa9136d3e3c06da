// Fused multi-tensor AdamW: one kernel launch updates every parameter of a step (Ops::adamw_update_multi).
//
// Why: a model has hundreds of parameter tensors (SmolLM-360M: 290), many of them tiny (a norm gain has 960
// elements), and one launch per tensor costs more in launch overhead and tail effects than the arithmetic.
//
// How (multi-tensor apply): the host describes the step as a table with one entry per tensor (its four pointers,
// its element count and its own decay factor 1 - lr*wd) and one entry per chunk of kChunkElements consecutive
// elements of some tensor, and copies it to the device in one transfer. One launch covers all chunks: block b
// takes chunks b, b + gridDim.x, ...; in a chunk each thread takes elements threadIdx.x, + blockDim.x, ...
// Every element is computed by one thread with the CPU's arithmetic (cuda/adamw_step.cuh), so the result does not
// depend on the chunking or on the other tensors of the launch; no atomics, nothing shared between elements.
//
// The table lives in the context's scratch buffer, valid for the length of one op: the stream orders this op's
// reads before any later op's writes. It is copied from pageable host memory, which cudaMemcpyAsync stages
// before it returns, so the host vector may go out of scope afterwards.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "src/ops/adamw_scalars.h"
#include "cuda/adamw_step.cuh"
#include "cuda/context.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_ops.h"
#include "src/ops/optimizer_checks.h"

namespace nb::cuda {

namespace {

constexpr int64_t kChunkElements = int64_t{1} << 16;  // 64Ki elements: 256 per thread with 256 threads
constexpr unsigned kThreads = 256;
constexpr unsigned kMaxBlocks = 1u << 16;  // blocks loop over the chunks beyond

struct TensorEntry {
    float* p;
    const float* g;
    float* m;
    float* v;
    int64_t n;
    float decay;  // 1 - lr*wd of this tensor (AdamWScalars::decay)
};

struct ChunkEntry {
    int64_t tensor;  // index into the tensor table
    int64_t begin;   // first element; the chunk ends at min(begin + kChunkElements, n)
};

__global__ void adamw_multi_kernel(const TensorEntry* __restrict__ tensors, const ChunkEntry* __restrict__ chunks,
                                   int64_t num_chunks, AdamWScalars shared) {
    for (int64_t c = blockIdx.x; c < num_chunks; c += gridDim.x) {
        const ChunkEntry chunk = chunks[c];
        const TensorEntry t = tensors[chunk.tensor];
        AdamWScalars s = shared;
        s.decay = t.decay;
        const int64_t end = chunk.begin + kChunkElements < t.n ? chunk.begin + kChunkElements : t.n;
        for (int64_t i = chunk.begin + threadIdx.x; i < end; i += blockDim.x) adamw_step(t.p, t.g, t.m, t.v, i, s);
    }
}

size_t round_up_16(size_t bytes) { return (bytes + 15) & ~size_t{15}; }

}  // namespace

void CudaOps::adamw_update_multi(const std::vector<AdamWParamRef>& params, float lr, float beta1, float beta2,
                                 float eps, int64_t step) {
    const OpTimer timer(*this, "adamw_update_multi");
    check_adamw_step("adamw_update_multi", step);
    std::vector<TensorEntry> tensors;
    std::vector<ChunkEntry> chunks;
    for (const AdamWParamRef& ref : params) {
        if (!ref.param || !ref.grad || !ref.m || !ref.v)
            throw std::invalid_argument("adamw_update_multi: an entry has a null tensor pointer");
        check_optimizer_tensors("adamw_update_multi", Device::cuda,
                                {{"param", ref.param}, {"grad", ref.grad}, {"m", ref.m}, {"v", ref.v}});
        const int64_t n = ref.param->numel();
        if (n == 0) continue;
        const float decay = adamw_scalars(lr, beta1, beta2, eps, ref.weight_decay, step).decay;
        const auto index = static_cast<int64_t>(tensors.size());
        tensors.push_back({static_cast<float*>(ref.param->data()), static_cast<const float*>(ref.grad->data()),
                           static_cast<float*>(ref.m->data()), static_cast<float*>(ref.v->data()), n, decay});
        for (int64_t begin = 0; begin < n; begin += kChunkElements) chunks.push_back({index, begin});
    }
    if (chunks.empty()) return;

    // One upload: the tensor table, then (16-byte aligned) the chunk table.
    const size_t tensor_bytes = round_up_16(tensors.size() * sizeof(TensorEntry));
    const size_t chunk_bytes = chunks.size() * sizeof(ChunkEntry);
    std::vector<unsigned char> host(tensor_bytes + chunk_bytes);
    std::memcpy(host.data(), tensors.data(), tensors.size() * sizeof(TensorEntry));
    std::memcpy(host.data() + tensor_bytes, chunks.data(), chunk_bytes);
    CudaContext& ctx = context();
    auto* table = static_cast<unsigned char*>(ctx.scratch(host.size()));
    CUDA_CHECK(cudaMemcpyAsync(table, host.data(), host.size(), cudaMemcpyHostToDevice, ctx.stream));

    const auto num_chunks = static_cast<int64_t>(chunks.size());
    const auto blocks = static_cast<unsigned>(std::min<int64_t>(num_chunks, kMaxBlocks));
    const AdamWScalars shared = adamw_scalars(lr, beta1, beta2, eps, 0.0f, step);
    adamw_multi_kernel<<<blocks, kThreads, 0, ctx.stream>>>(reinterpret_cast<const TensorEntry*>(table),
                                                            reinterpret_cast<const ChunkEntry*>(table + tensor_bytes),
                                                            num_chunks, shared);
    CUDA_CHECK_LAUNCH();
}

}  // namespace nb::cuda
