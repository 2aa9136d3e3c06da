// CudaEvent: a CUDA event that orders one stream after another and tells the host when work has completed, for the
// NCCL transport and the NCCL replica sum (their streams never make the compute stream wait: the host polls).
// Compiled only where nobubble is built with MPI and CUDA.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "cuda/cuda_check.h"

namespace nb {

// A CUDA event that is destroyed with its owner. Timing is disabled: only order and completion are asked of it.
// Destroying an event that is still pending, or that a stream still waits for, is allowed (CUDA releases it
// when the device is done with it).
class CudaEvent {
public:
    CudaEvent() = default;
    static CudaEvent recorded_on(cudaStream_t stream) {
        CudaEvent e;
        CUDA_CHECK(cudaEventCreateWithFlags(&e.event_, cudaEventDisableTiming));
        CUDA_CHECK(cudaEventRecord(e.event_, stream));
        return e;
    }
    CudaEvent(CudaEvent&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
    CudaEvent& operator=(CudaEvent&& other) noexcept {
        if (this != &other) {
            reset();
            event_ = std::exchange(other.event_, nullptr);
        }
        return *this;
    }
    CudaEvent(const CudaEvent&) = delete;
    CudaEvent& operator=(const CudaEvent&) = delete;
    ~CudaEvent() { reset(); }

    // Makes `stream` wait (on the device) for the work this event was recorded after.
    void order_before(cudaStream_t stream) const { CUDA_CHECK(cudaStreamWaitEvent(stream, event_, 0)); }
    // True once that work has completed; RuntimeError for a device error.
    bool completed() const {
        const cudaError_t err = cudaEventQuery(event_);
        if (err == cudaErrorNotReady) return false;
        CUDA_CHECK(err);
        return true;
    }
    void wait() const { CUDA_CHECK(cudaEventSynchronize(event_)); }

private:
    void reset() noexcept {
        if (event_) cudaEventDestroy(event_);
        event_ = nullptr;
    }
    cudaEvent_t event_ = nullptr;
};

}  // namespace nb
