// Token embedding on the CUDA backend (the f32 reference is src/cpu/embedding.cpp; same math).
//
// tokens: i32 with N ids (any shape), on the GPU (a host tensor is accepted too and saves a download);
// table: bf16 [V, d]; out, dout: bf16 [N, d] (any leading shape); dtable: f32 [V, d].
//
// Token ids are validated on the host before anything is written, as the CPU reference does, so a bad batch
// leaves every output untouched and the error names the id and its position. That costs one download of N
// int32 and a stream synchronisation per call; the backward pass needs the ids on the host anyway (below).
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/bf16.cuh"
#include "cuda/context.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_ops.h"
#include "cuda/describe.h"
#include "src/ops/layer_checks.h"

namespace nb::cuda {

namespace {

constexpr int kColThreads = 128;

// out[n, j] = table[tokens[n], j]
// Grid (N, ceil(d / kColThreads)); one thread per element, adjacent threads copy adjacent columns of one row.
// The id was validated on the host; the bounds check here only guarantees that no kernel ever reads outside
// the table, whatever its caller did.
__global__ void embedding_forward_kernel(bf16* out, const int32_t* tokens, const bf16* table, int64_t vocab,
                                         int d) {
    const int64_t n = blockIdx.x;
    const int j = static_cast<int>(blockIdx.y) * kColThreads + static_cast<int>(threadIdx.x);
    if (j >= d) return;
    const int64_t id = tokens[n];
    if (id < 0 || id >= vocab) return;
    out[n * d + j] = table[id * d + j];
}

// dtable[seg_token[k], j] += dout[rows[off[k]], j] + ... + dout[rows[off[k+1]-1], j]
// where, for the k-th distinct token id, rows[off[k] .. off[k+1]) are the positions holding it, in increasing
// order (a stable counting sort on the host). Grid (distinct ids, ceil(d / kColThreads)); one thread per
// (id, column). Each dtable element is owned by exactly one thread, so no atomics are needed, and that thread
// adds the rows one at a time onto the running f32 value in row order: the same operations in the same order
// as the CPU reference (dtable[id, j] += dout[n, j] for n = 0, 1, ...), hence the same bits for the same
// (bf16-valued) inputs.
__global__ void embedding_backward_kernel(float* dtable, const int32_t* rows, const int32_t* seg_token,
                                          const int32_t* seg_offset, const bf16* dout, int64_t vocab, int d) {
    const int64_t k = blockIdx.x;
    const int j = static_cast<int>(blockIdx.y) * kColThreads + static_cast<int>(threadIdx.x);
    if (j >= d) return;
    const int64_t id = seg_token[k];
    if (id < 0 || id >= vocab) return;
    float acc = dtable[id * d + j];
    for (int32_t r = seg_offset[k]; r < seg_offset[k + 1]; ++r)
        acc += to_f32(dout[static_cast<int64_t>(rows[r]) * d + j]);
    dtable[id * d + j] = acc;
}

// This backend's dtypes and devices, after the CPU reference's shape checks (src/ops/layer_checks.h).
void check_embedding_types(const char* op, const Tensor& rows, DType rows_dtype, const Tensor& tokens,
                           const Tensor& table, DType table_dtype) {
    const bool ok = on_cuda(rows, rows_dtype) && on_cuda(table, table_dtype) && tokens.defined() &&
                    tokens.dtype() == DType::i32;
    if (!ok)
        throw std::invalid_argument(std::string(op) + ": expected tokens [N] i32, table [V, d] " +
                                    dtype_name(table_dtype) + ", out/dout [N, d] " + dtype_name(rows_dtype) +
                                    " (on cuda; tokens may be on cpu); got tokens " + describe(tokens) + ", table " +
                                    describe(table) + ", out/dout " + describe(rows));
    // d: the column blocks are grid.y (at most 65535 of them); N: rows are indexed with int32 in the backward.
    if (table.dim(1) > int64_t{65535} * kColThreads || tokens.numel() > INT_MAX)
        throw std::invalid_argument(std::string(op) + ": d = " + std::to_string(table.dim(1)) + " or N = " +
                                    std::to_string(tokens.numel()) + " is too large for the kernels");
}

// The ids on the host: a copy from the GPU (ordered after the work already on the stream, which may have
// written them), or the host tensor itself.
std::vector<int32_t> ids_on_host(const Tensor& tokens, cudaStream_t stream) {
    std::vector<int32_t> ids(static_cast<size_t>(tokens.numel()));
    if (ids.empty()) return ids;
    if (tokens.device() == Device::cpu) {
        std::memcpy(ids.data(), tokens.data(), tokens.bytes());
    } else {
        CUDA_CHECK(cudaMemcpyAsync(ids.data(), tokens.data(), tokens.bytes(), cudaMemcpyDeviceToHost, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    return ids;
}

// Every id must index a table row; reading past the table would be silent garbage.
void check_ids(const char* op, const std::vector<int32_t>& ids, int64_t vocab) {
    for (size_t n = 0; n < ids.size(); ++n)
        if (ids[n] < 0 || ids[n] >= vocab)
            throw std::out_of_range(std::string(op) + ": token " + std::to_string(ids[n]) + " at position " +
                                    std::to_string(n) + " is outside the vocabulary [0, " + std::to_string(vocab) +
                                    ")");
}

// A device i32 tensor holding `values`. The copy is enqueued on `stream`, so it lands after the buffer's zero
// fill and before any later kernel on that stream; cudaMemcpyAsync from pageable memory returns once the host
// data has been staged, so `values` may be freed when this returns.
Tensor upload_i32(const std::vector<int32_t>& values, cudaStream_t stream) {
    Tensor t = Tensor::zeros({static_cast<int64_t>(values.size())}, DType::i32, Device::cuda);
    if (!values.empty())
        CUDA_CHECK(cudaMemcpyAsync(t.data(), values.data(), values.size() * sizeof(int32_t), cudaMemcpyHostToDevice,
                                   stream));
    return t;
}

}  // namespace

void CudaOps::embedding_forward(Tensor& out, const Tensor& tokens, const Tensor& table) {
    const OpTimer timer(*this, "embedding_forward");
    check_embedding_forward(out, tokens, table);
    check_embedding_types("embedding_forward", out, DType::bf16, tokens, table, DType::bf16);
    const int64_t n_rows = tokens.numel(), vocab = table.dim(0);
    const int d = static_cast<int>(table.dim(1));
    const cudaStream_t stream = context().stream;
    const std::vector<int32_t> ids = ids_on_host(tokens, stream);
    check_ids("embedding_forward", ids, vocab);
    if (n_rows == 0 || d == 0) return;
    Tensor uploaded;  // only when tokens live on the host
    const int32_t* dev_tokens = static_cast<const int32_t*>(tokens.data());
    if (tokens.device() != Device::cuda) {
        uploaded = upload_i32(ids, stream);
        dev_tokens = static_cast<const int32_t*>(uploaded.data());
    }
    embedding_forward_kernel<<<dim3(static_cast<unsigned>(n_rows), blocks_for(d, kColThreads)), kColThreads, 0,
                               stream>>>(static_cast<bf16*>(out.data()), dev_tokens,
                                         static_cast<const bf16*>(table.data()), vocab, d);
    CUDA_CHECK_LAUNCH();
}

void CudaOps::embedding_backward(Tensor& dtable, const Tensor& tokens, const Tensor& dout) {
    const OpTimer timer(*this, "embedding_backward");
    check_embedding_backward(dtable, tokens, dout);
    check_embedding_types("embedding_backward", dout, DType::bf16, tokens, dtable, DType::f32);
    const int64_t n_rows = tokens.numel(), vocab = dtable.dim(0);
    const int d = static_cast<int>(dtable.dim(1));
    const cudaStream_t stream = context().stream;
    const std::vector<int32_t> ids = ids_on_host(tokens, stream);
    check_ids("embedding_backward", ids, vocab);  // all ids before any write: a bad batch leaves dtable untouched
    if (n_rows == 0 || d == 0) return;

    // Stable counting sort of the positions by id. count[] spans the vocabulary (V + 1 ints; 200 KB at V = 49152,
    // negligible next to the kernel), and scanning positions in increasing order keeps each id's rows in row order.
    std::vector<int32_t> start(static_cast<size_t>(vocab) + 1, 0);
    for (int32_t id : ids) ++start[static_cast<size_t>(id) + 1];
    int64_t distinct = 0;
    for (int64_t v = 0; v < vocab; ++v) {
        if (start[static_cast<size_t>(v) + 1] > 0) ++distinct;
        start[static_cast<size_t>(v) + 1] += start[static_cast<size_t>(v)];
    }
    // One upload: [rows (N) | seg_token (distinct) | seg_offset (distinct + 1)].
    std::vector<int32_t> packed(static_cast<size_t>(n_rows + 2 * distinct + 1));
    int32_t* rows = packed.data();
    int32_t* seg_token = rows + n_rows;
    int32_t* seg_offset = seg_token + distinct;
    {
        std::vector<int32_t> next(start.begin(), start.end() - 1);  // next free slot of each id
        for (int64_t n = 0; n < n_rows; ++n)
            rows[next[static_cast<size_t>(ids[static_cast<size_t>(n)])]++] = static_cast<int32_t>(n);
        int64_t k = 0;
        for (int64_t v = 0; v < vocab; ++v) {
            if (start[static_cast<size_t>(v) + 1] == start[static_cast<size_t>(v)]) continue;
            seg_token[k] = static_cast<int32_t>(v);
            seg_offset[k] = start[static_cast<size_t>(v)];
            ++k;
        }
        seg_offset[distinct] = static_cast<int32_t>(n_rows);
    }
    const Tensor dev = upload_i32(packed, stream);
    const int32_t* dev_rows = static_cast<const int32_t*>(dev.data());
    embedding_backward_kernel<<<dim3(static_cast<unsigned>(distinct), blocks_for(d, kColThreads)), kColThreads, 0,
                                stream>>>(static_cast<float*>(dtable.data()), dev_rows, dev_rows + n_rows,
                                          dev_rows + n_rows + distinct, static_cast<const bf16*>(dout.data()), vocab,
                                          d);
    CUDA_CHECK_LAUNCH();
}

}  // namespace nb::cuda
