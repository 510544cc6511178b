// The HTTP server in-process on the tiny Qwen3 checkpoint (no tokenizer: token-id prompts,
// return_token_ids to read the output), driven by cpp-httplib's client:
//  - greedy output, streamed and not, equals LLM::generate on its own engine;
//  - 32 concurrent streaming clients each get what they get alone, and every block is free;
//  - a client that disconnects after 3 tokens is aborted and its blocks freed;
//  - every error status (400, 401, 404, 503) with OpenAI's error body; 1,000 random malformed
//    bodies never crash the server or leak a block;
//  - shutdown mid-stream ends the stream with an error chunk and leaves the pool idle.
#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kvattn/engine/llm.h"
#include "kvattn/engine/weights.h"
#include "kvattn/server/server.h"
#include "server_fixture.h"

namespace kvattn::server {
namespace {

using test_server::completion_body;
using test_server::expect_error;
using test_server::Ids;
using test_server::Json;
using test_server::random_prompt;
using test_server::Running;
using test_server::tiny_llm;

// The "data: " payloads of an SSE body, in order.
std::vector<std::string> sse_data(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    const size_t end = body.find("\n\n", pos);
    out.push_back(body.substr(pos + 6, end - pos - 6));
    pos = end;
  }
  return out;
}

// Concatenated token_ids per choice of a streamed body (checks the stream's shape).
std::vector<Ids> streamed_ids(const std::string& body, size_t choices) {
  std::vector<Ids> ids(choices);
  const auto data = sse_data(body);
  EXPECT_FALSE(data.empty());
  if (data.empty()) return ids;
  EXPECT_EQ(data.back(), "[DONE]");
  for (size_t i = 0; i + 1 < data.size(); ++i) {
    const Json c = Json::parse(data[i]);
    EXPECT_EQ(c["object"], "text_completion");
    EXPECT_FALSE(c.contains("error")) << data[i];
    for (const Json& ch : c["choices"]) {
      if (!ch.contains("token_ids")) continue;  // the finish chunk
      for (const Json& t : ch["token_ids"]) {
        ids.at(ch["index"].get<size_t>()).push_back(t.get<int32_t>());
      }
    }
  }
  return ids;
}

Json metrics_of(Running& s) {
  auto c = s.client();
  auto r = c.Get("/metrics");
  EXPECT_TRUE(r);
  Json m = Json::object();
  if (!r) return m;
  std::istringstream in(r->body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    m[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
  }
  return m;
}

// Waits (up to 10 s) until /metrics shows no sequence and no used block.
bool pool_idle(Running& s) {
  for (int i = 0; i < 1000; ++i) {
    const Json m = metrics_of(s);
    if (m["kvattn_kv_cache_blocks_used"] == 0 && m["kvattn_num_requests_running"] == 0 &&
        m["kvattn_num_requests_waiting"] == 0) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST(Server, GreedyMatchesGenerateStreamedAndNot) {
  std::mt19937_64 rng(1);
  const Ids prompt = random_prompt(rng, 37);
  SamplingParams sp;
  sp.max_tokens = 20;
  sp.ignore_eos = true;
  const Ids expect = tiny_llm()->generate({prompt}, sp)[0].token_ids;
  ASSERT_EQ(expect.size(), 20u);

  Running s;
  auto c = s.client();
  auto r = c.Post("/v1/completions", completion_body(prompt, 20, false).dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const Json j = Json::parse(r->body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "tiny");
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["token_ids"].get<Ids>(), expect);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 37);
  EXPECT_EQ(j["usage"]["completion_tokens"], 20);
  EXPECT_EQ(j["usage"]["total_tokens"], 57);

  auto st = c.Post("/v1/completions", completion_body(prompt, 20, true).dump(), "application/json");
  ASSERT_TRUE(st);
  ASSERT_EQ(st->status, 200);
  EXPECT_EQ(st->get_header_value("Content-Type"), "text/event-stream");
  EXPECT_EQ(streamed_ids(st->body, 1)[0], expect);
  // The repeated prompt hit the prefix cache: 32 of its 37 tokens (two full blocks).
  Json again = completion_body(prompt, 2, false);
  auto hit = c.Post("/v1/completions", again.dump(), "application/json");
  ASSERT_TRUE(hit);
  EXPECT_EQ(Json::parse(hit->body)["usage"]["prompt_tokens_details"]["cached_tokens"], 32);
  s.stop();
}

// logprobs (completions: a count): each token's log-probability is the LLM's, the top dict
// holds the alternatives and the chosen token, text_offset advances by the token strings
// ("token_id:N" without a tokenizer); streamed chunks carry the same values.
TEST(Server, CompletionLogprobsEqualTheEnginesStreamedAndNot) {
  std::mt19937_64 rng(3);
  const Ids prompt = random_prompt(rng, 21);
  SamplingParams sp;
  sp.max_tokens = 9;
  sp.ignore_eos = true;
  sp.logprobs = 2;
  const RequestOutput want = tiny_llm()->generate({prompt}, sp)[0];
  ASSERT_EQ(want.logprobs.size(), 9u);

  Running s;
  auto c = s.client();
  Json body = completion_body(prompt, 9, false);
  body["logprobs"] = 2;
  auto r = c.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const Json lp = Json::parse(r->body)["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 9u);
  int64_t offset = 0;
  for (size_t t = 0; t < 9; ++t) {
    const std::string tok = "token_id:" + std::to_string(want.token_ids[t]);
    EXPECT_EQ(lp["tokens"][t], tok);
    EXPECT_EQ(lp["token_logprobs"][t].get<float>(), want.logprobs[t].logprob) << t;
    EXPECT_EQ(lp["text_offset"][t], offset);
    offset += static_cast<int64_t>(tok.size());
    const Json& top = lp["top_logprobs"][t];
    EXPECT_TRUE(top.contains(tok));
    for (const TokenLogprob& x : want.logprobs[t].top) {
      EXPECT_EQ(top["token_id:" + std::to_string(x.token)].get<float>(), x.logprob);
    }
    EXPECT_LE(top.size(), 3u);  // two alternatives and the chosen token (greedy: among them)
  }
  // Streamed: one token a chunk, the same values and offsets in order.
  body["stream"] = true;
  auto st = c.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(st);
  Json tokens = Json::array(), values = Json::array(), offsets = Json::array();
  for (const std::string& d : sse_data(st->body)) {
    if (d == "[DONE]") break;
    const Json ch = Json::parse(d)["choices"][0];
    if (ch["logprobs"].is_null()) continue;  // the finish chunk
    for (const Json& x : ch["logprobs"]["tokens"]) tokens.push_back(x);
    for (const Json& x : ch["logprobs"]["token_logprobs"]) values.push_back(x);
    for (const Json& x : ch["logprobs"]["text_offset"]) offsets.push_back(x);
  }
  EXPECT_EQ(tokens, lp["tokens"]);
  EXPECT_EQ(values, lp["token_logprobs"]);
  EXPECT_EQ(offsets, lp["text_offset"]);
  // Without logprobs the field stays null.
  auto plain = c.Post("/v1/completions", completion_body(prompt, 2, false).dump(), "application/json");
  ASSERT_TRUE(plain);
  EXPECT_TRUE(Json::parse(plain->body)["choices"][0]["logprobs"].is_null());
  s.stop();
}

// echo with logprobs (lm-eval's loglikelihood requests): the prompt's tokens lead the
// choice's logprobs, the first with null, the others the LLM's prompt_logprobs, then the
// generated tokens'; max_tokens 0 scores the prompt alone. Without logprobs, echo only leads
// the text (no tokenizer here: an id prompt's text is empty).
TEST(Server, EchoWithLogprobsEqualsTheEnginesPromptLogprobs) {
  std::mt19937_64 rng(8);
  const Ids prompt = random_prompt(rng, 17);
  SamplingParams sp;
  sp.max_tokens = 3;
  sp.ignore_eos = true;
  sp.logprobs = 1;
  sp.prompt_logprobs = 1;
  const RequestOutput want = tiny_llm()->generate({prompt}, sp)[0];
  ASSERT_EQ(want.prompt_logprobs.size(), prompt.size() - 1);

  Running s;
  auto c = s.client();
  for (int max_tokens : {3, 0}) {
    SCOPED_TRACE("max_tokens " + std::to_string(max_tokens));
    Json body = completion_body(prompt, max_tokens, false);
    body["logprobs"] = 1;
    body["echo"] = true;
    auto r = c.Post("/v1/completions", body.dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const Json choice = Json::parse(r->body)["choices"][0];
    const Json& lp = choice["logprobs"];
    const size_t gen = static_cast<size_t>(max_tokens);
    ASSERT_EQ(lp["tokens"].size(), prompt.size() + gen);
    ASSERT_EQ(lp["token_logprobs"].size(), prompt.size() + gen);
    int64_t offset = 0;
    for (size_t t = 0; t < prompt.size() + gen; ++t) {
      const int32_t id = t < prompt.size() ? prompt[t] : want.token_ids[t - prompt.size()];
      const std::string tok = "token_id:" + std::to_string(id);
      EXPECT_EQ(lp["tokens"][t], tok) << t;
      EXPECT_EQ(lp["text_offset"][t], offset) << t;
      offset += static_cast<int64_t>(tok.size());
      if (t == 0) {
        EXPECT_TRUE(lp["token_logprobs"][t].is_null());
        EXPECT_TRUE(lp["top_logprobs"][t].is_null());
        continue;
      }
      const TokenLogprobs& w =
          t < prompt.size() ? want.prompt_logprobs[t - 1] : want.logprobs[t - prompt.size()];
      EXPECT_EQ(lp["token_logprobs"][t].get<float>(), w.logprob) << t;
      EXPECT_TRUE(lp["top_logprobs"][t].contains(tok)) << t;
      EXPECT_EQ(lp["top_logprobs"][t]["token_id:" + std::to_string(w.top.at(0).token)].get<float>(),
                w.top.at(0).logprob) << t;
    }
    EXPECT_EQ(choice["finish_reason"], "length");
    EXPECT_EQ(Json::parse(r->body)["usage"]["completion_tokens"], max_tokens);
  }
  Json plain = completion_body(prompt, 2, false);
  plain["echo"] = true;
  auto r = c.Post("/v1/completions", plain.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_TRUE(Json::parse(r->body)["choices"][0]["logprobs"].is_null());
  s.stop();
}

// vLLM's stop_token_ids: the greedy output stops before the first listed id it generates
// (finish_reason "stop", the id left out), as the engine's SamplingParams::stop_token_ids;
// vLLM's min_tokens holds it back.
TEST(Server, StopTokenIdsAndMinTokens) {
  std::mt19937_64 rng(9);
  const Ids prompt = random_prompt(rng, 12);
  SamplingParams sp;
  sp.max_tokens = 10;
  sp.ignore_eos = true;
  const RequestOutput free_run = tiny_llm()->generate({prompt}, sp)[0];
  ASSERT_EQ(free_run.token_ids.size(), 10u);
  const int32_t stop = free_run.token_ids[4];
  const auto first = std::find(free_run.token_ids.begin(), free_run.token_ids.end(), stop);
  const Ids want(free_run.token_ids.begin(), first);

  Running s;
  auto c = s.client();
  Json body = completion_body(prompt, 10, false);
  body["stop_token_ids"] = {stop};
  auto r = c.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const Json choice = Json::parse(r->body)["choices"][0];
  EXPECT_EQ(choice["token_ids"].get<Ids>(), want);
  EXPECT_EQ(choice["finish_reason"], "stop");
  // The stop id counts in the usage (vLLM's), though it is not among the ids returned.
  EXPECT_EQ(Json::parse(r->body)["usage"]["completion_tokens"], want.size() + 1);
  // vLLM's min_tokens holds the stop id back: at least 6 tokens, the stop id not among them.
  body["min_tokens"] = 6;
  auto held = c.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(held);
  ASSERT_EQ(held->status, 200) << held->body;
  const Ids got = Json::parse(held->body)["choices"][0]["token_ids"].get<Ids>();
  ASSERT_GE(got.size(), 6u);
  for (size_t i = 0; i < 6; ++i) EXPECT_NE(got[i], stop) << i;
  body["min_tokens"] = 11;  // above max_tokens 10
  auto over = c.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(over);
  EXPECT_EQ(over->status, 400);
  EXPECT_EQ(Json::parse(over->body)["error"]["param"], "min_tokens");
  s.stop();
}

// vLLM's allowed_token_ids: every generated id is among them, and the greedy run equals the
// engine's with the same list; one past the vocabulary is a 400 naming the field.
// truncate_prompt_tokens: the prompt keeps its last k ids (usage counts k, the output equals
// the engine's on those k), -1 keeps it whole when it fits, and echo returns what was kept.
TEST(Server, AllowedTokenIdsAndPromptTruncation) {
  std::mt19937_64 rng(21);
  const Ids prompt = random_prompt(rng, 20);
  SamplingParams sp;
  sp.max_tokens = 8;
  sp.ignore_eos = true;
  sp.allowed_token_ids = {11, 12, 13, 200};
  const RequestOutput engine_allowed = tiny_llm()->generate({prompt}, sp)[0];
  sp.allowed_token_ids.clear();
  const Ids tail(prompt.end() - 6, prompt.end());
  const RequestOutput engine_tail = tiny_llm()->generate({tail}, sp)[0];

  Running s;
  auto c = s.client();
  Json body = completion_body(prompt, 8, false);
  body["allowed_token_ids"] = {11, 12, 13, 200};
  auto r = c.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const Ids got = Json::parse(r->body)["choices"][0]["token_ids"].get<Ids>();
  EXPECT_EQ(got, engine_allowed.token_ids);
  for (int32_t t : got) EXPECT_TRUE(t == 11 || t == 12 || t == 13 || t == 200) << t;
  body["allowed_token_ids"] = {11, 320};  // the tiny model's vocabulary is [0, 320)
  auto bad = c.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(Json::parse(bad->body)["error"]["param"], "allowed_token_ids");

  Json cut = completion_body(prompt, 8, false);
  cut["truncate_prompt_tokens"] = 6;
  cut["echo"] = true;
  auto t = c.Post("/v1/completions", cut.dump(), "application/json");
  ASSERT_TRUE(t);
  ASSERT_EQ(t->status, 200) << t->body;
  const Json tj = Json::parse(t->body);
  EXPECT_EQ(tj["usage"]["prompt_tokens"], 6);
  const Ids echoed = tj["choices"][0]["token_ids"].get<Ids>();
  EXPECT_EQ(echoed, engine_tail.token_ids);
  cut["truncate_prompt_tokens"] = -1;
  auto whole = c.Post("/v1/completions", cut.dump(), "application/json");
  ASSERT_TRUE(whole);
  ASSERT_EQ(whole->status, 200) << whole->body;
  EXPECT_EQ(Json::parse(whole->body)["usage"]["prompt_tokens"], 20);
  s.stop();
}

// /tokenize and /detokenize are routed and checked; this tiny model has no tokenizer, so
// both answer 400 saying so (the openai client test runs them on the default model).
TEST(Server, TokenizeRoutesAndRefusesWithoutATokenizer) {
  Running s;
  auto c = s.client();
  for (const char* path : {"/tokenize", "/detokenize"}) {
    SCOPED_TRACE(path);
    const std::string body = path == std::string("/tokenize") ? R"({"prompt": "hi"})"
                                                               : R"({"tokens": [1, 2]})";
    auto r = c.Post(path, body, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400);
    EXPECT_NE(Json::parse(r->body)["error"]["message"].get<std::string>().find("no tokenizer"),
              std::string::npos)
        << r->body;
    auto wrong = c.Post(path, R"({"model": "other", "prompt": "x", "tokens": []})",
                        "application/json");
    ASSERT_TRUE(wrong);
    EXPECT_EQ(wrong->status, 400);  // the unknown field, found before the model
    auto bad = c.Post(path, "{", "application/json");
    ASSERT_TRUE(bad);
    EXPECT_EQ(bad->status, 400);
    EXPECT_EQ(Json::parse(bad->body)["error"]["code"], "invalid_json");
  }
  auto other = c.Post("/tokenize", R"({"model": "other", "prompt": "x"})", "application/json");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 404);
  s.stop();
}

// presence / frequency / repetition penalties reach the engine: the server's greedy tokens
// equal LLM::generate's with the same penalties, and differ from the unpenalised ones.
TEST(Server, PenaltiesEqualTheEngines) {
  std::mt19937_64 rng(4);
  const Ids prompt = random_prompt(rng, 15);
  SamplingParams sp;
  sp.max_tokens = 24;
  sp.ignore_eos = true;
  const Ids plain = tiny_llm()->generate({prompt}, sp)[0].token_ids;
  sp.presence_penalty = 0.5f;
  sp.frequency_penalty = 1.5f;
  sp.repetition_penalty = 1.3f;
  const Ids want = tiny_llm()->generate({prompt}, sp)[0].token_ids;
  EXPECT_NE(want, plain);
  Running s;
  auto c = s.client();
  Json body = completion_body(prompt, 24, false);
  body["presence_penalty"] = 0.5;
  body["frequency_penalty"] = 1.5;
  body["repetition_penalty"] = 1.3;
  auto r = c.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(Json::parse(r->body)["choices"][0]["token_ids"].get<Ids>(), want);
  // logit_bias: banning the greedy first token changes it; an id outside the vocabulary is a
  // 400 from the engine, naming logit_bias.
  Json ban = completion_body(prompt, 1, false);
  ban["logit_bias"] = {{std::to_string(plain[0]), -100}};
  auto rb = c.Post("/v1/completions", ban.dump(), "application/json");
  ASSERT_TRUE(rb);
  ASSERT_EQ(rb->status, 200) << rb->body;
  EXPECT_NE(Json::parse(rb->body)["choices"][0]["token_ids"][0].get<int32_t>(), plain[0]);
  ban["logit_bias"] = {{"5000", 1}};
  expect_error(c.Post("/v1/completions", ban.dump(), "application/json"), 400);
  s.stop();
}

TEST(Server, ParallelSamplesAndSeeds) {
  Running s;
  auto c = s.client();
  Json b = completion_body({5, 6, 7, 8}, 12, false);
  b["n"] = 2;
  b["temperature"] = 1.0;
  b["seed"] = 42;
  auto r1 = c.Post("/v1/completions", b.dump(), "application/json");
  auto r2 = c.Post("/v1/completions", b.dump(), "application/json");
  ASSERT_TRUE(r1 && r2);
  ASSERT_EQ(r1->status, 200) << r1->body;
  const Json j1 = Json::parse(r1->body), j2 = Json::parse(r2->body);
  ASSERT_EQ(j1["choices"].size(), 2u);
  EXPECT_EQ(j1["choices"][0]["index"], 0);
  EXPECT_EQ(j1["choices"][1]["index"], 1);
  EXPECT_EQ(j1["choices"], j2["choices"]);  // same seed, same samples
  EXPECT_NE(j1["choices"][0]["token_ids"], j1["choices"][1]["token_ids"]);
  EXPECT_EQ(j1["usage"]["completion_tokens"], 24);
  // Two prompts in one request: choices 0..3, prompt-major.
  b["prompt"] = {{5, 6, 7, 8}, {9, 10}};
  auto r3 = c.Post("/v1/completions", b.dump(), "application/json");
  ASSERT_TRUE(r3);
  const Json j3 = Json::parse(r3->body);
  ASSERT_EQ(j3["choices"].size(), 4u);
  EXPECT_EQ(j3["choices"][0]["token_ids"], j1["choices"][0]["token_ids"]);
  EXPECT_EQ(j3["usage"]["prompt_tokens"], 6);
  s.stop();
}

TEST(Server, ConcurrentStreamsEachEqualAlone) {
  constexpr int kClients = 32;
  std::mt19937_64 rng(2);
  std::vector<Ids> prompts;
  std::vector<int> lens;
  for (int i = 0; i < kClients; ++i) {
    prompts.push_back(random_prompt(rng, 5 + rng() % 80));
    lens.push_back(8 + static_cast<int>(rng() % 40));
  }
  std::vector<Ids> alone;
  {
    auto llm = tiny_llm();
    for (int i = 0; i < kClients; ++i) {
      SamplingParams sp;
      sp.max_tokens = lens[i];
      sp.ignore_eos = true;
      alone.push_back(llm->generate({prompts[i]}, sp)[0].token_ids);
    }
  }
  Running s;
  std::vector<std::string> bodies(kClients);
  std::vector<int> status(kClients, 0);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      auto c = s.client();
      httplib::Request req;
      req.method = "POST";
      req.path = "/v1/completions";
      req.body = completion_body(prompts[i], lens[i], true).dump();
      req.set_header("Content-Type", "application/json");
      std::string got;
      req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
        got.append(d, n);
        return true;
      };
      auto r = c.send(req);
      bodies[i] = got;
      if (r) {
        status[i] = r->status;
      } else {
        bodies[i] = httplib::to_string(r.error()) + " after: " + got;
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kClients; ++i) {
    ASSERT_EQ(status[i], 200) << "client " << i << ": " << bodies[i];
    EXPECT_EQ(streamed_ids(bodies[i], 1)[0], alone[i]) << "client " << i;
  }
  const Json m = metrics_of(s);
  EXPECT_EQ(m["kvattn_kv_cache_blocks_used"], 0);
  EXPECT_EQ(m["kvattn_kv_cache_blocks_free"], m["kvattn_kv_cache_blocks_total"]);
  EXPECT_GE(m["kvattn_time_to_first_token_seconds_count"].get<double>(), kClients);
  EXPECT_GT(m["kvattn_inter_token_latency_seconds_count"].get<double>(), 0);
  double generated = 0;
  for (int n : lens) generated += n;
  EXPECT_EQ(m["kvattn_generation_tokens_total"], generated);
  s.stop();
}

TEST(Server, DisconnectAfterThreeTokensFreesBlocks) {
  Running s;
  std::mt19937_64 rng(3);
  const Ids prompt = random_prompt(rng, 200);
  auto c = s.client();
  int chunks = 0;
  std::string got;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = completion_body(prompt, 3800, true).dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    got.append(data, len);
    chunks = static_cast<int>(sse_data(got).size());
    return chunks < 3;  // false: the client closes the connection
  };
  auto r = c.send(req);
  EXPECT_GE(chunks, 3);
  ASSERT_TRUE(pool_idle(s)) << "the aborted request still holds blocks";
  const Json m = metrics_of(s);
  EXPECT_EQ(m["kvattn_request_aborted_total"], 1);
  EXPECT_LT(m["kvattn_generation_tokens_total"].get<double>(), 3800);  // it did not run on
  // The server still serves.
  auto ok = s.client().Post("/v1/completions", completion_body({4, 5}, 3, false).dump(),
                            "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  s.stop();
}

TEST(Server, ErrorStatusesAndBodies) {
  ServerOptions o;
  o.api_key = "sekrit";
  Running s(o);
  auto c = s.client();
  const std::string good = completion_body({5, 6}, 2, false).dump();
  expect_error(c.Post("/v1/completions", good, "application/json"), 401);
  c.set_bearer_token_auth("wrong");
  expect_error(c.Post("/v1/completions", good, "application/json"), 401);
  expect_error(c.Get("/v1/models"), 401);
  auto health = c.Get("/health");  // not under /v1: no key needed
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  c.set_bearer_token_auth("sekrit");
  auto ok = c.Post("/v1/completions", good, "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  auto models = c.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(Json::parse(models->body)["data"][0]["id"], "tiny");

  expect_error(c.Get("/v1/nothing"), 404);
  expect_error(c.Get("/v1/models/other"), 404, "model");
  Json b = completion_body({5, 6}, 2, false);
  b["model"] = "other";
  expect_error(c.Post("/v1/completions", b.dump(), "application/json"), 404, "model");
  expect_error(c.Post("/v1/completions", "{not json", "application/json"), 400);
  b = completion_body({5, 6}, 2, false);
  b["temperature"] = 7;
  expect_error(c.Post("/v1/completions", b.dump(), "application/json"), 400, "temperature");
  b = completion_body({5, 6}, 2, false);
  b["bogus"] = 1;
  expect_error(c.Post("/v1/completions", b.dump(), "application/json"), 400, "bogus");
  b = completion_body({5, 999}, 2, false);  // outside the 320-token vocabulary
  expect_error(c.Post("/v1/completions", b.dump(), "application/json"), 400, "prompt");
  b = completion_body(Ids(5000, 7), 2, false);  // the context is 4096
  auto longp = c.Post("/v1/completions", b.dump(), "application/json");
  expect_error(longp, 400, "prompt");
  EXPECT_EQ(Json::parse(longp->body)["error"]["code"], "context_length_exceeded");
  // OpenAI's and vLLM's wording, which clients match to recognise an overflow.
  EXPECT_NE(Json::parse(longp->body)["error"]["message"].get<std::string>().find(
                "This model's maximum context length is 4096 tokens. However, your request has "
                "5000 input tokens"),
            std::string::npos)
      << longp->body;
  b = completion_body(Ids(4000, 7), 200, false);
  auto over = c.Post("/v1/completions", b.dump(), "application/json");
  expect_error(over, 400, "max_tokens");
  EXPECT_NE(Json::parse(over->body)["error"]["message"].get<std::string>().find(
                "maximum context length is 4096 tokens. However, you requested 4200 tokens (4000 "
                "in the prompt, 200 in the completion"),
            std::string::npos)
      << over->body;
  b = {{"prompt", "text needs a tokenizer"}};
  expect_error(c.Post("/v1/completions", b.dump(), "application/json"), 400, "prompt");
  b = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  expect_error(c.Post("/v1/chat/completions", b.dump(), "application/json"), 400, "messages");
  s.stop();
}

TEST(Server, FullQueueAnswers503) {
  ServerOptions o;
  o.max_queue = 1;
  Running s(o, /*max_num_seqs=*/1);
  std::mt19937_64 rng(4);
  // A runs long; B waits behind it (max_num_seqs 1); C finds the queue full.
  std::atomic<int> stop_after{1 << 30};
  auto stream_until_told = [&](const Ids& prompt, std::atomic<bool>& started) {
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = completion_body(prompt, 3000, true).dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
      started = true;
      return stop_after.load() > 0;
    };
    auto c = s.client();
    (void)c.send(req);
  };
  std::atomic<bool> a_started{false}, b_started{false};
  std::thread a([&] { stream_until_told(random_prompt(rng, 10), a_started); });
  while (!a_started) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::thread b([&] { stream_until_told(random_prompt(rng, 10), b_started); });
  bool waiting = false;
  for (int i = 0; i < 2000 && !waiting; ++i) {
    waiting = metrics_of(s)["kvattn_num_requests_waiting"] == 1;
    if (!waiting) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(waiting);
  auto r = s.client().Post("/v1/completions", completion_body({5}, 2, false).dump(),
                           "application/json");
  expect_error(r, 503);
  EXPECT_EQ(Json::parse(r->body)["error"]["code"], "queue_full");
  stop_after = 0;  // both clients hang up
  a.join();
  b.join();
  EXPECT_TRUE(pool_idle(s));
  s.stop();
}

// 1,000 random malformed bodies over HTTP: each a 400 with OpenAI's body; the server keeps
// serving and holds no block afterwards.
TEST(Server, RandomMalformedBodies) {
  Running s;
  auto c = s.client();
  const std::vector<std::string> valid = {
      completion_body({5, 6, 7}, 3, false).dump(),
      R"({"model": "tiny", "prompt": [[1, 2], [3]], "n": 2, "max_tokens": 2, "stream": true})",
      R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})"};
  const std::vector<std::string> junk = {"\xff\xfe", "\xc3", "\xed\xa0\x80", "1e999", "-1",
                                         "null", "\"", "{", "]", "99999999999999999999999",
                                         "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[", "\"\\ud800\"",
                                         "true", "{\"a\":"};
  std::mt19937_64 rng(5);
  int bad = 0;
  for (int i = 0; i < 1000; ++i) {
    std::string body = valid[rng() % valid.size()];
    for (int k = 0, n = 1 + static_cast<int>(rng() % 3); k < n && !body.empty(); ++k) {
      const size_t at = rng() % body.size();
      switch (rng() % 4) {
        case 0: body.resize(at); break;
        case 1: body[at] = static_cast<char>(rng() & 0xff); break;
        case 2: body.insert(at, junk[rng() % junk.size()]); break;
        default: body.erase(at, 1 + rng() % 6); break;
      }
    }
    const char* path = body.find("messages") != std::string::npos ? "/v1/chat/completions"
                                                                   : "/v1/completions";
    auto r = c.Post(path, body, "application/json");
    ASSERT_TRUE(r) << "request " << i << " got no response";
    if (r->status == 200) continue;  // an edit that kept the body valid
    ++bad;
    ASSERT_TRUE(r->status == 400 || r->status == 404) << r->status << " " << r->body;
    const Json j = Json::parse(r->body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << r->body;
  }
  EXPECT_GT(bad, 500);
  ASSERT_TRUE(pool_idle(s));
  auto ok = c.Post("/v1/completions", valid[0], "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  s.stop();
}

TEST(Server, ShutdownEndsStreamsWithAnErrorChunk) {
  Running s;
  std::atomic<int> chunks{0};
  std::string got;
  std::thread client([&] {
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = completion_body(Ids(100, 9), 3900, true).dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
      got.append(d, n);
      ++chunks;
      return true;
    };
    auto c = s.client();
    (void)c.send(req);
  });
  while (chunks < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  s.stop();  // checks the pool is idle
  client.join();
  const auto data = sse_data(got);
  ASSERT_GE(data.size(), 2u);
  EXPECT_EQ(data.back(), "[DONE]");
  const Json last = Json::parse(data[data.size() - 2]);
  ASSERT_TRUE(last.contains("error")) << data[data.size() - 2];
  EXPECT_EQ(last["error"]["code"], nullptr);
  EXPECT_NE(last["error"]["message"].get<std::string>().find("shutting down"), std::string::npos);
}

}  // namespace
}  // namespace kvattn::server
