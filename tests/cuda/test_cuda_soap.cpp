// SOAP on the CUDA backend: the linear-algebra ops for optimizers (src/ops/ops.h; cuda/linalg.cu: cuBLAS and
// cuSOLVER, cuda/soap.cu: the small kernels) against the CPU reference op by op, then 12 calls of Soap::step on
// CpuOps and on CudaOps. Skipped (exit 77) without a GPU.
//
// Inputs are f32 (this is optimizer state: no bf16 rounding). What is compared, and how closely:
// - the small element-wise kernels: the CPU's bits exactly (every operation explicitly rounded on both sides);
// - matmul: within the classic f32 error bound of a k-term sum, on both sides: so TF32 (10-bit mantissa)
//   would fail it by orders of magnitude;
// - the factorizations: by their defining properties, and against the CPU's up to the columns' signs (and for
//   eigenvectors, within a tolerance that grows as the eigenvalue gap shrinks, as perturbation theory says);
// - SOAP: sign-free quantities (weights, second moments, GG, the first moment in the original space).
#include "tests/cuda/cuda_test_main.h"
#include "tests/cuda/cuda_test_util.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/params.h"
#include "optim/soap.h"

namespace {

constexpr double kU = 1.0 / 16777216.0;  // 2^-24: unit roundoff of f32

// Backward error of a Householder factorization of an n x n matrix is a modest multiple of n u (Higham,
// "Accuracy and Stability of Numerical Algorithms", 18.3 and 19.3); 32 n u leaves room for two solvers.
double factorization_tol(int64_t n) { return 32.0 * static_cast<double>(n) * kU; }

using Matrix = std::vector<double>;  // row-major n x n, in double, for the checks

Matrix host_matrix(const Tensor& t) {
    const Tensor h = to_host_f32(t, cuda_ops());
    return Matrix(h.f32(), h.f32() + h.numel());
}

double max_abs(const Matrix& m) {
    double worst = 0.0;
    for (double x : m) worst = std::max(worst, std::fabs(x));
    return worst;
}

double frobenius(const Matrix& m) {
    double sum = 0.0;
    for (double x : m) sum += x * x;
    return std::sqrt(sum);
}

// a^T m b for n x n matrices.
Matrix transpose_times(const Matrix& a, const Matrix& m, const Matrix& b, int64_t n) {
    const size_t un = static_cast<size_t>(n);
    Matrix mb(un * un, 0.0), out(un * un, 0.0);
    for (size_t i = 0; i < un; ++i)
        for (size_t k = 0; k < un; ++k)
            for (size_t j = 0; j < un; ++j) mb[i * un + j] += m[i * un + k] * b[k * un + j];
    for (size_t k = 0; k < un; ++k)
        for (size_t i = 0; i < un; ++i)
            for (size_t j = 0; j < un; ++j) out[i * un + j] += a[k * un + i] * mb[k * un + j];
    return out;
}

Matrix identity(int64_t n) {
    Matrix m(static_cast<size_t>(n * n), 0.0);
    for (int64_t k = 0; k < n; ++k) m[static_cast<size_t>(k * n + k)] = 1.0;
    return m;
}

// max |Q^T Q - I|
double orthonormality_error(const Matrix& q, int64_t n) {
    const Matrix qtq = transpose_times(q, identity(n), q, n);
    double worst = 0.0;
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j)
            worst = std::max(worst, std::fabs(qtq[static_cast<size_t>(i * n + j)] - (i == j ? 1.0 : 0.0)));
    return worst;
}

// +-1 per column: the sign that turns column j of `ours` towards column j of `theirs`.
std::vector<double> column_signs(const Matrix& ours, const Matrix& theirs, int64_t n) {
    std::vector<double> signs(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) {
        double dot = 0.0;
        for (int64_t i = 0; i < n; ++i) {
            const size_t e = static_cast<size_t>(i * n + j);
            dot += ours[e] * theirs[e];
        }
        signs[static_cast<size_t>(j)] = dot < 0.0 ? -1.0 : 1.0;
    }
    return signs;
}

// max_i |sign_j ours[i, j] - theirs[i, j]| for column j.
double column_difference(const Matrix& ours, const Matrix& theirs, int64_t n, int64_t j, double sign) {
    double worst = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        const size_t e = static_cast<size_t>(i * n + j);
        worst = std::max(worst, std::fabs(sign * ours[e] - theirs[e]));
    }
    return worst;
}

