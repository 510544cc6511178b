#include "server/metrics.h"

#include <cstdio>

namespace kvattn::server {
namespace {

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

void metric(std::string& out, const char* name, const char* type, const char* help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

void sample(std::string& out, const std::string& name, double v) {
  out += name;
  out += ' ';
  out += num(v);
  out += '\n';
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  ++count_;
  sum_ += v;
}

void Histogram::render(std::string& out, const std::string& name) const {
  int64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    const std::string le = i < bounds_.size() ? num(bounds_[i]) : "+Inf";
    sample(out, name + "_bucket{le=\"" + le + "\"}", static_cast<double>(cumulative));
  }
  sample(out, name + "_sum", sum_);
  sample(out, name + "_count", static_cast<double>(count_));
}

ServerMetrics::ServerMetrics()
    : ttft_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
             7.5, 10.0, 20.0, 40.0, 80.0}),
      itl_({0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15,
            0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5}) {}

void ServerMetrics::set_snapshot(const EngineSnapshot& s) {
  std::lock_guard<std::mutex> lock(mu_);
  snap_ = s;
}

EngineSnapshot ServerMetrics::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return snap_;
}

void ServerMetrics::add_prompt_tokens(int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  prompt_tokens_ += n;
}

void ServerMetrics::add_generation_tokens(int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  generation_tokens_ += n;
}

void ServerMetrics::observe_ttft(double s) {
  std::lock_guard<std::mutex> lock(mu_);
  ttft_.observe(s);
}

void ServerMetrics::observe_itl(double s) {
  std::lock_guard<std::mutex> lock(mu_);
  itl_.observe(s);
}

void ServerMetrics::request_finished(FinishReason reason) {
  std::lock_guard<std::mutex> lock(mu_);
  ++(reason == FinishReason::kStop ? finished_stop_ : finished_length_);
}

void ServerMetrics::request_aborted() {
  std::lock_guard<std::mutex> lock(mu_);
  ++aborted_;
}

void ServerMetrics::http_error(int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++http_errors_[status];
}

std::string ServerMetrics::render() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string o;
  metric(o, "kvattn_num_requests_running", "gauge", "Sequences running (holding KV blocks).");
  sample(o, "kvattn_num_requests_running", static_cast<double>(snap_.running_seqs));
  metric(o, "kvattn_num_requests_waiting", "gauge", "Sequences waiting to be scheduled.");
  sample(o, "kvattn_num_requests_waiting", static_cast<double>(snap_.waiting_seqs));
  metric(o, "kvattn_kv_cache_blocks_total", "gauge", "KV cache blocks in the pool.");
  sample(o, "kvattn_kv_cache_blocks_total", static_cast<double>(snap_.blocks.num_blocks));
  metric(o, "kvattn_kv_cache_blocks_used", "gauge", "KV cache blocks held by a sequence.");
  sample(o, "kvattn_kv_cache_blocks_used", static_cast<double>(snap_.blocks.num_used_blocks));
  metric(o, "kvattn_kv_cache_blocks_free", "gauge",
         "KV cache blocks held by no sequence (cached prefixes included).");
  sample(o, "kvattn_kv_cache_blocks_free", static_cast<double>(snap_.blocks.num_free_blocks));
  metric(o, "kvattn_kv_cache_usage_perc", "gauge", "Fraction of KV cache blocks in use.");
  sample(o, "kvattn_kv_cache_usage_perc",
         snap_.blocks.num_blocks ? static_cast<double>(snap_.blocks.num_used_blocks) /
                                       static_cast<double>(snap_.blocks.num_blocks)
                                 : 0.0);
  metric(o, "kvattn_prefix_cache_hit_rate", "gauge",
         "Prompt tokens served by the prefix cache / prompt tokens looked up, since start.");
  sample(o, "kvattn_prefix_cache_hit_rate", snap_.blocks.hit_rate());
  metric(o, "kvattn_prefix_cache_queries_total", "counter", "Prompt tokens looked up.");
  sample(o, "kvattn_prefix_cache_queries_total", static_cast<double>(snap_.blocks.query_tokens));
  metric(o, "kvattn_prefix_cache_hits_total", "counter", "Prompt tokens found in the cache.");
  sample(o, "kvattn_prefix_cache_hits_total", static_cast<double>(snap_.blocks.hit_tokens));
  metric(o, "kvattn_prompt_tokens_total", "counter", "Prompt tokens of finished requests.");
  sample(o, "kvattn_prompt_tokens_total", static_cast<double>(prompt_tokens_));
  metric(o, "kvattn_generation_tokens_total", "counter", "Tokens generated.");
  sample(o, "kvattn_generation_tokens_total", static_cast<double>(generation_tokens_));
  metric(o, "kvattn_request_success_total", "counter", "Choices finished, by finish reason.");
  sample(o, "kvattn_request_success_total{finished_reason=\"stop\"}",
         static_cast<double>(finished_stop_));
  sample(o, "kvattn_request_success_total{finished_reason=\"length\"}",
         static_cast<double>(finished_length_));
  metric(o, "kvattn_request_aborted_total", "counter",
         "Requests aborted (client gone, or ended by shutdown).");
  sample(o, "kvattn_request_aborted_total", static_cast<double>(aborted_));
  metric(o, "kvattn_http_errors_total", "counter", "Error responses, by HTTP status.");
  for (const auto& [status, n] : http_errors_) {
    sample(o, "kvattn_http_errors_total{status=\"" + std::to_string(status) + "\"}",
           static_cast<double>(n));
  }
  metric(o, "kvattn_time_to_first_token_seconds", "histogram",
         "From the request's arrival to its first generated token.");
  ttft_.render(o, "kvattn_time_to_first_token_seconds");
  metric(o, "kvattn_inter_token_latency_seconds", "histogram",
         "Between consecutive tokens of one sample.");
  itl_.render(o, "kvattn_inter_token_latency_seconds");
  return o;
}

}  // namespace kvattn::server
