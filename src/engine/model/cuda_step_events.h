// The CUDA model's step timeline (Model::set_step_timeline): an event before each step's first
// device operation and one after its last, on the step's stream. Events are created as
// needed and reused after clear(), so a long run allocates a pair per step once.
//
// Contract: begin() and end() only outside a stream capture (the model calls begin() after
// any capture of the step and end() before its synchronisation); a step that threw leaves an
// unmatched begin(), which the next begin() overwrites.
#pragma once

#ifdef KVATTN_WITH_CUDA

#include <cuda_runtime_api.h>

#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kvattn/engine/model.h"

namespace kvattn::cuda_model {

class StepEvents {
 public:
  StepEvents() = default;
  StepEvents(const StepEvents&) = delete;
  StepEvents& operator=(const StepEvents&) = delete;
  ~StepEvents() {
    for (cudaEvent_t e : events_) (void)cudaEventDestroy(e);
  }

  bool on = false;

  void begin(cudaStream_t stream) {
    if (!on) return;
    record(2 * steps_, stream);
    open_ = true;
  }
  void end(cudaStream_t stream) {
    if (!on || !open_) return;
    record(2 * steps_ + 1, stream);
    open_ = false;
    ++steps_;
  }
  void clear() {
    steps_ = 0;
    open_ = false;
  }
  // Waits for the last step's end event, then summarizes (times relative to the first start).
  StepTimeline summary() const {
    if (steps_ == 0) return {};
    CUDA_CHECK(cudaEventSynchronize(events_[2 * steps_ - 1]));
    std::vector<double> starts(steps_), ends(steps_);
    for (size_t k = 0; k < steps_; ++k) {
      starts[k] = since_first(events_[2 * k]);
      ends[k] = since_first(events_[2 * k + 1]);
    }
    return summarize_step_timeline(starts, ends);
  }

 private:
  void record(size_t i, cudaStream_t stream) {
    while (events_.size() <= i) {
      cudaEvent_t e = nullptr;
      CUDA_CHECK(cudaEventCreate(&e));
      events_.push_back(e);
    }
    CUDA_CHECK(cudaEventRecord(events_[i], stream));
  }
  double since_first(cudaEvent_t e) const {
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, events_[0], e));
    return 1e-3 * static_cast<double>(ms);
  }

  std::vector<cudaEvent_t> events_;  // start of step k at 2k, its end at 2k + 1
  size_t steps_ = 0;
  bool open_ = false;
};

}  // namespace kvattn::cuda_model

#endif  // KVATTN_WITH_CUDA