// B B^T + n I (symmetric positive definite), host f32; with `garbage_above`, every entry above the diagonal is
// 1e6 instead, which a solver reading only the lower triangle never sees.
Tensor random_spd(int64_t n, uint64_t seed, bool garbage_above) {
    const Tensor b = randn_host({n, n}, seed);
    Tensor a = Tensor::zeros({n, n}, DType::f32, Device::cpu);
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j) {
            double sum = i == j ? static_cast<double>(n) : 0.0;
            for (int64_t k = 0; k < n; ++k) sum += double(b.f32()[i * n + k]) * double(b.f32()[j * n + k]);
            a.f32()[i * n + j] = j > i && garbage_above ? 1e6f : static_cast<float>(sum);
        }
    return a;
}

// The symmetric matrix that a's lower triangle describes, in double.
Matrix symmetric_from_lower(const Tensor& a) {
    const int64_t n = a.dim(0);
    Matrix m(static_cast<size_t>(n * n));
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j)
            m[static_cast<size_t>(i * n + j)] = a.f32()[i >= j ? i * n + j : j * n + i];
    return m;
}

// A stored [rows, cols] matrix read as op(x) [r, c] (transposed when `trans`).
double op_at(const Tensor& x, bool trans, int64_t r, int64_t c) {
    return trans ? x.f32()[c * x.dim(1) + r] : x.f32()[r * x.dim(1) + c];
}

}  // namespace

TEST_CASE("matmul: every transpose form, alpha and beta, within the f32 bound of a k-term sum (so never TF32)") {
    CudaOps& ops = cuda_ops();
    CpuOps cpu;
    const int64_t m = 37, n = 29, k = 211;
    for (int form = 0; form < 4; ++form) {
        const bool trans_a = form & 1, trans_b = form & 2;
        CAPTURE(trans_a);
        CAPTURE(trans_b);
        const Tensor a = randn_host(trans_a ? Shape{k, m} : Shape{m, k}, 10 + uint64_t(form));
        const Tensor b = randn_host(trans_b ? Shape{n, k} : Shape{k, n}, 20 + uint64_t(form));
        const Tensor c0 = randn_host({m, n}, 30 + uint64_t(form));
        for (const float beta : {0.5f, 0.0f}) {
            CAPTURE(beta);
            const float alpha = 1.5f;
            Tensor expected = c0.clone();
            cpu.matmul(expected, a, b, trans_a, trans_b, alpha, beta);
            // beta = 0 must not read c: start the device's c as NaN there.
            Tensor start = c0.clone();
            if (beta == 0.0f) start.fill(std::numeric_limits<float>::quiet_NaN());
            Tensor actual = to_cuda_f32(start, ops);
            ops.matmul(actual, to_cuda_f32(a, ops), to_cuda_f32(b, ops), trans_a, trans_b, alpha, beta);
            // Each side's f32 result is within gamma_{k+2} (|alpha| |op(a)| |op(b)| + |beta c|) of the exact one
            // (gamma_j = j u / (1 - j u): k products summed, the alpha scaling and the beta c add), in any summation
            // order; so the two differ by at most twice that. TF32 would be off by ~2^-11 relative per product.
            Tensor bound = Tensor::zeros({m, n}, DType::f32, Device::cpu);
            const double gamma = double(k + 2) * kU / (1.0 - double(k + 2) * kU);
            for (int64_t i = 0; i < m; ++i)
                for (int64_t j = 0; j < n; ++j) {
                    double abs_sum = 0.0;
                    for (int64_t p = 0; p < k; ++p)
                        abs_sum += std::fabs(op_at(a, trans_a, i, p)) * std::fabs(op_at(b, trans_b, p, j));
                    const double c_term = std::fabs(double(beta) * c0.f32()[i * n + j]);
                    bound.f32()[i * n + j] = static_cast<float>(2.0 * gamma * (alpha * abs_sum + c_term));
                }
            check_within(actual, expected, bound, 0.0, "matmul vs CPU");
        }
    }
}

