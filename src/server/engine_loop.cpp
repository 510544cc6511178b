#include "server/engine_loop.h"

#include <exception>

#include "kvattn/core/error.h"

namespace kvattn::server {

struct EngineLoop::Job {
  std::shared_ptr<RequestStream> stream;
  std::vector<uint64_t> request_ids;  // engine ids still unfinished
  Usage usage;
};

namespace {

double seconds_between(EngineLoop::Clock::time_point a, EngineLoop::Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

StreamEvent error_event(int status, const std::string& message) {
  StreamEvent e;
  e.kind = StreamEvent::Kind::kError;
  e.error = ApiError(status, message);
  return e;
}

}  // namespace

EngineLoop::EngineLoop(LLM& llm, ServerMetrics& metrics, int64_t max_queue)
    : llm_(llm), metrics_(metrics), max_queue_(max_queue) {
  publish_snapshot();
  thread_ = std::thread([this] { run(); });
}

EngineLoop::~EngineLoop() { shutdown(std::chrono::seconds(0)); }

std::shared_ptr<RequestStream> EngineLoop::submit(std::vector<std::vector<int32_t>> prompts,
                                                  const SamplingParams& params,
                                                  Clock::time_point arrival) {
  auto stream = std::make_shared<RequestStream>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) throw ApiError(503, "the server is shutting down", "", "shutting_down");
    const auto queued = static_cast<int64_t>(inbox_.size()) + waiting_seqs_.load();
    if (queued >= max_queue_) {
      throw ApiError(503,
                     "the server is overloaded: " + std::to_string(queued) +
                         " requests are waiting (--max-queue " + std::to_string(max_queue_) +
                         "); retry later",
                     "", "queue_full");
    }
    inbox_.push_back({std::move(prompts), params, stream, arrival});
  }
  cv_.notify_one();
  return stream;
}

void EngineLoop::cancel(const std::shared_ptr<RequestStream>& stream) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancels_.push_back(stream);
  }
  cv_.notify_one();
}

void EngineLoop::shutdown(std::chrono::duration<double> drain) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_) {
      stopping_ = true;
      drain_deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(drain);
    }
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void EngineLoop::run() {
  std::vector<Submission> inbox;
  std::vector<std::shared_ptr<RequestStream>> cancels;
  for (;;) {
    bool stopping = false;
    Clock::time_point deadline;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        return !inbox_.empty() || !cancels_.empty() || stopping_ || !live_.empty();
      });
      inbox.swap(inbox_);
      cancels.swap(cancels_);
      stopping = stopping_;
      deadline = drain_deadline_;
    }
    for (Submission& s : inbox) admit(s);
    inbox.clear();
    for (const auto& stream : cancels) {
      const auto it = jobs_.find(stream.get());
      if (it == jobs_.end()) continue;  // finished already
      abort_job(*it->second);
      metrics_.request_aborted();
    }
    cancels.clear();
    if (stopping && (live_.empty() || Clock::now() >= deadline)) break;
    if (!live_.empty()) {
      try {
        for (const RequestOutput& o : llm_.step([this](const TokenEvent& e) { on_token(e); })) {
          on_finished(o);
        }
      } catch (const std::exception& e) {  // the engine aborted every request
        fail_all(500, std::string("the engine failed: ") + e.what());
      }
      // Never spin on jobs the engine no longer knows (a broken invariant, not a state).
      if (!llm_.has_unfinished_requests() && !live_.empty()) {
        fail_all(500, "internal error: the engine dropped a request");
      }
    }
    publish_snapshot();
  }
  // Shutdown past the drain time: end what is left.
  for (auto& [stream, job] : std::unordered_map(jobs_)) {
    abort_job(*job);
    metrics_.request_aborted();
    job->stream->push(error_event(503, "the server is shutting down; the request was ended"));
  }
  publish_snapshot();
}

