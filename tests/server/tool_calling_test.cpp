// Tool calling end to end through the in-process server: the tiny Qwen3 checkpoint with a
// byte-level tokenizer whose chat template is a family's published one (Qwen2.5, Llama 3.1,
// Mistral v0.3), the output forced by guided_regex to what a tool-trained model writes, and
// tool_choice "auto": the family's parser must turn it into tool_calls, whole and streamed,
// for every choice of n = 2.
#include <gtest/gtest.h>
#include <httplib.h>

#include <memory>
#include <regex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "kvattn/engine/llm.h"
#include "kvattn/engine/weights.h"
#include "kvattn/server/server.h"
#include "engine/tokenizer/utf8.h"

namespace kvattn::server {
namespace {

#include "engine/chat_tools_test_data.inc"

using Json = nlohmann::json;

const char* source_of(std::string_view name) {
  for (const ToolTemplate& t : kToolTemplates) {
    if (name == t.name) return t.source;
  }
  ADD_FAILURE() << "no template " << name;
  return "";
}

// A byte-level BPE tokenizer (ids 0-255) whose added tokens are the family's markers.
Tokenizer tokenizer_for(const std::string& tmpl, const std::vector<std::string>& added,
                        const std::string& bos, const std::string& eos) {
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) vocab[tokenizer_detail::byte_to_unicode()[b]] = b;
  Json adds = Json::array();
  for (size_t i = 0; i < added.size(); ++i) {
    adds.push_back({{"id", 256 + i}, {"content", added[i]}, {"special", true}});
  }
  const Json tj = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", Json::array()}}},
                   {"added_tokens", adds},
                   {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}}};
  Json cfg = {{"eos_token", eos}, {"chat_template", source_of(tmpl)}};
  if (!bos.empty()) cfg["bos_token"] = bos;
  return Tokenizer::from_hf_json_text(tj.dump(), cfg.dump(), tmpl + ".json");
}

class Served {
 public:
  explicit Served(Tokenizer tok) {
    LLMOptions o;
    o.kv_cache_bytes = 512 * 32768;
    o.max_num_seqs = 8;
    o.max_num_batched_tokens = 4096;
    o.num_threads = 1;
    llm_ = std::make_unique<LLM>(
        load_hf_model(std::string(KVATTN_SOURCE_DIR) + "/tests/data/tiny_qwen3"), std::move(tok), o);
    ServerOptions so;
    so.port = 0;
    so.model_name = "tiny";
    srv_ = std::make_unique<Server>(*llm_, so);
    port_ = srv_->bind();
    thread_ = std::thread([this] { srv_->run(); });
  }
  ~Served() {
    srv_->shutdown();
    thread_.join();
    llm_->check_kv_cache_idle();
  }
  httplib::Result post(const Json& body) const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(120, 0);
    return c.Post("/v1/chat/completions", body.dump(), "application/json");
  }

 private:
  std::unique_ptr<LLM> llm_;
  std::unique_ptr<Server> srv_;
  int port_ = 0;
  std::thread thread_;
};

