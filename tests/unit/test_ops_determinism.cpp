// Bitwise determinism of the CPU backend across thread counts (src/cpu/cpu_threads.h, src/cpu/tiled_gemm.h).
//
// Every product is cut into tiles whose shape depends on the problem alone, each tile one single-threaded
// OpenBLAS call, and attention's tasks are whole heads; so 1, 2 and 3 threads must give the same bits, whatever
// kernel OpenBLAS picks on this CPU. The shapes below are cut into many tiles, and their sides are multiples of
// no tile size (odd sizes, tall and skinny, short and wide, a long reduction).
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "src/cpu/cpu_ops.h"
#include "src/cpu/cpu_threads.h"
#include "src/cpu/tiled_gemm.h"
#include "tests/unit/fd_check.h"

using namespace nb;
using namespace nb::test;

namespace {

// Runs fn with the CPU ops on `threads` threads, then restores the previous count.
template <typename Fn>
auto with_threads(int threads, Fn&& fn) {
    const int before = cpu::thread_count();
    cpu::set_thread_count(threads);
    struct Restore {
        int n;
        ~Restore() { cpu::set_thread_count(n); }
    } restore{before};
    return fn();
}

// fn() -> std::vector<Tensor>: its results at 1, 2 and 3 threads are bitwise equal, tensor by tensor.
template <typename Fn>
void check_same_bits_at_1_2_3_threads(Fn&& fn) {
    const std::vector<Tensor> one = with_threads(1, fn);
    for (int threads : {2, 3}) {
        const std::vector<Tensor> other = with_threads(threads, fn);
        REQUIRE(other.size() == one.size());
        for (size_t i = 0; i < one.size(); ++i) {
            INFO("threads " << threads << ", result " << i);
            CHECK(bitwise_equal(one[i], other[i]));
        }
    }
}

std::vector<Tensor> linear(const Tensor& x, const Tensor& w, const Tensor& dy) {
    Tensor y = Tensor::zeros({x.dim(0), w.dim(0)}), dx = Tensor::zeros(x.shape()), dw = Tensor::zeros(w.shape());
    CpuOps ops;
    ops.linear_forward(y, x, w);
    ops.linear_backward(dx, dw, dy, x, w);
    return {y, dx, dw};
}

struct LinearShape {
    int64_t n, in, out;
};

}  // namespace

TEST_CASE("tile shapes depend on the problem alone, and big problems are cut into many tiles") {
    const cpu::GemmTiles big = cpu::gemm_tiles(517, 1029, 771);
    CHECK(big.count(517, 1029) >= 8);
    CHECK(big.rows % 16 == 0);
    CHECK(big.cols % 16 == 0);
    CHECK(cpu::gemm_tiles(8, 8, 8).count(8, 8) == 1);  // a small product is one call
    // A tall, skinny product is cut along its rows only.
    const cpu::GemmTiles tall = cpu::gemm_tiles(20000, 40, 300);
    CHECK(tall.cols == 40);
    CHECK(tall.count(20000, 40) > 1);
    // The shapes the tests below use are cut, so that 2 and 3 threads really split them.
    CHECK(cpu::gemm_tiles(11, 3001, 4003).count(11, 3001) > 1);
    CHECK(cpu::gemm_tiles(30011, 9, 500).count(30011, 9) > 1);
    CHECK(cpu::gemm_tiles(520, 520, 800).count(520, 520) > 1);  // Newton-Schulz's X X^T
    CHECK(cpu::gemm_tiles(301, 517, 1283).count(301, 517) > 1);
    CHECK(cpu::gemm_tiles(515, 257, 1200).count(515, 257) > 1);  // an expert's weight gradient
}

TEST_CASE("linear forward and backward are bitwise identical at 1, 2 and 3 threads") {
    std::mt19937 rng(81);
    for (const LinearShape s : {LinearShape{517, 771, 1029}, LinearShape{30011, 500, 9}, LinearShape{11, 4003, 3001},
                                LinearShape{4099, 130, 70}, LinearShape{512, 768, 1024}}) {
        INFO("n " << s.n << " in " << s.in << " out " << s.out);
        Tensor x = randn({s.n, s.in}, rng), w = randn({s.out, s.in}, rng, 0.05f), dy = randn({s.n, s.out}, rng);
        check_same_bits_at_1_2_3_threads([&] { return linear(x, w, dy); });
    }
}

TEST_CASE("matmul with every transpose is bitwise identical at 1, 2 and 3 threads") {
    std::mt19937 rng(83);
    const int64_t m = 301, n = 517, k = 1283;
    for (bool ta : {false, true})
        for (bool tb : {false, true}) {
            INFO("trans_a " << ta << " trans_b " << tb);
            Tensor a = ta ? randn({k, m}, rng) : randn({m, k}, rng), b = tb ? randn({n, k}, rng) : randn({k, n}, rng);
            Tensor c0 = randn({m, n}, rng);
            check_same_bits_at_1_2_3_threads([&] {
                Tensor c = c0.clone();
                CpuOps().matmul(c, a, b, ta, tb, 0.75f, 0.5f);
                return std::vector<Tensor>{c};
            });
        }
}