TEST_CASE("matmul: shapes are checked, and c may not share storage with a or b") {
    CudaOps& ops = cuda_ops();
    Tensor a = to_cuda_f32(randn_host({4, 4}, 1), ops), b = to_cuda_f32(randn_host({4, 3}, 2), ops);
    Tensor c = ops.f32_output({4, 3});
    CHECK_THROWS_AS(ops.matmul(a, a, a, false, false, 1.0f, 0.0f), std::invalid_argument);
    CHECK_THROWS_AS(ops.matmul(c, a, b, true, true, 1.0f, 0.0f), std::invalid_argument);  // op(b) is [3, 4]
    CHECK_THROWS_AS(ops.matmul(c, a, randn_host({4, 3}, 3), false, false, 1.0f, 0.0f), std::invalid_argument);
}

TEST_CASE("symmetric_eigenvectors_descending: orthonormal, diagonalizing, the CPU's eigenvalues, lower triangle") {
    CudaOps& ops = cuda_ops();
    CpuOps cpu;
    for (const int64_t n : {1, 2, 7, 33, 100}) {
        CAPTURE(n);
        const Tensor a = random_spd(n, 100 + uint64_t(n), /*garbage_above=*/true);
        Tensor v_cpu = Tensor::zeros({n, n}, DType::f32, Device::cpu);
        cpu.symmetric_eigenvectors_descending(v_cpu, a);
        Tensor v_gpu = ops.f32_zeros({n, n});
        ops.symmetric_eigenvectors_descending(v_gpu, to_cuda_f32(a, ops));

        const Matrix sym = symmetric_from_lower(a), q = host_matrix(v_gpu), q_cpu = host_matrix(v_cpu);
        const Matrix d = transpose_times(q, sym, q, n), d_cpu = transpose_times(q_cpu, sym, q_cpu, n);
        const double lambda_max = max_abs(d_cpu), tol = factorization_tol(n);
        CHECK(orthonormality_error(q, n) <= tol);
        for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < n; ++j) {
                const double x = d[static_cast<size_t>(i * n + j)];
                if (i != j) {
                    CHECK(std::fabs(x) <= tol * lambda_max);
                    continue;
                }
                // The same eigenvalue in the same (descending) place as the CPU's.
                CHECK(std::fabs(x - d_cpu[static_cast<size_t>(i * n + i)]) <= tol * lambda_max);
            }
        // Each column is the CPU's up to sign, within what the eigenvalue gap allows: a backward error E moves an
        // eigenvector by about |E| / gap (Davis-Kahan).
        const std::vector<double> signs = column_signs(q, q_cpu, n);
        for (int64_t j = 0; j < n; ++j) {
            double gap = std::numeric_limits<double>::infinity();
            for (int64_t l = 0; l < n; ++l)
                if (l != j)
                    gap = std::min(gap, std::fabs(d_cpu[static_cast<size_t>(j * n + j)] -
                                                  d_cpu[static_cast<size_t>(l * n + l)]));
            CAPTURE(j);
            CAPTURE(gap);
            CHECK(column_difference(q, q_cpu, n, j, signs[static_cast<size_t>(j)]) <= tol + tol * lambda_max / gap);
        }
    }
}

TEST_CASE("symmetric_eigenvectors_descending: a diagonal indefinite matrix, and the zero matrix") {
    CudaOps& ops = cuda_ops();
    // diag(1, 5, -2): eigenvalues in order 5, 1, -2, eigenvectors +-e1, +-e0, +-e2.
    Tensor a = Tensor::zeros({3, 3}, DType::f32, Device::cpu);
    a.f32()[0] = 1.0f;
    a.f32()[4] = 5.0f;
    a.f32()[8] = -2.0f;
    Tensor v = ops.f32_zeros({3, 3});
    ops.symmetric_eigenvectors_descending(v, to_cuda_f32(a, ops));
    const Matrix q = host_matrix(v);
    CHECK(std::fabs(q[1 * 3 + 0]) == doctest::Approx(1.0));
    CHECK(std::fabs(q[0 * 3 + 1]) == doctest::Approx(1.0));
    CHECK(std::fabs(q[2 * 3 + 2]) == doctest::Approx(1.0));

    // All eigenvalues equal (zero): any orthonormal basis, but an orthonormal basis.
    Tensor w = ops.f32_zeros({4, 4});
    ops.symmetric_eigenvectors_descending(w, ops.f32_zeros({4, 4}));
    CHECK(orthonormality_error(host_matrix(w), 4) <= factorization_tol(4));
}

