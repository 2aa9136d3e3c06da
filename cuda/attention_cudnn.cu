// Causal grouped-query attention through cuDNN's fused scaled-dot-product attention ("flash" attention), built
// with cuDNN's C backend (graph) API, and the choice between it and the hand-written kernels
// (cuda/attention_cudnn.h says how the choice is made). All cuDNN code of the project lives in this one
// translation unit (cuDNN headers are heavy; llm.c keeps its cuDNN attention apart for the same reason).
//
// ---- the math (the CPU reference's, src/cpu/attention.cpp; scale = 1/sqrt(hd)) ----
//   forward:  S = scale Q K^T, masked where key j > query t; P = softmax_row(S); O = P V;
//             lse_t = log sum_j exp(S_tj)                  (natural log of the scaled, masked scores)
//   backward: P = exp(S - lse) (recomputed from Q, K and lse), D_t = sum_c dO_tc O_tc,
//             dV = P^T dO, dP = dO V^T, dS = P (dP - D), dQ = scale dS K, dK = scale dS^T Q
//   With GQA (H = group * KV) query head h reads kv head h / group, so dK and dV of a kv head are sums over the
//   group's query heads.
//
// ---- how cuDNN sees our tensors (no copies: dimensions and strides describe our row-major layouts) ----
//   cuDNN's attention graphs are written in [batch, heads, sequence, head_dim] order. Our q, out, dout, dq are
//   [B,T,H,hd] in memory, so they are dims [B,H,T,hd] with strides [T*H*hd, hd, H*hd, 1]; k, v, dk, dv the same
//   with KV heads. K^T (and V^T in the backward) is K with the last two dims and strides swapped:
//   dims [B,KV,hd,T], strides [T*KV*hd, hd, 1, KV*hd]. lse [B,H,T] f32 is cuDNN's "stats" tensor, dims
//   [B,H,T,1] strides [H*T, T, 1, 1].
//   The stats cuDNN produces are M + log(sum exp(S - M)) with M the row max, i.e. exactly our lse (natural log,
//   scaled scores): no conversion either way, which is also why the backward takes lse from either
//   implementation.
//
// ---- the graphs: cuDNN recognises these node patterns (the ones cudnn-frontend emits for its sdpa and
// sdpa_backward nodes) and runs each whole graph as one fused flash-attention engine; the [B,H,T,T] "virtual"
// tensors in between are never stored. f32 is the compute and intermediate type, bf16 the I/O type.
//   forward (14 nodes):
//     S    = matmul(Q, K^T)                      f32
//     S1   = S * scale                           (scale: a by-value f32 scalar)
//     row  = gen_index(S1, axis 2), col = gen_index(S1, axis 3)      int32
//     keep = row >= col                          boolean: the causal mask
//     S2   = keep ? S1 : lowest_f32              binary_select (lowest, not -inf: no inf - inf = NaN anywhere)
//     M    = reduce_max(S2) over keys            [B,H,T,1]
//     E    = exp(S2 - M)
//     L    = reduce_add(E) over keys             [B,H,T,1]
//     lse  = M + log(L)                          -> stats output (our lse)
//     P    = E / L                               bf16 (the second matmul takes its A operand in the I/O type)
//     O    = matmul(P, V)                        -> out, bf16
//   backward (21 nodes; 23 with GQA):
//     D    = reduce_add(dO * O) * 1              [B,H,T,1] f32, stored in a scratch tensor ("softmax_sum")
//     S    = matmul(Q, K^T) * scale - lse        f32
//     S2   = keep ? S : lowest_f32               the causal-mask nodes of the forward, here after the - lse
//                                                (cudnn-frontend's order); exp(lowest_f32) is exactly 0
//     P    = exp(S2)                             = the forward's softmax probabilities
//     dV   = matmul(reshape(P)^T, dO)            reshape = P transposed by strides, bf16;
//                                                with GQA: [B,H,T,hd] then reduce_add over each group -> [B,KV,T,hd]
//     dP   = matmul(dO, V^T)
//     dS   = (dP - D) * P * scale
//     dK   = matmul(reshape(dS)^T, Q)            (GQA: reduced over the group as dV)
//     dQ   = matmul(dS, reshape(K^T) = K)        -> dq, bf16, written directly by the matmul
//   Deterministic: this is the graph cudnn-frontend builds for sdpa_backward with its deterministic option (it
//   then uses its "dP workspace" form; on Blackwell it also pins an engine). Its default graph instead sends the
//   dQ matmul into a non-virtual f32 "dQ accumulator" tensor, then identity -> dq; cuDNN's kernels add the
//   partial dQ of each key tile into that tensor from many thread blocks in no fixed order, so dq (and all
//   that follows) is not bitwise repeatable: measured on an H200 at T=2048, dq differed between two runs.
//   Without that tensor the same inputs give the same bits (tests/cuda/test_cuda_attention.cpp checks it).
//   The price, measured there (cuDNN 9.14) at B=8, T=2048, H=15, hd=64: a backward workspace of about
//   B*H*T*(T+128)*2 bytes (1020 MiB, from ctx.scratch() like any workspace) instead of 60 MiB plus the 60 MiB
//   accumulator, and a backward about 20% slower (0.66 instead of 0.56 ms).
//
// ---- gradients accumulate ----
// The op interface ACCUMULATES gradients (dq += ...), cuDNN writes its outputs. The backward therefore writes
// dq, dk, dv into bf16 temporaries and adds them with CudaOps::add_inplace (widened to f32, added, rounded once),
// so each gradient element is rounded twice (cuDNN's store, then the sum); the kernels round once.
//
// ---- plans ----
// Each graph is built once per shape: tensors, operations, the operation graph, cuDNN's heuristics (mode A,
// then the fallback list), and the first engine configuration whose execution plan finalizes. The plan and its
// workspace size are kept in the context's AttentionPlanCache (every descriptor it was built from is kept alive
// with it) and run with a variant pack (uid -> device pointer) per call; the workspace is ctx.scratch().
//
// Every cuDNN call is checked: a failure throws nb::RuntimeError naming the call (with the attribute), cuDNN's
// status string and cuDNN's last error message. Descriptors are owned by a small RAII class, so nothing leaks
// when building fails half way.
#include <cudnn_graph.h>
#include <cuda_runtime.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cuda/attention_cudnn.h"
#include "cuda/context.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_ops.h"
#include "src/core/error.h"

