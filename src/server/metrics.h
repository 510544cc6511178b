// Server metrics in the Prometheus text format (GET /metrics). Gauges come from a snapshot the
// engine thread publishes after every step; counters and histograms are updated as events
// happen. Names follow vLLM's where one exists (kvattn_ prefix). Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "kvattn/cache/block_manager.h"
#include "kvattn/engine/llm.h"

namespace kvattn::server {

// A cumulative histogram with fixed upper bounds (seconds), as Prometheus defines one.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  // "<name>_bucket{le="..."} n" for every bound and +Inf, then _sum and _count.
  void render(std::string& out, const std::string& name) const;
  int64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bucket, not cumulative
  int64_t count_ = 0;
  double sum_ = 0.0;
};

struct EngineSnapshot {
  int64_t running_seqs = 0;
  int64_t waiting_seqs = 0;
  BlockManagerStats blocks;
};

class ServerMetrics {
 public:
  ServerMetrics();
  void set_snapshot(const EngineSnapshot& s);
  EngineSnapshot snapshot() const;
  void add_prompt_tokens(int64_t n);
  void add_generation_tokens(int64_t n);
  void observe_ttft(double seconds);
  void observe_itl(double seconds);
  void request_finished(FinishReason reason);
  void request_aborted();
  void http_error(int status);
  std::string render() const;

 private:
  mutable std::mutex mu_;
  EngineSnapshot snap_;
  int64_t prompt_tokens_ = 0, generation_tokens_ = 0;
  int64_t finished_stop_ = 0, finished_length_ = 0, aborted_ = 0;
  std::map<int, int64_t> http_errors_;
  Histogram ttft_, itl_;
};

}  // namespace kvattn::server