TEST_CASE("qr_orthonormal: orthonormal, Q^T A upper triangular, Q R = A, the CPU's Q up to column signs") {
    CudaOps& ops = cuda_ops();
    CpuOps cpu;
    for (const int64_t n : {1, 3, 6, 40, 100}) {
        CAPTURE(n);
        // A Gaussian matrix plus 3 sqrt(n) I: its singular values lie within about [sqrt(n), 5 sqrt(n)], so Q is
        // well conditioned (cond(A) <= ~5) and the two backends' Q must agree closely, not just both be valid.
        Tensor a = randn_host({n, n}, 200 + uint64_t(n));
        for (int64_t k = 0; k < n; ++k) a.f32()[k * n + k] += 3.0f * std::sqrt(static_cast<float>(n));
        Tensor q_cpu = Tensor::zeros({n, n}, DType::f32, Device::cpu);
        cpu.qr_orthonormal(q_cpu, a);
        Tensor q_gpu = ops.f32_zeros({n, n});
        ops.qr_orthonormal(q_gpu, to_cuda_f32(a, ops));

        const Matrix am(a.f32(), a.f32() + a.numel()), q = host_matrix(q_gpu);
        const double tol = factorization_tol(n), norm = frobenius(am);
        CHECK(orthonormality_error(q, n) <= tol);
        const Matrix r = transpose_times(q, identity(n), am, n);  // R = Q^T A
        for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < i; ++j) CHECK(std::fabs(r[static_cast<size_t>(i * n + j)]) <= tol * norm);
        for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < n; ++j) {
                double qr = 0.0;
                for (int64_t k = 0; k < n; ++k)
                    qr += q[static_cast<size_t>(i * n + k)] * r[static_cast<size_t>(k * n + j)];
                CHECK(std::fabs(qr - am[static_cast<size_t>(i * n + j)]) <= tol * norm);
            }
        // Against LAPACK's Q: cond(A) <= ~5, so each column moves by ~cond * n u (2.4e-5 at n = 100) at most.
        const Matrix q_ref = host_matrix(q_cpu);
        const std::vector<double> signs = column_signs(q, q_ref, n);
        for (int64_t j = 0; j < n; ++j) {
            CAPTURE(j);
            CHECK(column_difference(q, q_ref, n, j, signs[static_cast<size_t>(j)]) <= 1e-4);
        }
    }
}

TEST_CASE("the small kernels give the CPU's bits: column_dots, index_select, add_to_diagonal") {
    CudaOps& ops = cuda_ops();
    CpuOps cpu;
    const Tensor a = randn_host({37, 23}, 1), b = randn_host({37, 23}, 2);

    Tensor dots_cpu = Tensor::zeros({23}, DType::f32, Device::cpu), dots_gpu = ops.f32_zeros({23});
    cpu.column_dots(dots_cpu, a, b);
    ops.column_dots(dots_gpu, to_cuda_f32(a, ops), to_cuda_f32(b, ops));
    check_bitwise_equal(dots_gpu, dots_cpu, "column_dots");

    const std::vector<int64_t> rows = {36, 0, 5, 5, 3};  // repeats allowed
    Tensor sel_cpu = Tensor::zeros({5, 23}, DType::f32, Device::cpu), sel_gpu = ops.f32_zeros({5, 23});
    cpu.index_select(sel_cpu, a, 0, rows);
    ops.index_select(sel_gpu, to_cuda_f32(a, ops), 0, rows);
    check_bitwise_equal(sel_gpu, sel_cpu, "index_select dim 0");
    CHECK(to_host_f32(sel_gpu, ops).f32()[0] == a.f32()[36 * 23]);

    std::vector<int64_t> columns(23);
    for (int64_t j = 0; j < 23; ++j) columns[static_cast<size_t>(j)] = (7 * j + 3) % 23;  // a permutation
    Tensor perm_cpu = Tensor::zeros({37, 23}, DType::f32, Device::cpu), perm_gpu = ops.f32_zeros({37, 23});
    cpu.index_select(perm_cpu, a, 1, columns);
    ops.index_select(perm_gpu, to_cuda_f32(a, ops), 1, columns);
    check_bitwise_equal(perm_gpu, perm_cpu, "index_select dim 1");

    Tensor bad = ops.f32_zeros({1, 23});
    CHECK_THROWS_AS(ops.index_select(bad, to_cuda_f32(a, ops), 0, {37}), std::invalid_argument);  // out of range
    CHECK_THROWS_AS(ops.index_select(bad, to_cuda_f32(a, ops), 2, {0}), std::invalid_argument);   // no dim 2

    for (const float s : {1e-30f, 0.5f}) {
        Tensor d_cpu = randn_host({9, 9}, 3);
        Tensor d_gpu = to_cuda_f32(d_cpu, ops);
        cpu.add_to_diagonal(d_cpu, s);
        ops.add_to_diagonal(d_gpu, s);
        check_bitwise_equal(d_gpu, d_cpu, "add_to_diagonal");
    }
}