#if !defined(CUDNN_MAJOR) || CUDNN_MAJOR < 9
#error "cuda/attention_cudnn.cu needs the cuDNN 9 graph API (cudnn_graph.h)"
#endif

namespace nb::cuda {

namespace {

// ---- errors ---------------------------------------------------------------------------------------------------

// cuDNN's last error message on this thread (cleared by reading it): usually says which attribute or which
// constraint failed.
std::string cudnn_last_message() {
    char buf[2048] = {0};
    cudnnGetLastErrorString(buf, sizeof buf);
    buf[sizeof buf - 1] = '\0';
    return buf;
}

std::string describe_status(cudnnStatus_t status) {
    std::string s = std::string(cudnnGetErrorString(status)) + " (" + std::to_string(static_cast<int>(status)) + ")";
    const std::string last = cudnn_last_message();
    if (!last.empty()) s += ": " + last;
    return s;
}

[[noreturn]] void throw_cudnn_error(cudnnStatus_t status, const char* what, const char* file, int line) {
    throw RuntimeError(std::string("cuDNN error: ") + what + " failed: " + describe_status(status) + " at " +
                       source_location(file, line));
}

#define CUDNN_CHECK(call)                                                                                   \
    do {                                                                                                    \
        const cudnnStatus_t nb_cudnn_st_ = (call);                                                          \
        if (nb_cudnn_st_ != CUDNN_STATUS_SUCCESS) throw_cudnn_error(nb_cudnn_st_, #call, __FILE__, __LINE__); \
    } while (0)

// cudnnBackendSetAttribute with the attribute's name in the error message.
#define CUDNN_SET(desc, attr, type, count, ptr) \
    CUDNN_CHECK(cudnnBackendSetAttribute((desc), attr, type, (count), (ptr)))

// ---- descriptors ----------------------------------------------------------------------------------------------

// Owns one backend descriptor (destroyed with it; movable, not copyable).
class Desc {
public:
    explicit Desc(cudnnBackendDescriptorType_t type) { CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d_)); }
    Desc(Desc&& o) noexcept : d_(std::exchange(o.d_, nullptr)) {}
    Desc& operator=(Desc&&) = delete;
    Desc(const Desc&) = delete;
    Desc& operator=(const Desc&) = delete;
    ~Desc() { reset(); }
    cudnnBackendDescriptor_t get() const { return d_; }

private:
    void reset() noexcept {
        if (d_) cudnnBackendDestroyDescriptor(d_);  // a destructor must not throw; the status is of no use here
        d_ = nullptr;
    }
    cudnnBackendDescriptor_t d_ = nullptr;
};

// Where plans are built for: the live GPU (a cuDNN handle; what this file uses), or a GPU described by a
// DEVICEPROP descriptor made from cuDNN's device-property JSON (cuDNN >= 9.8 plans "devicelessly": a program that
// #includes this file can check on a machine without a GPU that cuDNN's engines accept both graphs for an H200;
// the plans then fail only where the compiled kernels are loaded into a driver).
struct Target {
    cudnnHandle_t handle = nullptr;
    cudnnBackendDescriptor_t device_prop = nullptr;
};

using Dims4 = std::array<int64_t, 4>;

constexpr int64_t kAlignment = 16;  // bytes; every pointer we pass is 16-byte aligned (checked before running)

// Tensor unique ids of the non-virtual tensors (the variant pack binds device pointers to them); virtual
// tensors get ids from kFirstVirtualUid on.
enum Uid : int64_t {
    kUidQ = 1,
    kUidK = 2,
    kUidV = 3,
    kUidO = 4,
    kUidStats = 5,
    kUidScale = 6,
    kUidMaskValue = 7,
    kUidDO = 8,
    kUidDQ = 9,
    kUidDK = 10,
    kUidDV = 11,
    kUidOne = 12,
    kUidSoftmaxSum = 13,
    kFirstVirtualUid = 100,
};

// Builds one operation graph: creates and finalizes the tensor and operation descriptors (keeping them all
// alive) and collects the operations.
class GraphBuilder {
public:
    // A non-virtual tensor: bound to memory by the variant pack (a device pointer, or for a by-value tensor a
    // host pointer to the scalar).
    cudnnBackendDescriptor_t tensor(int64_t uid, cudnnDataType_t type, const Dims4& dims, const Dims4& strides,
                                    bool by_value = false) {
        return make_tensor(uid, type, dims, strides, false, by_value);
    }
    // An intermediate tensor of the fused graph (never stored).
    cudnnBackendDescriptor_t virt(cudnnDataType_t type, const Dims4& dims, const Dims4& strides) {
        return make_tensor(next_virtual_uid_++, type, dims, strides, true, false);
    }
    // A by-value f32 scalar ([1,1,1,1]).
    cudnnBackendDescriptor_t scalar(int64_t uid) {
        return make_tensor(uid, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true);
    }

