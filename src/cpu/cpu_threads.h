// The CPU backend's threads: how many there are, and the one way work is spread over them.
//
// Why our own threads and not OpenBLAS's: OpenBLAS's threaded sgemm does not promise the same bits at every thread
// count (its Haswell kernels, picked on some AVX-512 CPUs by OPENBLAS_CORETYPE=Haswell, sum differently at 1 and
// 2 threads). So OpenBLAS always runs on one thread here, and the parallelism is ours: an op splits its work into
// tasks whose shapes depend only on the problem (src/cpu/tiled_gemm.h for the products), each task is computed
// alone, and the tasks are spread over these threads. Which thread runs a task never changes what it computes, and
// no sum is split between tasks, so the bits are the same for any thread count.
//
// The count is OpenBLAS's own default, read once before OpenBLAS is set to one thread: OPENBLAS_NUM_THREADS (or
// GOTO_NUM_THREADS / OMP_NUM_THREADS) if set, else the cores OpenBLAS sees. Under mpirun each rank sets 1 unless
// OPENBLAS_NUM_THREADS is set (src/run/mpi_driver.cpp): there the ranks are the parallelism.
#pragma once

#include <cstdint>
#include <functional>

namespace nb::cpu {

// The number of threads CPU ops spread their tasks over (>= 1). The first call of this or of any function here
// sets OpenBLAS to one thread.
int thread_count();

// Sets it (n >= 1; std::invalid_argument otherwise). Changes no result, only the speed.
void set_thread_count(int n);

// Calls task(i) for every i in [0, count) exactly once, spread over thread_count() threads (the caller is one of
// them), and returns when all are done. The first exception a task throws is rethrown here once every task has
// finished or been skipped. Called from inside a task (or while another caller's tasks run), it runs its tasks on
// the calling thread in order: nesting is allowed and never changes a result.
void parallel_for(int64_t count, const std::function<void(int64_t)>& task);

// Sets OpenBLAS to one thread if nothing here has yet: call before any direct BLAS or LAPACK call.
void use_single_threaded_blas();

}  // namespace nb::cpu