TEST_CASE("the small kernels give the CPU's bits: lerp_inplace, add_scaled_inplace, adam_direction") {
    CudaOps& ops = cuda_ops();
    CpuOps cpu;
    const Shape shape = {1000};
    const Tensor b = randn_host(shape, 5);
    for (const float w : {0.05f, 0.3f, 0.5f, 0.95f, -0.7f}) {  // both of torch.lerp's forms
        CAPTURE(w);
        Tensor a_cpu = randn_host(shape, 4);
        Tensor a_gpu = to_cuda_f32(a_cpu, ops);
        cpu.lerp_inplace(a_cpu, b, w);
        ops.lerp_inplace(a_gpu, to_cuda_f32(b, ops), w);
        check_bitwise_equal(a_gpu, a_cpu, "lerp_inplace");
    }

    Tensor p_cpu = randn_host(shape, 6);
    Tensor p_gpu = to_cuda_f32(p_cpu, ops);
    cpu.add_scaled_inplace(p_cpu, b, -0.0123f);
    ops.add_scaled_inplace(p_gpu, to_cuda_f32(b, ops), -0.0123f);
    check_bitwise_equal(p_gpu, p_cpu, "add_scaled_inplace");
    cpu.add_scaled_inplace(p_cpu, p_cpu, -1e-4f);  // a decoupled decay: b is a
    ops.add_scaled_inplace(p_gpu, p_gpu, -1e-4f);
    check_bitwise_equal(p_gpu, p_cpu, "add_scaled_inplace with b = a");

    struct Hyper {
        float beta1, beta2, eps, grad_scale;
    };
    for (const Hyper h : {Hyper{0.95f, 0.95f, 1e-8f, 1.0f}, Hyper{0.9f, 0.999f, 1e-7f, 1e-6f}}) {
        CAPTURE(h.grad_scale);
        Tensor m_cpu = randn_host(shape, 7, h.grad_scale), v_cpu = uniform_host(shape, 8, 0.0f, 2.0f);
        const Tensor g = randn_host(shape, 9, h.grad_scale);
        for (int64_t i = 0; i < v_cpu.numel(); ++i) v_cpu.f32()[i] *= h.grad_scale * h.grad_scale;
        Tensor m_gpu = to_cuda_f32(m_cpu, ops), v_gpu = to_cuda_f32(v_cpu, ops);
        Tensor dir_cpu = Tensor::zeros(shape, DType::f32, Device::cpu), dir_gpu = ops.f32_zeros(shape);
        cpu.adam_direction(dir_cpu, m_cpu, v_cpu, g, h.beta1, h.beta2, h.eps);
        ops.adam_direction(dir_gpu, m_gpu, v_gpu, to_cuda_f32(g, ops), h.beta1, h.beta2, h.eps);
        check_bitwise_equal(m_gpu, m_cpu, "adam_direction: m");
        check_bitwise_equal(v_gpu, v_cpu, "adam_direction: v");
        check_bitwise_equal(dir_gpu, dir_cpu, "adam_direction: direction");
    }
}