    // y = mode(x [, b [, t]]). math_prec is the compute type; axis only for GEN_INDEX.
    void pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t math_prec, cudnnBackendDescriptor_t x,
                   cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y,
                   int64_t axis = -1) {
        Desc& pw = keep(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
        CUDNN_SET(pw.get(), CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
        CUDNN_SET(pw.get(), CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math_prec);
        if (axis >= 0) CUDNN_SET(pw.get(), CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
        CUDNN_CHECK(cudnnBackendFinalize(pw.get()));

        Desc& op = keep(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
        cudnnBackendDescriptor_t pwd = pw.get();
        CUDNN_SET(op.get(), CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pwd);
        CUDNN_SET(op.get(), CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
        if (b) CUDNN_SET(op.get(), CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
        if (t) CUDNN_SET(op.get(), CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t);
        CUDNN_SET(op.get(), CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
        CUDNN_CHECK(cudnnBackendFinalize(op.get()));
        ops_.push_back(op.get());
    }
    void unary(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
        pointwise(mode, CUDNN_DATA_FLOAT, x, nullptr, nullptr, y);
    }
    void binary(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                cudnnBackendDescriptor_t y) {
        pointwise(mode, CUDNN_DATA_FLOAT, x, b, nullptr, y);
    }

    // c = a b over the last two dims, batched over the first two (b's head dim may divide a's: GQA).
    void matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c) {
        Desc& mm = keep(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
        const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
        CUDNN_SET(mm.get(), CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
        CUDNN_CHECK(cudnnBackendFinalize(mm.get()));

        Desc& op = keep(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
        cudnnBackendDescriptor_t mmd = mm.get();
        CUDNN_SET(op.get(), CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a);
        CUDNN_SET(op.get(), CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
        CUDNN_SET(op.get(), CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c);
        CUDNN_SET(op.get(), CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mmd);
        CUDNN_CHECK(cudnnBackendFinalize(op.get()));
        ops_.push_back(op.get());
    }

    // y = reduce(x) over the dims where y has extent 1 (or over each group of heads, where y has fewer heads).
    void reduction(cudnnReduceTensorOp_t reduce_op, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
        Desc& red = keep(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
        const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
        CUDNN_SET(red.get(), CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce_op);
        CUDNN_SET(red.get(), CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
        CUDNN_CHECK(cudnnBackendFinalize(red.get()));

        Desc& op = keep(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
        cudnnBackendDescriptor_t redd = red.get();
        CUDNN_SET(op.get(), CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
        CUDNN_SET(op.get(), CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
        CUDNN_SET(op.get(), CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &redd);
        CUDNN_CHECK(cudnnBackendFinalize(op.get()));
        ops_.push_back(op.get());
    }

    // y = x seen with other dims/strides (here: a transpose by strides).
    void reshape(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
        Desc& op = keep(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
        CUDNN_SET(op.get(), CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
        CUDNN_SET(op.get(), CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
        CUDNN_CHECK(cudnnBackendFinalize(op.get()));
        ops_.push_back(op.get());
    }

    // The causal mask on scores x ([B,H,T,T] f32): y = (row >= col) ? x : lowest f32 (uid kUidMaskValue).
    void causal_mask(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y, const Dims4& dims,
                     const Dims4& strides) {
        cudnnBackendDescriptor_t row = virt(CUDNN_DATA_INT32, dims, strides);
        cudnnBackendDescriptor_t col = virt(CUDNN_DATA_INT32, dims, strides);
        cudnnBackendDescriptor_t keep_mask = virt(CUDNN_DATA_BOOLEAN, dims, strides);
        pointwise(CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, x, nullptr, nullptr, row, 2);
        pointwise(CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, x, nullptr, nullptr, col, 3);
        pointwise(CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, nullptr, keep_mask);
        pointwise(CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, x, scalar(kUidMaskValue), keep_mask, y);
    }

    std::vector<Desc>& descriptors() { return owned_; }
    const std::vector<cudnnBackendDescriptor_t>& operations() const { return ops_; }

private:
    Desc& keep(cudnnBackendDescriptorType_t type) {
        owned_.emplace_back(type);
        return owned_.back();
    }

    cudnnBackendDescriptor_t make_tensor(int64_t uid, cudnnDataType_t type, const Dims4& dims, const Dims4& strides,
                                         bool is_virtual, bool by_value) {
        Desc& t = keep(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
        CUDNN_SET(t.get(), CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
        CUDNN_SET(t.get(), CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
        CUDNN_SET(t.get(), CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data());
        CUDNN_SET(t.get(), CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data());
        CUDNN_SET(t.get(), CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &kAlignment);
        CUDNN_SET(t.get(), CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
        if (by_value) CUDNN_SET(t.get(), CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
        CUDNN_CHECK(cudnnBackendFinalize(t.get()));
        return t.get();
    }

    // std::vector may move its Descs when it grows: a move keeps the raw handle, so the handles handed out stay
    // valid.
    std::vector<Desc> owned_;
    std::vector<cudnnBackendDescriptor_t> ops_;
    int64_t next_virtual_uid_ = kFirstVirtualUid;
};

// ---- the two graphs -------------------------------------------------------------------------------------------

// Dims and strides of our tensors in cuDNN's [B, heads, seq, hd] order (see the top of the file).
struct Layout {
    int64_t B, T, H, KV, hd;
    Dims4 q_dims() const { return {B, H, T, hd}; }
    Dims4 q_strides() const { return {T * H * hd, hd, H * hd, 1}; }  // q, out, dout, dq
    Dims4 kv_dims() const { return {B, KV, T, hd}; }
    Dims4 kv_strides() const { return {T * KV * hd, hd, KV * hd, 1}; }  // k, v, dk, dv
    Dims4 kvt_dims() const { return {B, KV, hd, T}; }
    Dims4 kvt_strides() const { return {T * KV * hd, hd, 1, KV * hd}; }  // K^T, V^T: the same memory
    Dims4 stats_dims() const { return {B, H, T, 1}; }
    Dims4 stats_strides() const { return {H * T, T, 1, 1}; }  // lse [B,H,T]
    Dims4 scores_dims() const { return {B, H, T, T}; }
    Dims4 scores_strides() const { return {H * T * T, T * T, T, 1}; }
    Dims4 scores_t_strides() const { return {H * T * T, T * T, 1, T}; }  // the same scores, transposed
    Dims4 packed_q_strides() const { return {H * T * hd, T * hd, hd, 1}; }  // [B,H,T,hd] contiguous
};

void build_forward(GraphBuilder& g, const Layout& l) {
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT, bf16 = CUDNN_DATA_BFLOAT16;
    const Dims4 sd = l.scores_dims(), ss = l.scores_strides();
    const Dims4 rd = l.stats_dims(), rs = l.stats_strides();

    cudnnBackendDescriptor_t q = g.tensor(kUidQ, bf16, l.q_dims(), l.q_strides());
    cudnnBackendDescriptor_t kt = g.tensor(kUidK, bf16, l.kvt_dims(), l.kvt_strides());
    cudnnBackendDescriptor_t v = g.tensor(kUidV, bf16, l.kv_dims(), l.kv_strides());
    cudnnBackendDescriptor_t o = g.tensor(kUidO, bf16, l.q_dims(), l.q_strides());
    cudnnBackendDescriptor_t stats = g.tensor(kUidStats, f32, rd, rs);

    cudnnBackendDescriptor_t s = g.virt(f32, sd, ss);
    g.matmul(q, kt, s);  // S = Q K^T
    cudnnBackendDescriptor_t s1 = g.virt(f32, sd, ss);
    g.binary(CUDNN_POINTWISE_MUL, s, g.scalar(kUidScale), s1);  // S1 = scale S
    cudnnBackendDescriptor_t s2 = g.virt(f32, sd, ss);
    g.causal_mask(s1, s2, sd, ss);

    // Softmax with its statistics, in the form cuDNN fuses (the online softmax of flash attention).
    cudnnBackendDescriptor_t m = g.virt(f32, rd, rs);
    g.reduction(CUDNN_REDUCE_TENSOR_MAX, s2, m);  // M = row max
    cudnnBackendDescriptor_t z = g.virt(f32, sd, ss);
    g.binary(CUDNN_POINTWISE_SUB, s2, m, z);  // S2 - M
    cudnnBackendDescriptor_t e = g.virt(f32, sd, ss);
    g.unary(CUDNN_POINTWISE_EXP, z, e);  // E = exp(S2 - M)
    cudnnBackendDescriptor_t sum = g.virt(f32, rd, rs);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, sum);  // L = row sum of E
    cudnnBackendDescriptor_t log_sum = g.virt(f32, rd, rs);
    g.unary(CUDNN_POINTWISE_LOG, sum, log_sum);
    g.binary(CUDNN_POINTWISE_ADD, m, log_sum, stats);  // lse = M + log L
    cudnnBackendDescriptor_t p = g.virt(bf16, sd, ss);
    g.binary(CUDNN_POINTWISE_DIV, e, sum, p);  // P = E / L, in bf16 for the second matmul

    g.matmul(p, v, o);  // O = P V
}

void build_backward(GraphBuilder& g, const Layout& l) {
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT, bf16 = CUDNN_DATA_BFLOAT16;
    const Dims4 sd = l.scores_dims(), ss = l.scores_strides(), sts = l.scores_t_strides();
    const Dims4 rd = l.stats_dims(), rs = l.stats_strides();
    const bool gqa = l.H != l.KV;

    cudnnBackendDescriptor_t q = g.tensor(kUidQ, bf16, l.q_dims(), l.q_strides());
    cudnnBackendDescriptor_t kt = g.tensor(kUidK, bf16, l.kvt_dims(), l.kvt_strides());
    cudnnBackendDescriptor_t vt = g.tensor(kUidV, bf16, l.kvt_dims(), l.kvt_strides());
    cudnnBackendDescriptor_t o = g.tensor(kUidO, bf16, l.q_dims(), l.q_strides());
    cudnnBackendDescriptor_t stats = g.tensor(kUidStats, f32, rd, rs);
    cudnnBackendDescriptor_t d_o = g.tensor(kUidDO, bf16, l.q_dims(), l.q_strides());
    cudnnBackendDescriptor_t dq = g.tensor(kUidDQ, bf16, l.q_dims(), l.q_strides());
    cudnnBackendDescriptor_t dk = g.tensor(kUidDK, bf16, l.kv_dims(), l.kv_strides());
    cudnnBackendDescriptor_t dv = g.tensor(kUidDV, bf16, l.kv_dims(), l.kv_strides());
    cudnnBackendDescriptor_t scale = g.scalar(kUidScale);

    // D = rowsum(dO * O), kept in memory (softmax_sum) for the fused kernels.
    cudnnBackendDescriptor_t do_o = g.virt(f32, l.q_dims(), l.q_strides());
    g.binary(CUDNN_POINTWISE_MUL, d_o, o, do_o);
    cudnnBackendDescriptor_t d_red = g.virt(f32, rd, rs);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, do_o, d_red);
    cudnnBackendDescriptor_t d_sum = g.tensor(kUidSoftmaxSum, f32, rd, rs);
    g.binary(CUDNN_POINTWISE_MUL, d_red, g.scalar(kUidOne), d_sum);  // (* 1: the dropout-scale slot, unused)

    // P = exp(scale Q K^T - lse), masked.
    cudnnBackendDescriptor_t s = g.virt(f32, sd, ss);
    g.matmul(q, kt, s);
    cudnnBackendDescriptor_t s1 = g.virt(f32, sd, ss);
    g.binary(CUDNN_POINTWISE_MUL, s, scale, s1);
    cudnnBackendDescriptor_t s2 = g.virt(f32, sd, ss);
    g.binary(CUDNN_POINTWISE_SUB, s1, stats, s2);
    cudnnBackendDescriptor_t s3 = g.virt(f32, sd, ss);
    g.causal_mask(s2, s3, sd, ss);
    cudnnBackendDescriptor_t p = g.virt(f32, sd, ss);
    g.unary(CUDNN_POINTWISE_EXP, s3, p);

    // dV = P^T dO (P^T: P with transposed strides, in bf16); with GQA summed over each group of query heads.
    cudnnBackendDescriptor_t pt = g.virt(bf16, sd, sts);
    g.reshape(p, pt);
    if (gqa) {
        cudnnBackendDescriptor_t dv_full = g.virt(bf16, l.q_dims(), l.packed_q_strides());
        g.matmul(pt, d_o, dv_full);
        g.reduction(CUDNN_REDUCE_TENSOR_ADD, dv_full, dv);
    } else {
        g.matmul(pt, d_o, dv);
    }

    // dS = scale P (dO V^T - D).
    cudnnBackendDescriptor_t dp = g.virt(f32, sd, ss);
    g.matmul(d_o, vt, dp);
    cudnnBackendDescriptor_t dp1 = g.virt(f32, sd, ss);
    g.binary(CUDNN_POINTWISE_SUB, dp, d_sum, dp1);
    cudnnBackendDescriptor_t ds0 = g.virt(f32, sd, ss);
    g.binary(CUDNN_POINTWISE_MUL, dp1, p, ds0);
    cudnnBackendDescriptor_t ds = g.virt(f32, sd, ss);
    g.binary(CUDNN_POINTWISE_MUL, ds0, scale, ds);

    // dK = dS^T Q (GQA: summed over the group).
    cudnnBackendDescriptor_t dst = g.virt(bf16, sd, sts);
    g.reshape(ds, dst);
    if (gqa) {
        cudnnBackendDescriptor_t dk_full = g.virt(bf16, l.q_dims(), l.packed_q_strides());
        g.matmul(dst, q, dk_full);
        g.reduction(CUDNN_REDUCE_TENSOR_ADD, dk_full, dk);
    } else {
        g.matmul(dst, q, dk);
    }

    // dQ = dS K straight into dq: no f32 dQ accumulator, hence cuDNN's deterministic backward (see the top of
    // the file). K is K^T seen with its dims swapped back (cudnn-frontend leaves this view's type unset, which
    // makes it an f32 intermediate; kept the same).
    cudnnBackendDescriptor_t k = g.virt(f32, l.kv_dims(), l.kv_strides());
    g.reshape(kt, k);
    g.matmul(ds, k, dq);
}

// ---- plans ----------------------------------------------------------------------------------------------------

// An execution plan and everything it was built from (kept alive for as long as the plan is used).
struct Plan {
    std::vector<Desc> keep;
    cudnnBackendDescriptor_t plan = nullptr;
    int64_t workspace_bytes = 0;
    std::string engine;  // e.g. "engine 6 (heuristics A #1/3)": which cuDNN engine runs it, for reports
};

// "engine N": cuDNN's global index of the engine of a configuration (for reports; "engine ?" if unreadable).
std::string engine_name(cudnnBackendDescriptor_t config) {
    try {
        Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
        cudnnBackendDescriptor_t e = engine.get();
        int64_t count = 0, index = -1;
        if (cudnnBackendGetAttribute(config, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &count,
                                     &e) == CUDNN_STATUS_SUCCESS &&
            cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &count, &index) ==
                CUDNN_STATUS_SUCCESS)
            return "engine " + std::to_string(index);
    } catch (const RuntimeError&) {
    }
    cudnn_last_message();  // clear what the failed query left
    return "engine ?";
}

// Finalizes the graph and picks the first engine configuration, in cuDNN's heuristic order (mode A, then
// the fallback list), whose execution plan finalizes. RuntimeError naming the reason when none does.
Plan make_plan(GraphBuilder&& g, const Target& target, const char* what) {
    Plan plan;
    plan.keep = std::move(g.descriptors());
    const std::vector<cudnnBackendDescriptor_t>& ops = g.operations();

    Desc graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    CUDNN_SET(graph.get(), CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
              static_cast<int64_t>(ops.size()), ops.data());
    if (target.handle) CUDNN_SET(graph.get(), CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &target.handle);
    CUDNN_CHECK(cudnnBackendFinalize(graph.get()));
    cudnnBackendDescriptor_t graph_d = graph.get();
    plan.keep.push_back(std::move(graph));

    std::string tried;  // what each heuristics mode offered and why it did not build
    for (const cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
        const char* mode_name = mode == CUDNN_HEUR_MODE_A ? "A" : "fallback";
        Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
        CUDNN_SET(heur.get(), CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph_d);
        CUDNN_SET(heur.get(), CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
        if (target.device_prop)
            CUDNN_SET(heur.get(), CUDNN_ATTR_ENGINEHEUR_DEVICEPROP, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                      &target.device_prop);
        const cudnnStatus_t heur_status = cudnnBackendFinalize(heur.get());
        if (heur_status != CUDNN_STATUS_SUCCESS) {
            tried += std::string("; heuristics mode ") + mode_name + ": " + describe_status(heur_status);
            continue;
        }
        int64_t available = 0;
        CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                             CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &available, nullptr));
        if (available <= 0) {
            tried += std::string("; heuristics mode ") + mode_name + ": no engine configuration";
            continue;
        }
        std::vector<Desc> configs;
        std::vector<cudnnBackendDescriptor_t> raw;
        for (int64_t i = 0; i < available; ++i) {
            configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
            raw.push_back(configs.back().get());
        }
        int64_t returned = 0;
        CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                             CUDNN_TYPE_BACKEND_DESCRIPTOR, available, &returned, raw.data()));
        std::string last;
        for (int64_t i = 0; i < returned && i < available; ++i) {
            Desc exec(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
            if (target.handle)
                CUDNN_SET(exec.get(), CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &target.handle);
            if (target.device_prop)
                CUDNN_SET(exec.get(), CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                          &target.device_prop);
            CUDNN_SET(exec.get(), CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                      &raw[static_cast<size_t>(i)]);
            const cudnnStatus_t st = cudnnBackendFinalize(exec.get());
            if (st != CUDNN_STATUS_SUCCESS) {
                last = describe_status(st);
                continue;
            }
            int64_t ws = 0, got = 0;
            CUDNN_CHECK(cudnnBackendGetAttribute(exec.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                 CUDNN_TYPE_INT64, 1, &got, &ws));
            if (ws < 0) throw RuntimeError(std::string(what) + ": cuDNN reports a negative workspace size");
            plan.workspace_bytes = ws;
            plan.plan = exec.get();
            plan.engine = engine_name(raw[static_cast<size_t>(i)]) + " (heuristics " + mode_name + " #" +
                          std::to_string(i + 1) + "/" + std::to_string(returned) + ")";
            for (Desc& c : configs) plan.keep.push_back(std::move(c));
            plan.keep.push_back(std::move(heur));
            plan.keep.push_back(std::move(exec));
            return plan;
        }
        tried += std::string("; heuristics mode ") + mode_name + ": none of " + std::to_string(returned) +
                 " engine configurations finalized an execution plan (last: " + last + ")";
    }
    throw RuntimeError(std::string(what) + ": no cuDNN execution plan" + tried);
}

Plan plan_forward(const Layout& l, const Target& target) {
    GraphBuilder g;
    build_forward(g, l);
    return make_plan(std::move(g), target, "attention forward graph");
}

Plan plan_backward(const Layout& l, const Target& target) {
    GraphBuilder g;
    build_backward(g, l);
    return make_plan(std::move(g), target, "attention backward graph");
}

// Runs a plan: binds each uid to its pointer (device memory, or for by-value scalars host memory holding the
// value) and the workspace, on the handle's stream.
void execute(cudnnHandle_t handle, const Plan& plan, const std::vector<std::pair<int64_t, void*>>& bindings,
             void* workspace) {
    std::vector<int64_t> uids;
    std::vector<void*> ptrs;
    for (const auto& [uid, ptr] : bindings) {
        uids.push_back(uid);
        ptrs.push_back(ptr);
    }
    Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    CUDNN_SET(pack.get(), CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(uids.size()),
              uids.data());
    CUDNN_SET(pack.get(), CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
              static_cast<int64_t>(ptrs.size()), ptrs.data());
    CUDNN_SET(pack.get(), CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
    CUDNN_CHECK(cudnnBackendFinalize(pack.get()));
    CUDNN_CHECK(cudnnBackendExecute(handle, plan.plan, pack.get()));
}

std::string shape_text(const AttentionShape& s) {
    return "B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " H=" + std::to_string(s.H) +
           " KV=" + std::to_string(s.KV) + " head_dim=" + std::to_string(s.hd);
}

std::string version_text(size_t v) {  // 91900 -> "9.19.0"
    return std::to_string(v / 10000) + "." + std::to_string(v % 10000 / 100) + "." + std::to_string(v % 100);
}

}  // namespace

// ---- the per-context cache ------------------------------------------------------------------------------------

// One shape's decision: both plans, or why cuDNN does not take it.
struct AttentionShapePlans {
    bool ok = false;
    std::string why_not;
    Plan forward, backward;
};

struct AttentionPlanCache {
    AttentionImpl impl = AttentionImpl::automatic;
    cudnnHandle_t handle = nullptr;  // created on first use, on the context's stream
    std::string handle_error;        // why cudnnCreate failed (then cuDNN is never tried again)
    std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>, std::unique_ptr<AttentionShapePlans>> shapes;
    AttentionCounts counts;
    const char* last = "none";
    std::string first_fallback;  // shape and reason of the first problem auto mode gave to the kernels
    std::string engines;         // the engines of the latest shape cuDNN took

    ~AttentionPlanCache() {
        shapes.clear();  // descriptors before the handle they were built with
        if (handle) cudnnDestroy(handle);
    }
};

void destroy_attention_plans(AttentionPlanCache* cache) noexcept { delete cache; }

namespace {

AttentionPlanCache& cache_of(CudaContext& ctx) {
    if (!ctx.attention_plans) {
        const AttentionImpl impl = parse_attention_impl(std::getenv("NOBUBBLE_CUDA_ATTENTION"));
        ctx.attention_plans = new AttentionPlanCache();
        ctx.attention_plans->impl = impl;
    }
    return *ctx.attention_plans;
}

// Why cuDNN cannot take any problem on this machine ("" when it might).
std::string machine_reason(CudaContext& ctx, AttentionPlanCache& c) {
    const size_t version = cudnnGetVersion();
    if (version < 90000) return "cuDNN " + version_text(version) + " is older than 9.0";
    if (ctx.compute_capability < 80)
        return "compute capability " + std::to_string(ctx.compute_capability / 10) + "." +
               std::to_string(ctx.compute_capability % 10) + " < 8.0";
    if (!c.handle && c.handle_error.empty()) {
        const cudnnStatus_t st = cudnnCreate(&c.handle);
        if (st != CUDNN_STATUS_SUCCESS) {
            c.handle = nullptr;
            c.handle_error = "cudnnCreate failed: " + describe_status(st);
        } else {
            const cudnnStatus_t ss = cudnnSetStream(c.handle, ctx.stream);
            if (ss != CUDNN_STATUS_SUCCESS) {
                cudnnDestroy(c.handle);
                c.handle = nullptr;
                c.handle_error = "cudnnSetStream failed: " + describe_status(ss);
            }
        }
    }
    return c.handle_error;
}

// The shape's plans, built on first use (both directions, so that forward and backward agree).
AttentionShapePlans& plans_for(CudaContext& ctx, AttentionPlanCache& c, const AttentionShape& s) {
    const auto key = std::make_tuple(s.B, s.T, s.H, s.KV, s.hd);
    auto it = c.shapes.find(key);
    if (it != c.shapes.end()) return *it->second;

    auto entry = std::make_unique<AttentionShapePlans>();
    std::string why = machine_reason(ctx, c);
    if (why.empty() && (s.hd % 8 != 0 || s.hd > 128))
        why = "head_dim " + std::to_string(s.hd) + " (cuDNN's fused attention takes a multiple of 8 up to 128)";
    if (why.empty() && (s.KV <= 0 || s.H % s.KV != 0)) why = "H is not a multiple of KV";
    if (why.empty()) {
        const Layout l{s.B, s.T, s.H, s.KV, s.hd};
        const Target target{c.handle, nullptr};
        try {
            entry->forward = plan_forward(l, target);
            entry->backward = plan_backward(l, target);
            entry->ok = true;
            c.engines = shape_text(s) + ": forward " + entry->forward.engine + ", backward " +
                        entry->backward.engine;
        } catch (const RuntimeError& e) {
            why = e.what();
        }
    }
    entry->why_not = why;
    return *c.shapes.emplace(key, std::move(entry)).first->second;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The common part of both directions: whether this call runs on cuDNN (counting kernel calls otherwise).
const AttentionShapePlans* choose(CudaOps& ops, AttentionPlanCache& c, const AttentionShape& s, bool backward,
                                  std::initializer_list<const Tensor*> extra_aligned) {
    int64_t& kernel_count = backward ? c.counts.kernel_backward : c.counts.kernel_forward;
    if (c.impl == AttentionImpl::kernel) {
        ++kernel_count;
        c.last = "kernel";
        return nullptr;
    }
    AttentionShapePlans& p = plans_for(ops.context(), c, s);
    std::string why = p.ok ? std::string() : p.why_not;
    if (why.empty())
        for (const Tensor* t : extra_aligned)
            if (!aligned16(t->data())) why = "a tensor does not start 16-byte aligned";
    if (why.empty()) return &p;
    if (c.impl == AttentionImpl::cudnn)
        throw RuntimeError(std::string("attention_") + (backward ? "backward" : "forward") +
                           ": cuDNN attention is required (NOBUBBLE_CUDA_ATTENTION=cudnn) but cannot run " +
                           shape_text(s) + ": " + why);
    if (c.first_fallback.empty()) c.first_fallback = shape_text(s) + ": " + why;
    ++kernel_count;
    c.last = "kernel";
    return nullptr;
}

}  // namespace

bool attention_forward_cudnn(CudaOps& ops, const AttentionShape& s, Tensor& out, Tensor& lse, const Tensor& q,
                             const Tensor& k, const Tensor& v) {
    CudaContext& ctx = ops.context();
    AttentionPlanCache& c = cache_of(ctx);
    const AttentionShapePlans* p = choose(ops, c, s, false, {&out, &lse, &q, &k, &v});
    if (!p) return false;

    float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.hd)));  // as the CPU reference
    float mask_value = std::numeric_limits<float>::lowest();
    void* workspace = p->forward.workspace_bytes > 0 ? ctx.scratch(static_cast<size_t>(p->forward.workspace_bytes))
                                                     : nullptr;
    execute(c.handle, p->forward,
            {{kUidQ, const_cast<void*>(q.data())},
             {kUidK, const_cast<void*>(k.data())},
             {kUidV, const_cast<void*>(v.data())},
             {kUidO, out.data()},
             {kUidStats, lse.data()},
             {kUidScale, &scale},
             {kUidMaskValue, &mask_value}},
            workspace);
    ++c.counts.cudnn_forward;
    c.last = "cudnn";
    return true;
}

bool attention_backward_cudnn(CudaOps& ops, const AttentionShape& s, Tensor& dq, Tensor& dk, Tensor& dv,
                              const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& lse) {
    CudaContext& ctx = ops.context();
    AttentionPlanCache& c = cache_of(ctx);
    const AttentionShapePlans* p = choose(ops, c, s, true, {&dout, &q, &k, &v, &out, &lse});
    if (!p) return false;

    // cuDNN writes its gradients: into temporaries, added into dq, dk, dv below. Every tensor here comes from
    // the caching allocator (aligned far beyond 16 bytes); they go back to it when this function returns, which
    // is safe because everything runs in the order of the one stream.
    Tensor dq_new = Tensor::empty(q.shape(), DType::bf16, Device::cuda);
    Tensor dk_new = Tensor::empty(k.shape(), DType::bf16, Device::cuda);
    Tensor dv_new = Tensor::empty(v.shape(), DType::bf16, Device::cuda);
    Tensor softmax_sum = Tensor::empty({s.B, s.H, s.T}, DType::f32, Device::cuda);

    float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.hd)));
    float mask_value = std::numeric_limits<float>::lowest();
    float one = 1.0f;
    void* workspace = p->backward.workspace_bytes > 0
                          ? ctx.scratch(static_cast<size_t>(p->backward.workspace_bytes))
                          : nullptr;
    execute(c.handle, p->backward,
            {{kUidQ, const_cast<void*>(q.data())},
             {kUidK, const_cast<void*>(k.data())},
             {kUidV, const_cast<void*>(v.data())},
             {kUidO, const_cast<void*>(out.data())},
             {kUidStats, const_cast<void*>(lse.data())},
             {kUidDO, const_cast<void*>(dout.data())},
             {kUidDQ, dq_new.data()},
             {kUidDK, dk_new.data()},
             {kUidDV, dv_new.data()},
             {kUidScale, &scale},
             {kUidMaskValue, &mask_value},
             {kUidOne, &one},
             {kUidSoftmaxSum, softmax_sum.data()}},
            workspace);
    ops.add_inplace(dq, dq_new);
    ops.add_inplace(dk, dk_new);
    ops.add_inplace(dv, dv_new);
    ++c.counts.cudnn_backward;
    c.last = "cudnn";
    return true;
}

// ---- the choice and the report --------------------------------------------------------------------------------

// The table's names are string literals, so data() is NUL-terminated.
const char* attention_impl_name(AttentionImpl impl) { return kAttentionImpls.name(impl).data(); }

AttentionImpl parse_attention_impl(const char* value) {
    const std::string v = value ? value : "";
    if (v.empty()) return AttentionImpl::automatic;
    if (const std::optional<AttentionImpl> impl = kAttentionImpls.find(v)) return *impl;
    throw RuntimeError("NOBUBBLE_CUDA_ATTENTION='" + v + "': expected " + kAttentionImpls.choices_text());
}

AttentionImpl attention_impl(CudaOps& ops) { return cache_of(ops.context()).impl; }

void set_attention_impl(CudaOps& ops, AttentionImpl impl) {
    CudaContext& ctx = ops.context();
    if (!ctx.attention_plans) ctx.attention_plans = new AttentionPlanCache();  // the environment is not read
    ctx.attention_plans->impl = impl;
}

AttentionCounts attention_counts(CudaOps& ops) { return cache_of(ops.context()).counts; }

void reset_attention_counts(CudaOps& ops) {
    AttentionPlanCache& c = cache_of(ops.context());
    c.counts = AttentionCounts{};
    c.last = "none";
}

const char* last_attention_impl(CudaOps& ops) { return cache_of(ops.context()).last; }

std::string attention_report(CudaOps& ops) {
    const AttentionPlanCache& c = cache_of(ops.context());
    const AttentionCounts& n = c.counts;
    std::string r = "cuDNN " + version_text(cudnnGetVersion()) + " fused flash attention: " +
                    std::to_string(n.cudnn_forward) + " forward + " + std::to_string(n.cudnn_backward) +
                    " backward calls; hand-written kernels: " + std::to_string(n.kernel_forward) + " forward + " +
                    std::to_string(n.kernel_backward) + " backward calls (NOBUBBLE_CUDA_ATTENTION=" +
                    attention_impl_name(c.impl) + ")";
    if (!c.engines.empty()) r += "; " + c.engines;
    if (!c.first_fallback.empty()) r += "; cuDNN not used for " + c.first_fallback;
    return r;
}

}  // namespace nb::cuda
