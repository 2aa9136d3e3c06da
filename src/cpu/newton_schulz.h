// The quintic Newton-Schulz iteration that Muon uses to orthogonalize its update (KellerJordan/Muon,
// zeropower_via_newtonschulz5), on a host f32 matrix.
//
// With X = G / (||G||_F + 1e-7) (transposed first when G has more rows than columns, so that X X^T is the
// small Gram matrix), repeat `steps` times:
//   A = X X^T ;  B = b A + c A A ;  X <- a X + B X          (a, b, c) = (3.4445, -4.7750, 2.0315)
// Each iteration maps every singular value s of X through p(s) = a s + b s^3 + c s^5, which pushes all of them
// towards ~1 (into about [0.7, 1.2], not exactly 1: the coefficients trade exactness for speed), while the
// singular vectors stay: the result approximates U V^T for G = U S V^T.
// CpuOps::newton_schulz (src/ops/ops.h) runs this on each matrix of its batch; the CUDA backend's batched bf16 version
// is cuda/newton_schulz.cu.
#pragma once

#include <cstdint>

namespace nb {

// out[rows, cols] = NewtonSchulz(g[rows, cols]); row-major. out may alias g (g is read into a copy first).
void newton_schulz5(const float* g, float* out, int64_t rows, int64_t cols, int steps);

}  // namespace nb