namespace {

// SOAP's inputs: a layout with both sides preconditioned ([16, 16]), rank-deficient first preconditioners
// ([11, 4]: GG0 has rank 4; [5, 7]: GG1 has rank 5), a vector, and 12 gradient sets, all from one Rng in a
// fixed order. With this seed the Rayleigh quotients that the refreshes (s = 4, 8) sort are at least ~1e-3
// (relative to the largest) apart, 1000 times what the backends' rounding differences can move them, so both
// backends sort them the same way.
struct SoapInputs {
    ParamLayout layout;
    TensorSet init;
    std::vector<TensorSet> grads;
};

SoapInputs soap_inputs(int calls) {
    SoapInputs in;
    in.layout.add({"w", {16, 16}, ParamKind::hidden_matrix});
    in.layout.add({"emb", {11, 4}, ParamKind::embedding});
    in.layout.add({"norm", {9}, ParamKind::norm_gain});
    in.layout.add({"head", {5, 7}, ParamKind::output_head});
    Rng rng(7);
    auto draw = [&](const Shape& shape) {
        Tensor t = Tensor::zeros(shape, DType::f32, Device::cpu);
        for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = rng.normal();
        return t;
    };
    for (const ParamInfo& p : in.layout.params()) in.init.tensors.push_back(draw(p.shape));
    for (int call = 0; call < calls; ++call) {
        TensorSet g;
        for (const ParamInfo& p : in.layout.params()) g.tensors.push_back(draw(p.shape));
        in.grads.push_back(std::move(g));
    }
    return in;
}

TensorSet copy_to(const TensorSet& set, Device device) {
    TensorSet out;
    for (const Tensor& t : set.tensors) {
        Tensor c = Tensor::zeros(t.shape(), t.dtype(), device);
        c.copy_from(t);
        out.tensors.push_back(std::move(c));
    }
    return out;
}

// max |x| over a tensor on either device.
double max_abs_of(const Tensor& t) {
    const Tensor h = to_host_f32(t, cuda_ops());
    double worst = 0.0;
    for (int64_t i = 0; i < h.numel(); ++i) worst = std::max(worst, std::fabs(double(h.f32()[i])));
    return worst;
}

// One SOAP run of `in.grads.size()` calls. After the first call, `after_first` may adjust the state (the CUDA
// runs take the CPU's initial bases there).
struct SoapRun {
    std::unique_ptr<Soap> soap;
    TensorSet weights;
};

template <class AfterFirst>
SoapRun run_soap(Ops& ops, const SoapInputs& in, const SoapConfig& cfg, float lr, AfterFirst after_first) {
    SoapRun run{std::make_unique<Soap>(in.layout, cfg, ops.device()), copy_to(in.init, ops.device())};
    for (size_t call = 0; call < in.grads.size(); ++call) {
        const TensorSet grads = copy_to(in.grads[call], ops.device());
        run.soap->step(ops, in.layout, run.weights, grads, lr);
        if (call == 0) after_first(*run.soap);
    }
    ops.synchronize();
    return run;
}

}  // namespace