std::string regex_literal(const std::string& s) {
  std::string out;
  for (const char c : s) {
    if (std::string_view(".^$*+?()[]{}|\\").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

const Json kTools = Json::parse(R"([
  {"type": "function", "function": {"name": "add", "description": "Add two integers",
   "parameters": {"type": "object", "properties": {"a": {"type": "integer"},
                  "b": {"type": "integer"}}, "required": ["a", "b"]}}},
  {"type": "function", "function": {"name": "now", "parameters": {"type": "object",
                                                                   "properties": {}}}}])");

struct Family {
  const char* tmpl;
  std::vector<std::string> added;
  const char* bos;
  const char* eos;
  std::string output;   // what the model is made to write
  Json content;         // the message's content: a string or null
  size_t calls;
  const char* id_regex;
};

std::vector<Family> families() {
  return {
      {"qwen2.5", {"<|im_start|>", "<|im_end|>"}, "", "<|im_end|>",
       "Let me add.\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n"
       "</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>",
       "Let me add.", 2, "^chatcmpl-tool-[0-9a-f]{32}$"},
      {"llama3.1",
       {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"},
       "<|begin_of_text|>", "<|eot_id|>",
       "{\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}; {\"name\": \"now\", "
       "\"parameters\": {}}",
       nullptr, 2, "^chatcmpl-tool-[0-9a-f]{32}$"},
      {"mistral-v3", {"<s>", "</s>", "[INST]", "[/INST]"}, "<s>", "</s>",
       "[TOOL_CALLS] [{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}, {\"name\": "
       "\"now\", \"arguments\": {}}]",
       nullptr, 2, "^[0-9a-zA-Z]{9}$"},
  };
}

Json request(const Family& f, bool stream) {
  return {{"messages", {{{"role", "user"}, {"content", "Add 1 and 2, and tell the time."}}}},
          {"tools", kTools},
          {"guided_regex", regex_literal(f.output)},
          {"max_tokens", 400},
          {"temperature", 0},
          {"n", 2},
          {"stream", stream}};
}

void expect_calls(const Json& calls, const Family& f) {
  ASSERT_EQ(calls.size(), f.calls) << calls.dump();
  EXPECT_EQ(calls[0]["type"], "function");
  EXPECT_EQ(calls[0]["function"]["name"], "add");
  EXPECT_EQ(Json::parse(calls[0]["function"]["arguments"].get<std::string>()),
            Json::parse(R"({"a": 1, "b": 2})"));
  EXPECT_EQ(calls[1]["function"]["name"], "now");
  EXPECT_EQ(calls[1]["function"]["arguments"], "{}");
  for (const Json& c : calls) {
    EXPECT_TRUE(std::regex_search(c["id"].get<std::string>(), std::regex(f.id_regex))) << c;
  }
}

TEST(ToolCalling, AutoParsesEachFamilyWholeAndStreamed) {
  for (const Family& f : families()) {
    SCOPED_TRACE(f.tmpl);
    Served s(tokenizer_for(f.tmpl, f.added, f.bos, f.eos));
    const httplib::Result r = s.post(request(f, false));
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const Json j = Json::parse(r->body);
    ASSERT_EQ(j["choices"].size(), 2u);
    for (const Json& c : j["choices"]) {
      EXPECT_EQ(c["finish_reason"], "tool_calls") << c;
      EXPECT_EQ(c["message"]["content"], f.content) << c;
      expect_calls(c["message"]["tool_calls"], f);
    }
    // Streamed: content deltas, one delta per call (index counting the choice's calls), the
    // finish reason last.
    const httplib::Result st = s.post(request(f, true));
    ASSERT_TRUE(st);
    ASSERT_EQ(st->status, 200) << st->body;
    std::vector<std::string> content(2);
    std::vector<Json> calls(2, Json::array());
    std::vector<std::string> finish(2);
    for (size_t pos = 0; (pos = st->body.find("data: ", pos)) != std::string::npos;) {
      const size_t end = st->body.find("\n\n", pos);
      const std::string data = st->body.substr(pos + 6, end - pos - 6);
      pos = end;
      if (data == "[DONE]") break;
      const Json chunk = Json::parse(data);
      for (const Json& c : chunk["choices"]) {
        const size_t i = c["index"];
        EXPECT_TRUE(finish[i].empty()) << "a chunk after the finish: " << data;
        const Json& d = c["delta"];
        if (d.contains("content")) content[i] += d["content"].get<std::string>();
        if (d.contains("tool_calls")) {
          ASSERT_EQ(d["tool_calls"].size(), 1u);
          EXPECT_EQ(d["tool_calls"][0]["index"], calls[i].size());
          calls[i].push_back(d["tool_calls"][0]);
        }
        if (!c["finish_reason"].is_null()) finish[i] = c["finish_reason"];
      }
    }
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(finish[i], "tool_calls");
      EXPECT_EQ(content[i], f.content.is_null() ? "" : f.content.get<std::string>());
      expect_calls(calls[i], f);
    }
  }
}

TEST(ToolCalling, ParallelFalseKeepsTheFirstCallAndNoneKeepsText) {
  const Family f = families()[0];
  Served s(tokenizer_for(f.tmpl, f.added, f.bos, f.eos));
  Json body = request(f, false);
  body["parallel_tool_calls"] = false;
  Json j = Json::parse(s.post(body)->body);
  EXPECT_EQ(j["choices"][0]["message"]["tool_calls"].size(), 1u) << j;
  body["tool_choice"] = "none";  // the text is the answer
  j = Json::parse(s.post(body)->body);
  EXPECT_EQ(j["choices"][0]["message"]["content"], f.output);
  EXPECT_FALSE(j["choices"][0]["message"].contains("tool_calls"));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  // A history with calls and results renders (Qwen's <tool_response> turns) and is answered.
  body = request(f, false);
  body["messages"] = Json::parse(R"([
    {"role": "user", "content": "Add 1 and 2."},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "abc", "type": "function",
      "function": {"name": "add", "arguments": "{\"a\": 1, \"b\": 2}"}}]},
    {"role": "tool", "tool_call_id": "abc", "content": "3"}])");
  const httplib::Result r = s.post(body);
  EXPECT_EQ(r->status, 200) << r->body;
}

}  // namespace
}  // namespace kvattn::server