void EngineLoop::admit(Submission& s) {
  auto job = std::make_shared<Job>();
  job->stream = s.stream;
  uint32_t choice = 0;
  for (size_t i = 0; i < s.prompts.size(); ++i) {
    SamplingParams p = s.params;
    p.seed += i;  // prompts of one job draw from different streams
    uint64_t id = 0;
    try {
      id = llm_.add_request(std::move(s.prompts[i]), p);
    } catch (const Error& e) {
      abort_job(*job);
      s.stream->push(error_event(400, e.what()));
      return;
    }
    Live l;
    l.job = job;
    l.choice_base = choice;
    l.arrival = s.arrival;
    l.last_token.assign(static_cast<size_t>(p.n), Clock::time_point{});
    live_.emplace(id, std::move(l));
    job->request_ids.push_back(id);
    choice += static_cast<uint32_t>(p.n);
  }
  jobs_.emplace(s.stream.get(), job);
  StreamEvent e;
  e.kind = StreamEvent::Kind::kAccepted;
  s.stream->push(std::move(e));
}

void EngineLoop::abort_job(Job& job) {
  for (uint64_t id : job.request_ids) {
    llm_.abort_request(id);
    live_.erase(id);
  }
  job.request_ids.clear();
  jobs_.erase(job.stream.get());
}

void EngineLoop::on_token(const TokenEvent& e) {
  const auto it = live_.find(e.index);
  if (it == live_.end()) return;
  Live& l = it->second;
  const auto now = Clock::now();
  if (e.token >= 0) {
    if (!l.first_token) {
      l.first_token = true;
      metrics_.observe_ttft(seconds_between(l.arrival, now));
    }
    if (l.last_token[e.sample] != Clock::time_point{}) {
      metrics_.observe_itl(seconds_between(l.last_token[e.sample], now));
    }
    l.last_token[e.sample] = now;
    metrics_.add_generation_tokens(1);
  }
  StreamEvent ev;
  ev.choice = l.choice_base + e.sample;
  if (e.token >= 0 || !e.text.empty()) {
    ev.kind = StreamEvent::Kind::kToken;
    ev.text = std::string(e.text);
    ev.token = e.token;
    if (e.logprobs != nullptr) ev.logprobs = *e.logprobs;
    l.job->stream->push(ev);
  }
  if (e.finished) {
    ev.kind = StreamEvent::Kind::kChoiceEnd;
    ev.text.clear();
    ev.token = -1;
    ev.logprobs.reset();
    ev.finish_reason = e.finish_reason;
    metrics_.request_finished(e.finish_reason);
    l.job->stream->push(std::move(ev));
  }
}

void EngineLoop::on_finished(const RequestOutput& o) {
  const auto it = live_.find(o.request_id);
  if (it == live_.end()) return;
  std::shared_ptr<Job> job = it->second.job;
  if (!o.prompt_logprobs.empty()) {
    StreamEvent p;
    p.kind = StreamEvent::Kind::kPromptLogprobs;
    p.choice = it->second.choice_base;
    p.prompt_logprobs = o.prompt_logprobs;
    job->stream->push(std::move(p));
  }
  live_.erase(it);
  Usage& u = job->usage;
  u.prompt_tokens += o.num_prompt_tokens;
  u.cached_tokens += o.num_cached_tokens;
  // The end or stop id that ended a sample counts, as vLLM counts it (it is in vLLM's
  // token_ids; kvattn leaves it out of the text and the ids it returns).
  for (const CompletionOutput& c : o.samples) {
    u.completion_tokens += static_cast<int64_t>(c.token_ids.size()) + (c.stop_token >= 0 ? 1 : 0);
  }
  metrics_.add_prompt_tokens(o.num_prompt_tokens);
  std::erase(job->request_ids, o.request_id);
  if (job->request_ids.empty()) {
    StreamEvent e;
    e.kind = StreamEvent::Kind::kDone;
    e.usage = u;
    job->stream->push(std::move(e));
    jobs_.erase(job->stream.get());
  }
}

void EngineLoop::fail_all(int status, const std::string& message) {
  for (auto& [stream, job] : jobs_) job->stream->push(error_event(status, message));
  jobs_.clear();
  live_.clear();
}

void EngineLoop::publish_snapshot() {
  EngineSnapshot s;
  s.running_seqs = llm_.num_running_seqs();
  s.waiting_seqs = llm_.num_waiting_seqs();
  s.blocks = llm_.cache_stats();
  waiting_seqs_.store(s.waiting_seqs);
  metrics_.set_snapshot(s);
}

}  // namespace kvattn::server