TEST_CASE("attention forward and backward are bitwise identical at 1, 2 and 3 threads") {
    std::mt19937 rng(82);
    struct Shape4 {
        int64_t B, T, H, KV, hd;
    };
    for (const Shape4 s : {Shape4{2, 200, 8, 4, 64}, Shape4{1, 131, 6, 2, 24}, Shape4{3, 65, 4, 4, 16}}) {
        INFO("B " << s.B << " T " << s.T << " H " << s.H << " KV " << s.KV << " hd " << s.hd);
        Tensor q = randn({s.B, s.T, s.H, s.hd}, rng), k = randn({s.B, s.T, s.KV, s.hd}, rng);
        Tensor v = randn({s.B, s.T, s.KV, s.hd}, rng), dout = randn({s.B, s.T, s.H, s.hd}, rng);
        check_same_bits_at_1_2_3_threads([&] {
            Tensor out = Tensor::zeros(q.shape()), lse = Tensor::zeros({s.B, s.H, s.T});
            Tensor dq = Tensor::zeros(q.shape()), dk = Tensor::zeros(k.shape()), dv = Tensor::zeros(v.shape());
            CpuOps ops;
            ops.attention_forward(out, lse, q, k, v);
            ops.attention_backward(dq, dk, dv, dout, q, k, v, out, lse);
            return std::vector<Tensor>{out, lse, dq, dk, dv};
        });
    }
}

TEST_CASE("MoE grouped linear forward and backward are bitwise identical at 1, 2 and 3 threads") {
    std::mt19937 rng(84);
    const int64_t in = 257, out = 515;
    const std::vector<int32_t> offsets{0, 700, 700, 713, 1901, 1902};  // uneven experts, one without rows
    const int64_t rows = offsets.back(), experts = static_cast<int64_t>(offsets.size()) - 1;
    Tensor off = Tensor::zeros({experts + 1}, DType::i32);
    std::copy(offsets.begin(), offsets.end(), off.i32());
    Tensor x = randn({rows, in}, rng), dy = randn({rows, out}, rng);
    std::vector<Tensor> w;
    for (int64_t e = 0; e < experts; ++e) w.push_back(randn({out, in}, rng, 0.05f));
    check_same_bits_at_1_2_3_threads([&] {
        std::vector<const Tensor*> wp;
        std::vector<Tensor> dw;
        for (const Tensor& we : w) wp.push_back(&we), dw.push_back(Tensor::zeros(we.shape()));
        std::vector<Tensor*> dwp;
        for (Tensor& d : dw) dwp.push_back(&d);
        Tensor y = Tensor::zeros({rows, out}), dx = Tensor::zeros(x.shape());
        CpuOps ops;
        ops.moe_grouped_linear_forward(y, x, wp, off);
        ops.moe_grouped_linear_backward(dx, dwp, dy, x, wp, off);
        std::vector<Tensor> all{y, dx};
        all.insert(all.end(), dw.begin(), dw.end());
        return all;
    });
}

TEST_CASE("Newton-Schulz and the symmetric eigenbasis are bitwise identical at 1, 2 and 3 threads") {
    std::mt19937 rng(85);
    const Tensor g = randn({520, 800}, rng);
    check_same_bits_at_1_2_3_threads([&] {
        CpuOps ops;
        Tensor ortho = Tensor::zeros(g.shape()), gram = Tensor::zeros({520, 520}), basis = Tensor::zeros({520, 520});
        ops.newton_schulz({&ortho}, {&g}, 5);
        ops.matmul(gram, g, g, false, true, 1.0f, 0.0f);  // G G^T: symmetric, as SOAP's factors are
        ops.symmetric_eigenvectors_descending(basis, gram);
        return std::vector<Tensor>{ortho, gram, basis};
    });
}

TEST_CASE("parallel_for runs every task once, on several threads at once") {
    with_threads(2, [] {
        // Two tasks that each wait (up to 10 s) until both have started: only two threads at once get past it.
        std::atomic<int> started{0};
        std::mutex m;
        std::set<std::thread::id> ids;
        cpu::parallel_for(2, [&](int64_t) {
            started.fetch_add(1);
            const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
            while (started.load() < 2 && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
            const std::lock_guard<std::mutex> lock(m);
            ids.insert(std::this_thread::get_id());
        });
        CHECK(ids.size() == 2);
        std::vector<int> hits(1000, 0);
        cpu::parallel_for(1000, [&](int64_t i) { ++hits[static_cast<size_t>(i)]; });
        CHECK(std::count(hits.begin(), hits.end(), 1) == 1000);
        return 0;
    });
}

TEST_CASE("parallel_for: nested calls run in order on the calling thread, and a task's exception reaches the caller") {
    with_threads(3, [] {
        std::vector<int> order;
        std::mutex m;
        cpu::parallel_for(3, [&](int64_t outer) {
            const std::thread::id me = std::this_thread::get_id();
            std::vector<int> mine;
            cpu::parallel_for(4, [&](int64_t inner) {
                CHECK(std::this_thread::get_id() == me);
                mine.push_back(static_cast<int>(inner));
            });
            CHECK(mine == std::vector<int>{0, 1, 2, 3});
            const std::lock_guard<std::mutex> lock(m);
            order.push_back(static_cast<int>(outer));
        });
        CHECK(order.size() == 3);
        CHECK_THROWS_WITH_AS(cpu::parallel_for(50, [](int64_t i) {
                                 if (i == 17) throw std::runtime_error("task 17 failed");
                             }),
                             "task 17 failed", std::runtime_error);
        CHECK_THROWS_AS(cpu::set_thread_count(0), std::invalid_argument);
        return 0;
    });
}
