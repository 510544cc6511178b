// Per-phase GPU time of one CUDA model step (Model::set_phase_timing): an event is recorded on
// the step's stream at each phase boundary; after the step's own synchronisation, the time
// between consecutive events is charged to the phase the later event closes, so the laps add
// up to the GPU time from the first event to the last. A gap where the GPU waits for the
// host's next launch counts toward the phase whose event follows it.
//
// Contract: never inside a stream capture. The CUDA model runs its steps eagerly while
// timing is on and calls begin() only on those eager paths; lap() is a no-op otherwise (so
// the same run_layers code serves graph capture untouched). Events are created once and
// reused: a step allocates nothing after the first. Not yet run on a GPU (issue 20 slice
// without one; docs/notes/bench-workloads.md).
#pragma once

#ifdef KVATTN_WITH_CUDA

#include <cuda_runtime_api.h>

#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kvattn/engine/model.h"

namespace kvattn::cuda_model {

class PhaseEvents {
 public:
  PhaseEvents() = default;
  PhaseEvents(const PhaseEvents&) = delete;
  PhaseEvents& operator=(const PhaseEvents&) = delete;
  ~PhaseEvents() {
    for (cudaEvent_t e : events_) (void)cudaEventDestroy(e);
  }

  bool on = false;  // set_phase_timing

  // A step starts on `stream` (eager): records the first event when timing is on.
  void begin(cudaStream_t stream) {
    times_ = {};
    used_ = 0;
    active_ = on;
    if (active_) record(nullptr, stream);
  }
  // The work enqueued since the previous event belongs to `phase`.
  void lap(double PhaseTimes::*phase, cudaStream_t stream) {
    if (active_) record(phase, stream);
  }
  // After the step's stream synchronisation: the times of its laps.
  void end() {
    if (!active_) return;
    active_ = false;
    for (size_t i = 1; i < used_; ++i) {
      float ms = 0.0f;
      CUDA_CHECK(cudaEventElapsedTime(&ms, events_[i - 1], events_[i]));
      times_.*phases_[i] += 1e-3 * static_cast<double>(ms);
    }
  }
  // Drops an unfinished step's events (a step that threw, or a capture about to start).
  void cancel() { active_ = false; }
  const PhaseTimes& times() const { return times_; }

 private:
  void record(double PhaseTimes::*phase, cudaStream_t stream) {
    if (used_ == events_.size()) {
      cudaEvent_t e = nullptr;
      CUDA_CHECK(cudaEventCreate(&e));
      events_.push_back(e);
      phases_.push_back(nullptr);
    }
    CUDA_CHECK(cudaEventRecord(events_[used_], stream));
    phases_[used_] = phase;
    ++used_;
  }

  std::vector<cudaEvent_t> events_;
  std::vector<double PhaseTimes::*> phases_;  // what each event closes (null: the first)
  size_t used_ = 0;
  bool active_ = false;
  PhaseTimes times_;
};

}  // namespace kvattn::cuda_model

#endif  // KVATTN_WITH_CUDA