TEST_CASE("SOAP: 12 calls on the CUDA backend follow the CPU's, and repeat to the bit") {
    CudaOps& ops = cuda_ops();
    CpuOps cpu;
    const SoapInputs in = soap_inputs(12);
    SoapConfig cfg;
    cfg.precondition_frequency = 4;  // QR refreshes at s = 4 and 8
    const float lr = 0.01f;

    SoapRun ref = run_soap(cpu, in, cfg, lr, [](Soap&) {});
    auto ref_state = ref.soap->state_tensors();
    // The CPU's state after its first call (the same first call: the CPU run is deterministic).
    const SoapInputs first_only{in.layout, in.init, {in.grads[0]}};
    SoapRun ref_first = run_soap(cpu, first_only, cfg, lr, [](Soap&) {});
    auto first_state = ref_first.soap->state_tensors();

    // After the first call, each CUDA basis must be an orthonormal eigenbasis of its own GG (descending, with the
    // CPU's eigenvalues); GG itself is the CPU's to f32 product rounding. Then the CUDA run takes the CPU's bases:
    // where GG is rank deficient (GG0 of [11, 4], GG1 of [5, 7]) any orthonormal basis of its null space is a
    // valid eigenbasis and different ones steer Adam differently, so only a common start makes the runs
    // comparable. From there the refreshes are QRs of full-rank matrices: unique up to signs, which SOAP's update
    // does not see.
    auto take_cpu_bases = [&](Soap& soap) {
        auto state = soap.state_tensors();
        REQUIRE(state.size() == first_state.size());
        for (size_t k = 0; k < state.size(); ++k) {
            const std::string& name = state[k].first;
            CAPTURE(name);
            REQUIRE(name == first_state[k].first);
            CHECK(state[k].second->device() == Device::cuda);
            if (name.rfind("Q", 0) != 0) continue;
            const std::string gg_name = "GG" + name.substr(1);
            const Tensor* gg_cpu = nullptr;
            const Tensor* gg_gpu = nullptr;
            for (size_t l = 0; l < state.size(); ++l)
                if (state[l].first == gg_name) {
                    gg_gpu = state[l].second;
                    gg_cpu = first_state[l].second;
                }
            REQUIRE(gg_cpu != nullptr);
            const int64_t n = gg_cpu->dim(0);
            // GG = (1 - beta) G G^T: sums of at most 16 products; 1e-5 of its largest entry (a diagonal one,
            // which bounds every |sum of products| by Cauchy-Schwarz) is ~10x the bound 2 gamma_18.
            const double gg_scale = max_abs_of(*gg_cpu);
            check_close(*gg_gpu, *gg_cpu, 1e-5 * gg_scale, 0.0, "GG after the first call");
            const Matrix q = host_matrix(*state[k].second), g_cpu = host_matrix(*gg_cpu);
            const Matrix q_cpu = host_matrix(*first_state[k].second);
            const Matrix d = transpose_times(q, g_cpu, q, n), d_cpu = transpose_times(q_cpu, g_cpu, q_cpu, n);
            const double tol = factorization_tol(n) * std::max(gg_scale, 1e-30);
            CHECK(orthonormality_error(q, n) <= factorization_tol(n));
            for (int64_t i = 0; i < n; ++i)
                for (int64_t j = 0; j < n; ++j) {
                    const size_t e = static_cast<size_t>(i * n + j);
                    CHECK(std::fabs(d[e] - (i == j ? d_cpu[e] : 0.0)) <= 4 * tol);
                }
            state[k].second->copy_from(*first_state[k].second);
        }
    };
    SoapRun gpu = run_soap(ops, in, cfg, lr, take_cpu_bases);

    // Sign-free results. The tolerances are ~20x what this run shows when the CPU run's gradients alone are
    // perturbed by 1e-6 relative (about the GPU products' own rounding differences): the weights' difference
    // was then ~3e-6 of their movement.
    for (int i = 0; i < in.layout.size(); ++i) {
        const std::string name = in.layout[i].name;
        CAPTURE(name);
        double movement = 0.0;
        const Tensor w_ref = ref.weights[i];
        for (int64_t e = 0; e < w_ref.numel(); ++e)
            movement = std::max(movement, std::fabs(double(w_ref.f32()[e]) - in.init[i].f32()[e]));
        check_close(gpu.weights[i], w_ref, 1e-4 * movement, 0.0, ("weights of " + name).c_str());
        const Tensor m_ref = ref.soap->exp_avg_original_space(cpu, i);
        check_close(gpu.soap->exp_avg_original_space(ops, i), m_ref, 1e-4 * max_abs_of(m_ref), 0.0,
                    ("exp_avg in the original space of " + name).c_str());
    }
    auto gpu_state = gpu.soap->state_tensors();
    for (size_t k = 0; k < ref_state.size(); ++k) {
        const std::string& name = ref_state[k].first;
        if (name.rfind("exp_avg_sq.", 0) != 0 && name.rfind("GG", 0) != 0) continue;  // the others carry signs
        check_close(*gpu_state[k].second, *ref_state[k].second, 1e-4 * max_abs_of(*ref_state[k].second), 0.0,
                    name.c_str());
    }

    // The same inputs again on the GPU: the same bits (fixed kernels, cuBLAS without atomics, cuSOLVER
    // deterministic).
    SoapRun again = run_soap(ops, in, cfg, lr, [&](Soap& soap) {
        auto state = soap.state_tensors();
        for (size_t k = 0; k < state.size(); ++k)
            if (state[k].first.rfind("Q", 0) == 0) state[k].second->copy_from(*first_state[k].second);
    });
    for (int i = 0; i < in.layout.size(); ++i) check_bitwise_equal(again.weights[i], gpu.weights[i], "weights rerun");
    auto again_state = again.soap->state_tensors();
    for (size_t k = 0; k < gpu_state.size(); ++k)
        check_bitwise_equal(*again_state[k].second, *gpu_state[k].second, gpu_state[k].first.c_str());
}

TEST_CASE("SOAP: the state lives on the CUDA device, and ops of another backend are refused") {
    cuda_ops();  // the device allocator the state comes from
    const SoapInputs in = soap_inputs(1);
    Soap soap(in.layout, SoapConfig{}, Device::cuda);
    for (auto& [name, t] : soap.state_tensors()) {
        CAPTURE(name);
        CHECK(t->device() == Device::cuda);
    }
    CpuOps cpu;
    TensorSet weights = copy_to(in.init, Device::cpu);
    CHECK_THROWS_AS(soap.step(cpu, in.layout, weights, in.grads[0], 0.01f), std::logic_error);
}
