// The in-process server of the server tests: the tiny Qwen3 checkpoint (no tokenizer: token-id
// prompts) behind a Server on a free port, a completion body that returns token ids, and the
// check of an OpenAI-shaped error response.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kvattn/engine/llm.h"
#include "kvattn/engine/weights.h"
#include "kvattn/server/server.h"

namespace kvattn::server::test_server {

using Json = nlohmann::json;
using Ids = std::vector<int32_t>;
constexpr int64_t kBlockBytes = 32768;  // tiny_qwen3: 16 tokens x 2 layers x K,V x 2 x 64 f32

inline std::unique_ptr<LLM> tiny_llm(int64_t max_num_seqs = 64, int64_t blocks = 512) {
  LLMOptions o;
  o.kv_cache_bytes = blocks * kBlockBytes;
  o.max_num_seqs = max_num_seqs;
  o.max_num_batched_tokens = 256;
  o.num_threads = 1;
  return std::make_unique<LLM>(
      load_hf_model(std::string(KVATTN_SOURCE_DIR) + "/tests/data/tiny_qwen3"), std::nullopt, o);
}

inline Ids random_prompt(std::mt19937_64& rng, size_t n) {
  std::uniform_int_distribution<int32_t> d(3, 319);
  Ids p(n);
  for (auto& t : p) t = d(rng);
  return p;
}

// A server on a free port, run() on its own thread.
class Running {
 public:
  explicit Running(ServerOptions o = {}, int64_t max_num_seqs = 64) : llm_(tiny_llm(max_num_seqs)) {
    o.port = 0;
    o.model_name = "tiny";
    o.http_threads = 64;
    srv_ = std::make_unique<Server>(*llm_, o);
    port_ = srv_->bind();
    thread_ = std::thread([this] { srv_->run(); });
  }
  ~Running() { stop(); }
  // Shuts down; the pool must be idle afterwards.
  void stop() {
    if (!thread_.joinable()) return;
    srv_->shutdown();
    thread_.join();
    llm_->check_kv_cache_idle();
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(60, 0);
    return c;
  }
  Server& server() { return *srv_; }

 private:
  std::unique_ptr<LLM> llm_;
  std::unique_ptr<Server> srv_;
  int port_ = 0;
  std::thread thread_;
};

inline Json completion_body(const Ids& prompt, int max_tokens, bool stream) {
  return {{"model", "tiny"},      {"prompt", prompt},         {"max_tokens", max_tokens},
          {"temperature", 0},     {"ignore_eos", true},       {"stream", stream},
          {"return_token_ids", true}};
}

// A response with `status` and OpenAI's error body (naming `param` when given).
inline void expect_error(const httplib::Result& r, int status, const std::string& param = "") {
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, status) << r->body;
  const Json j = Json::parse(r->body, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r->body;
  ASSERT_TRUE(j.contains("error")) << r->body;
  const Json& e = j["error"];
  EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty());
  EXPECT_TRUE(e["type"].is_string());
  EXPECT_TRUE(e.contains("param") && e.contains("code"));
  if (!param.empty()) EXPECT_EQ(e["param"], param) << r->body;
}

}  // namespace kvattn::server::test_server
