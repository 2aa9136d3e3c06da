// The CPU backend's worker pool (src/cpu/cpu_threads.h).
//
// One job at a time: the caller publishes it, wakes the workers, and takes tasks itself; every thread claims the
// next task index from one atomic counter until none is left. Workers spin briefly before they sleep, because
// training issues many short parallel ops back to back and a futex wake-up costs about as much as a small one.
#include "src/cpu/cpu_threads.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace nb::cpu {

namespace {

// How long an idle worker polls for the next job before it sleeps on the condition variable.
constexpr auto kSpinBeforeSleep = std::chrono::microseconds(100);

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

struct Job {
    const std::function<void(int64_t)>* task = nullptr;
    int64_t count = 0;
    std::atomic<int64_t> next{0};      // the next task index to claim
    std::atomic<int64_t> finished{0};  // tasks run (or skipped after a failure)
    std::atomic<bool> failed{false};
    std::mutex error_mutex;
    std::exception_ptr error;
};

thread_local bool t_inside_task = false;

// Claims and runs tasks until none is left. After a failure the remaining tasks are skipped, not run.
void run_tasks(Job& job) {
    const bool was_inside = t_inside_task;
    t_inside_task = true;
    for (;;) {
        const int64_t i = job.next.fetch_add(1, std::memory_order_relaxed);
        if (i >= job.count) break;
        if (!job.failed.load(std::memory_order_relaxed)) {
            try {
                (*job.task)(i);
            } catch (...) {
                const std::lock_guard<std::mutex> lock(job.error_mutex);
                if (!job.error) job.error = std::current_exception();
                job.failed.store(true, std::memory_order_relaxed);
            }
        }
        job.finished.fetch_add(1, std::memory_order_release);
    }
    t_inside_task = was_inside;
}

class WorkerPool {
public:
    // Runs the job on the caller and the pool's workers (there are `threads - 1` of them).
    void run(Job& job, int threads) {
        if (static_cast<int>(workers_.size()) != threads - 1) resize(threads - 1);
        {
            const std::lock_guard<std::mutex> lock(mutex_);
            job_ = &job;
            ++generation_;
            published_.store(generation_, std::memory_order_release);
        }
        wake_.notify_all();
        run_tasks(job);
        for (int polls = 1; job.finished.load(std::memory_order_acquire) < job.count; ++polls) {
            if (polls % 1024 == 0) std::this_thread::yield();  // a worker may need this core to finish
            cpu_relax();
        }
        // Every task is done; a worker may still hold the job (it claimed an index past the end). Unpublish it and
        // wait for those, so that the job (on the caller's stack) outlives every reference to it.
        std::unique_lock<std::mutex> lock(mutex_);
        job_ = nullptr;
        detached_.wait(lock, [&] { return attached_ == 0; });
    }

    std::mutex& caller_mutex() { return caller_; }

private:
    void resize(int workers) {
        {
            const std::lock_guard<std::mutex> lock(mutex_);
            stop_ = true;
        }
        wake_.notify_all();
        for (std::thread& t : workers_) t.join();
        workers_.clear();
        stop_ = false;
        // A new worker starts at the generation before the next job, which it must not miss however late it runs.
        for (int w = 0; w < workers; ++w) workers_.emplace_back([this, seen = generation_] { work(seen); });
    }

    void work(uint64_t seen) {
        for (;;) {
            const auto spin_until = std::chrono::steady_clock::now() + kSpinBeforeSleep;
            for (int polls = 0; published_.load(std::memory_order_acquire) == seen; ++polls) {
                if (polls % 64 == 63 && std::chrono::steady_clock::now() > spin_until) break;
                cpu_relax();
            }
            Job* job = nullptr;
            {
                std::unique_lock<std::mutex> lock(mutex_);
                wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
                if (stop_) return;
                seen = generation_;
                job = job_;
                if (job == nullptr) continue;  // that job ended before this worker looked
                ++attached_;
            }
            run_tasks(*job);
            {
                const std::lock_guard<std::mutex> lock(mutex_);
                --attached_;
            }
            detached_.notify_all();
        }
    }

    std::mutex caller_;  // one job at a time; a second caller runs its tasks itself
    std::mutex mutex_;   // guards what follows
    std::condition_variable wake_, detached_;
    uint64_t generation_ = 0;
    std::atomic<uint64_t> published_{0};  // generation_, for the workers' lock-free polling
    Job* job_ = nullptr;
    int attached_ = 0;  // workers running tasks of job_
    bool stop_ = false;
    std::vector<std::thread> workers_;
};

// Never destroyed: workers blocked on the condition variable at exit are ended with the process, and no static
// destructor can run while a worker still uses the pool.
WorkerPool& pool() {
    static WorkerPool* p = new WorkerPool;
    return *p;
}

std::atomic<int>& configured_threads() {
    static std::atomic<int> n{[] {
        const int openblas_default = openblas_get_num_threads();
        openblas_set_num_threads(1);
        return std::max(1, openblas_default);
    }()};
    return n;
}

}  // namespace

void use_single_threaded_blas() { (void)configured_threads(); }

int thread_count() { return configured_threads().load(std::memory_order_relaxed); }

void set_thread_count(int n) {
    if (n < 1) throw std::invalid_argument("cpu::set_thread_count: need at least 1 thread, got " + std::to_string(n));
    configured_threads().store(n, std::memory_order_relaxed);
}

void parallel_for(int64_t count, const std::function<void(int64_t)>& task) {
    if (count <= 0) return;
    Job job;
    job.task = &task;
    job.count = count;
    const int threads = static_cast<int>(std::min<int64_t>(thread_count(), count));
    std::unique_lock<std::mutex> caller(pool().caller_mutex(), std::defer_lock);
    if (threads <= 1 || t_inside_task || !caller.try_lock())
        run_tasks(job);  // in order, on this thread
    else
        pool().run(job, thread_count());
    if (job.error) std::rethrow_exception(job.error);
}

}  // namespace nb::cpu
