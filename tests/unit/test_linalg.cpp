// Host linear algebra (src/cpu/blas_lapack.h) against its definitions: a product against the triple loop, an
// eigendecomposition by A v = lambda v and orthonormality, a QR factor by orthonormality and Q^T A triangular.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "src/cpu/blas_lapack.h"
#include "src/core/rng.h"

namespace {

using Matrix = std::vector<float>;  // row-major, square unless said otherwise

Matrix random_matrix(int64_t rows, int64_t cols, uint64_t seed) {
    nb::Rng rng(seed);
    Matrix m(static_cast<size_t>(rows * cols));
    for (float& x : m) x = rng.normal();
    return m;
}

// B B^T + n I: symmetric positive definite, eigenvalues at least n apart from zero.
Matrix random_spd(int64_t n, uint64_t seed) {
    const Matrix b = random_matrix(n, n, seed);
    Matrix a(static_cast<size_t>(n * n));
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j) {
            double sum = i == j ? static_cast<double>(n) : 0.0;
            for (int64_t k = 0; k < n; ++k) sum += double(b[size_t(i * n + k)]) * double(b[size_t(j * n + k)]);
            a[size_t(i * n + j)] = static_cast<float>(sum);
        }
    return a;
}

float at(const Matrix& m, int64_t n, int64_t i, int64_t j) { return m[size_t(i * n + j)]; }

// Columns of q orthonormal: |Q^T Q - I| elementwise within tol.
void check_orthonormal_columns(const Matrix& q, int64_t n, double tol) {
    for (int64_t a = 0; a < n; ++a)
        for (int64_t b = 0; b < n; ++b) {
            double dot = 0.0;
            for (int64_t i = 0; i < n; ++i) dot += double(at(q, n, i, a)) * double(at(q, n, i, b));
            CAPTURE(a);
            CAPTURE(b);
            CHECK(std::fabs(dot - (a == b ? 1.0 : 0.0)) < tol);
        }
}

// Each column v_j: A v_j = lambda_j v_j with lambda_j = v_j^T A v_j; returns the lambdas in column order.
std::vector<double> check_eigenpairs(const Matrix& a, const Matrix& v, int64_t n, double tol) {
    std::vector<double> lambdas;
    for (int64_t j = 0; j < n; ++j) {
        std::vector<double> av(static_cast<size_t>(n), 0.0);
        double lambda = 0.0;
        for (int64_t i = 0; i < n; ++i) {
            for (int64_t k = 0; k < n; ++k) av[size_t(i)] += double(at(a, n, i, k)) * double(at(v, n, k, j));
            lambda += double(at(v, n, i, j)) * av[size_t(i)];
        }
        for (int64_t i = 0; i < n; ++i) {
            CAPTURE(j);
            CHECK(std::fabs(av[size_t(i)] - lambda * double(at(v, n, i, j))) < tol * (1.0 + std::fabs(lambda)));
        }
        lambdas.push_back(lambda);
    }
    return lambdas;
}

}  // namespace

TEST_CASE("gemm: every transpose combination matches the triple loop, alpha and beta included") {
    const int64_t m = 3, n = 4, k = 5;
    const Matrix a = random_matrix(m, k, 1), b = random_matrix(k, n, 2), c0 = random_matrix(m, n, 3);
    // The same matrices stored transposed, for the trans_* forms.
    Matrix at_(size_t(k * m)), bt(size_t(n * k));
    for (int64_t i = 0; i < m; ++i)
        for (int64_t p = 0; p < k; ++p) at_[size_t(p * m + i)] = a[size_t(i * k + p)];
    for (int64_t p = 0; p < k; ++p)
        for (int64_t j = 0; j < n; ++j) bt[size_t(j * k + p)] = b[size_t(p * n + j)];
    const float alpha = 1.5f, beta = 0.5f;
    for (int form = 0; form < 4; ++form) {
        const bool trans_a = form & 1, trans_b = form & 2;
        CAPTURE(trans_a);
        CAPTURE(trans_b);
        Matrix c = c0;
        nb::linalg::gemm(trans_a, trans_b, m, n, k, alpha, trans_a ? at_.data() : a.data(),
                         trans_b ? bt.data() : b.data(), beta, c.data());
        for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
                double sum = 0.0;
                for (int64_t p = 0; p < k; ++p) sum += double(a[size_t(i * k + p)]) * double(b[size_t(p * n + j)]);
                const double expected = alpha * sum + beta * double(c0[size_t(i * n + j)]);
                CHECK(c[size_t(i * n + j)] == doctest::Approx(expected).epsilon(1e-5));
            }
    }
}

