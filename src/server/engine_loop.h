// The engine thread. HTTP handlers submit jobs (one or more prompts with their
// SamplingParams) and read each job's events from its RequestStream; one thread owns the LLM
// and runs its step loop, so the scheduler batches every concurrent request (continuous
// batching, chunked prefill, prefix caching, preemption).
//
// Between two steps the thread (1) adds the submitted jobs (a job the engine rejects gets
// kError, 400, and disturbs nobody), (2) aborts the jobs whose client went away (cancel():
// their blocks are free before the next step), then runs one step and routes its token
// events. When idle it sleeps until a submission, a cancel or shutdown.
//
// Shutdown: submit() answers 503 from then on; the thread keeps stepping until every job
// finished or the drain time passed, then ends the rest with kError (503) and exits. A step
// that throws (engine failure) ends every job with kError (500); the engine frees their blocks.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kvattn/engine/llm.h"
#include "server/metrics.h"
#include "server/request_stream.h"

namespace kvattn::server {

class EngineLoop {
 public:
  using Clock = std::chrono::steady_clock;

  // max_queue: submit() answers 503 while this many sequences (or more) wait for admission.
  EngineLoop(LLM& llm, ServerMetrics& metrics, int64_t max_queue);
  ~EngineLoop();  // shutdown(0) if still running
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  // Queues a job; throws ApiError 503 when the queue is full or the server is shutting down.
  std::shared_ptr<RequestStream> submit(std::vector<std::vector<int32_t>> prompts,
                                        const SamplingParams& params, Clock::time_point arrival);
  // The client of `stream` went away: abort its job before the next step (no more events).
  void cancel(const std::shared_ptr<RequestStream>& stream);
  // Stops accepting, lets running jobs finish for up to `drain`, ends the rest with an error,
  // and joins the engine thread. Idempotent.
  void shutdown(std::chrono::duration<double> drain);

 private:
  struct Job;
  struct Submission {
    std::vector<std::vector<int32_t>> prompts;
    SamplingParams params;
    std::shared_ptr<RequestStream> stream;
    Clock::time_point arrival;
  };
  // One engine request (a prompt of a job, with its n samples).
  struct Live {
    std::shared_ptr<Job> job;
    uint32_t choice_base = 0;
    Clock::time_point arrival;
    std::vector<Clock::time_point> last_token;  // per sample; unset before its first token
    bool first_token = false;                   // of any sample (time to first token)
  };

  void run();
  void admit(Submission& s);
  void abort_job(Job& job);
  void on_token(const TokenEvent& e);
  void on_finished(const RequestOutput& o);
  void fail_all(int status, const std::string& message);
  void publish_snapshot();

  LLM& llm_;
  ServerMetrics& metrics_;
  const int64_t max_queue_;

  std::mutex mu_;  // guards the fields up to thread_
  std::condition_variable cv_;
  std::vector<Submission> inbox_;
  std::vector<std::shared_ptr<RequestStream>> cancels_;
  bool stopping_ = false;
  Clock::time_point drain_deadline_{};
  std::atomic<int64_t> waiting_seqs_{0};  // the scheduler's, published after every step
  std::thread thread_;

  // Engine thread only.
  std::unordered_map<uint64_t, Live> live_;  // by engine request id
  std::unordered_map<const RequestStream*, std::shared_ptr<Job>> jobs_;
};

}  // namespace kvattn::server
