// Argument checks of the linear-algebra ops for optimizers (src/ops/ops.h, "linear algebra for optimizers"), shared
// by both backends so that the same arguments are legal on either and a bad one gets the same message.
//
// Header-only on purpose: the CUDA library (cuda/linalg.cu, cuda/soap.cu) includes it too, and a function
// defined in the core library that only CUDA objects called would not be linked (the static libraries link in
// the order core, cuda).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "src/core/tensor.h"

namespace nb::linalg_checks {

inline std::string describe(const Tensor& t) {
    if (!t.defined()) return "undefined";
    return shape_string(t.shape()) + " " + dtype_name(t.dtype()) + " on " + device_name(t.device());
}

[[noreturn]] inline void fail(const char* op, const std::string& why) {
    throw std::invalid_argument(std::string(op) + ": " + why);
}

// An f32 tensor on `device`, of any shape.
inline void require_f32(const char* op, const char* name, const Tensor& t, Device device) {
    if (!t.defined() || t.dtype() != DType::f32 || t.device() != device)
        fail(op, std::string(name) + " must be an f32 tensor on " + device_name(device) + ", got " + describe(t));
}

// An f32 matrix (rank 2) on `device`.
inline void require_matrix(const char* op, const char* name, const Tensor& t, Device device) {
    require_f32(op, name, t, device);
    if (t.rank() != 2) fail(op, std::string(name) + " must be a matrix, got " + describe(t));
}

// An f32 square matrix on `device`; returns its side.
inline int64_t require_square(const char* op, const char* name, const Tensor& t, Device device) {
    require_matrix(op, name, t, device);
    if (t.dim(0) != t.dim(1)) fail(op, std::string(name) + " must be square, got " + describe(t));
    return t.dim(0);
}

// A factorization's square input a and its output `out_name` of the same side; returns the side.
inline int64_t check_factorization(const char* op, const char* out_name, const Tensor& out, const Tensor& a,
                                   Device device) {
    const int64_t n = require_square(op, "a", a, device);
    if (require_square(op, out_name, out, device) != n)
        fail(op, std::string(out_name) + " " + describe(out) + " must be shaped like a " + describe(a));
    return n;
}

inline bool share_start(const Tensor& a, const Tensor& b) { return a.data() == b.data(); }

// matmul(c, a, b, trans_a, trans_b): c [m,n], op(a) [m,k], op(b) [k,n].
struct MatmulDims {
    int64_t m, n, k;
};
inline MatmulDims check_matmul(const Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
                               Device device) {
    const char* op = "matmul";
    require_matrix(op, "c", c, device);
    require_matrix(op, "a", a, device);
    require_matrix(op, "b", b, device);
    const MatmulDims d{c.dim(0), c.dim(1), trans_a ? a.dim(0) : a.dim(1)};
    const int64_t a_rows = trans_a ? a.dim(1) : a.dim(0);
    const int64_t b_rows = trans_b ? b.dim(1) : b.dim(0), b_cols = trans_b ? b.dim(0) : b.dim(1);
    if (a_rows != d.m || b_rows != d.k || b_cols != d.n)
        fail(op, "c " + describe(c) + " = op(a) op(b) with a " + describe(a) + (trans_a ? " transposed" : "") +
                     ", b " + describe(b) + (trans_b ? " transposed" : "") + ": shapes do not match");
    if (c.numel() > 0 && (share_start(c, a) || share_start(c, b))) fail(op, "c must not share storage with a or b");
    return d;
}

// column_dots(out, a, b): a, b [m,n], out [n]; returns {m, n}.
inline std::pair<int64_t, int64_t> check_column_dots(const Tensor& out, const Tensor& a, const Tensor& b,
                                                     Device device) {
    const char* op = "column_dots";
    require_matrix(op, "a", a, device);
    require_matrix(op, "b", b, device);
    require_f32(op, "out", out, device);
    if (a.shape() != b.shape() || out.numel() != a.dim(1))
        fail(op, "expected a, b [m,n] and out [n]; got a " + describe(a) + ", b " + describe(b) + ", out " +
                     describe(out));
    return {a.dim(0), a.dim(1)};
}

// index_select(dst, src, dim, index): src [r,c], dim 0 or 1, every index in [0, src.dim(dim)).
inline void check_index_select(const Tensor& dst, const Tensor& src, int dim, const std::vector<int64_t>& index,
                               Device device) {
    const char* op = "index_select";
    require_matrix(op, "src", src, device);
    require_matrix(op, "dst", dst, device);
    if (dim != 0 && dim != 1) fail(op, "dim " + std::to_string(dim) + " must be 0 or 1");
    const int64_t count = static_cast<int64_t>(index.size());
    const bool shape_ok = dim == 0 ? dst.dim(0) == count && dst.dim(1) == src.dim(1)
                                   : dst.dim(0) == src.dim(0) && dst.dim(1) == count;
    if (!shape_ok)
        fail(op, "dst " + describe(dst) + " does not hold " + std::to_string(count) + " entries of src " +
                     describe(src) + " along dim " + std::to_string(dim));
    for (int64_t i : index)
        if (i < 0 || i >= src.dim(dim))
            fail(op, "index " + std::to_string(i) + " out of range for dim " + std::to_string(dim) + " of src " +
                         describe(src));
    if (dst.numel() > 0 && share_start(dst, src)) fail(op, "dst must not share storage with src");
}

}  // namespace nb::linalg_checks
