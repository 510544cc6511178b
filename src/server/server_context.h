// What the HTTP handlers share: the LLM (read-only from handler threads: tokenizer, config),
// the options, the engine loop, the metrics, and the source of ids and default seeds.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <random>
#include <string>
#include <string_view>

#include "kvattn/engine/llm.h"
#include "kvattn/server/server.h"
#include "server/engine_loop.h"
#include "server/metrics.h"
#include "server/request_parser.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace kvattn::server {

struct ServerContext {
  ServerContext(LLM& llm_, ServerOptions options_, std::string model_name_);

  LLM& llm;
  const ServerOptions options;
  const std::string model_name;
  const int64_t created;  // the server's start (unix seconds): /v1/models
  ServerMetrics metrics;
  EngineLoop loop;
  std::atomic<bool> shutting_down{false};
  std::atomic<int> open_streams{0};  // SSE responses still being written

  uint64_t random();  // thread-safe
  std::string new_id(const char* prefix);
  // A request's "model" must be empty or the served name: else ApiError 404 model_not_found.
  void check_model(const std::string& model) const;

 private:
  std::mutex rng_mu_;
  std::mt19937_64 rng_;
};

// POST /v1/completions and /v1/chat/completions. Throws ApiError for the error response.
void handle_completion(ServerContext& ctx, std::string_view body, httplib::Response& res,
                       Endpoint endpoint);
// POST /v1/responses (the Responses API; responses_handler.cpp). Throws ApiError likewise.
void handle_responses(ServerContext& ctx, std::string_view body, httplib::Response& res);
// POST /tokenize and /detokenize (vLLM's; tokenize_handler.cpp). Throw ApiError likewise.
void handle_tokenize(ServerContext& ctx, std::string_view body, httplib::Response& res);
void handle_detokenize(ServerContext& ctx, std::string_view body, httplib::Response& res);

}  // namespace kvattn::server
