// kvattn's OpenAI-compatible HTTP server (`kvattn serve`), over an LLM:
//   POST /v1/completions, POST /v1/chat/completions (stream: true => Server-Sent Events),
//   GET /v1/models, GET /health, GET /metrics (Prometheus text).
// One engine thread runs the LLM's step loop; HTTP handler threads (cpp-httplib) parse,
// tokenize and submit requests, and read their tokens from a per-request queue
// (src/server/engine_loop.h). A streaming client that disconnects has its request aborted and
// its KV blocks freed before the next step.
//
//   kvattn::LLM llm({.model = "models/SmolLM2-135M-Instruct.Q4_1.gguf"});
//   kvattn::server::Server server(llm, {.port = 8000});
//   server.bind();
//   server.run();   // until server.shutdown() (from another thread, e.g. on SIGTERM)
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvattn/engine/llm.h"

namespace kvattn::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;             // 0: any free port (bind() returns it)
  std::string api_key;         // non-empty: /v1/* require "Authorization: Bearer <api_key>"
  std::string model_name;      // the served model id; empty: the model file's name
  int64_t max_queue = 1024;    // 503 while this many sequences wait for admission
  double drain_seconds = 0.0;  // shutdown lets running requests finish for this long
  int http_threads = 512;      // concurrent connections served (a stream holds one)
  size_t max_body_bytes = size_t{16} << 20;
  // CORS for browser clients (vLLM's default: every origin): "*" or exact origins
  // ("https://app.example"); a request whose Origin matches gets Access-Control-Allow-Origin,
  // and its preflight (OPTIONS) an answer without the API key. Empty: no CORS headers.
  std::vector<std::string> allowed_origins = {"*"};
};

class Server {
 public:
  // The LLM must outlive the server; the server's engine thread is its only driver.
  Server(LLM& llm, ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the listening socket; returns the port. Throws kvattn::Error when it cannot.
  int bind();
  // Serves until shutdown(). Returns false when the server could not listen.
  bool run();
  // Stops accepting requests, lets running ones finish for drain_seconds, ends the rest with
  // an error event, and stops the HTTP server so run() returns. Any thread; idempotent.
  void shutdown();

  const std::string& model_name() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvattn::server