TEST_CASE("eigenvectors of a random SPD matrix: orthonormal, A v = lambda v, eigenvalues descending") {
    for (int64_t n : {1, 2, 7, 33}) {
        CAPTURE(n);
        const Matrix a = random_spd(n, 100 + uint64_t(n));
        Matrix v(size_t(n * n));
        nb::linalg::symmetric_eigenvectors_descending(n, a.data(), v.data());
        check_orthonormal_columns(v, n, 1e-5);
        const std::vector<double> lambdas = check_eigenpairs(a, v, n, 1e-4);
        for (size_t j = 1; j < lambdas.size(); ++j) CHECK(lambdas[j - 1] >= lambdas[j]);
        CHECK(lambdas.back() > 0.0);
    }
}

TEST_CASE("eigenvectors of a diagonal indefinite matrix come out in descending order of eigenvalue") {
    // diag(1, 5, -2): eigenvalues in order 5, 1, -2, eigenvectors +-e1, +-e0, +-e2.
    const Matrix a = {1, 0, 0, 0, 5, 0, 0, 0, -2};
    Matrix v(9);
    nb::linalg::symmetric_eigenvectors_descending(3, a.data(), v.data());
    CHECK(std::fabs(at(v, 3, 1, 0)) == doctest::Approx(1.0));
    CHECK(std::fabs(at(v, 3, 0, 1)) == doctest::Approx(1.0));
    CHECK(std::fabs(at(v, 3, 2, 2)) == doctest::Approx(1.0));
}

TEST_CASE("eigenvectors read only the lower triangle, as torch.linalg.eigh does") {
    const int64_t n = 5;
    const Matrix a = random_spd(n, 7);
    Matrix garbage_above = a;
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = i + 1; j < n; ++j) garbage_above[size_t(i * n + j)] = 1e6f;
    Matrix v(size_t(n * n)), w(size_t(n * n));
    nb::linalg::symmetric_eigenvectors_descending(n, a.data(), v.data());
    nb::linalg::symmetric_eigenvectors_descending(n, garbage_above.data(), w.data());
    CHECK(v == w);
}

TEST_CASE("eigenvectors of the zero matrix are still an orthonormal basis") {
    const int64_t n = 4;
    const Matrix a(size_t(n * n), 0.0f);
    Matrix v(size_t(n * n));
    nb::linalg::symmetric_eigenvectors_descending(n, a.data(), v.data());
    check_orthonormal_columns(v, n, 1e-6);
}

TEST_CASE("QR: Q is orthonormal, Q^T A is upper triangular, and Q (Q^T A) = A") {
    for (int64_t n : {1, 3, 6, 40}) {
        CAPTURE(n);
        const Matrix a = random_matrix(n, n, 200 + uint64_t(n));
        Matrix q(size_t(n * n));
        nb::linalg::qr_orthonormal(n, a.data(), q.data());
        check_orthonormal_columns(q, n, 1e-5);
        // R = Q^T A, in double.
        std::vector<double> r(size_t(n * n), 0.0);
        for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < n; ++j)
                for (int64_t k = 0; k < n; ++k) r[size_t(i * n + j)] += double(at(q, n, k, i)) * double(at(a, n, k, j));
        for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < i; ++j) {
                CAPTURE(i);
                CAPTURE(j);
                CHECK(std::fabs(r[size_t(i * n + j)]) < 1e-4);
            }
        for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < n; ++j) {
                double qr = 0.0;
                for (int64_t k = 0; k < n; ++k) qr += double(at(q, n, i, k)) * r[size_t(k * n + j)];
                CHECK(std::fabs(qr - double(at(a, n, i, j))) < 1e-4);
            }
    }
}
