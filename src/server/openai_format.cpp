#include "server/openai_format.h"

#include <algorithm>
#include <cmath>

#include "engine/tokenizer/utf8.h"

namespace kvattn::server {
namespace {

using Json = ResponseJson;

// Characters of a token's text as a client sees it (Python's len() of the bytes decoded with
// errors="replace"): a well-formed character, an ill-formed subpart or a cut-off prefix
// counts one.
int64_t text_length(const std::string& s) {
  int64_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) {
    int bad = 1;
    const int len = tokenizer_detail::utf8_char_len(s, i, &bad);
    if (len > 0) {
      i += static_cast<size_t>(len);
    } else if (len < 0) {
      i = s.size();  // a character cut off by the end: one U+FFFD
    } else {
      i += static_cast<size_t>(std::max(bad, 1));
    }
  }
  return n;
}

Json head(const ResponseMeta& m, const char* object) {
  return {{"id", m.id}, {"object", object}, {"created", m.created}, {"model", m.model}};
}

bool chat(const ResponseMeta& m) { return m.endpoint == Endpoint::kChat; }

Json tool_call_json(const ToolCallOut& t) {
  return {{"id", t.id},
          {"type", "function"},
          {"function", {{"name", t.name}, {"arguments", t.arguments}}}};
}

// JSON has no infinity: OpenAI and vLLM send -9999.0 for a token of probability 0. NaN (a
// broken row) stays null.
Json logprob_value(float lp) {
  if (std::isnan(lp)) return nullptr;
  return std::max(static_cast<double>(lp), -9999.0);
}

Json byte_list(const std::string& s) {
  Json b = Json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

}  // namespace

std::string LogprobsFormat::token(int32_t id) const {
  if (tokenizer != nullptr && id >= 0 && id < tokenizer->vocab_size()) {
    return tokenizer->token_bytes(id);
  }
  return "token_id:" + std::to_string(id);
}

Json chat_logprobs(const LogprobsFormat& f, const std::vector<int32_t>& ids,
                   const std::vector<TokenLogprobs>& lps) {
  Json content = Json::array();
  for (size_t i = 0; i < ids.size() && i < lps.size(); ++i) {
    Json top = Json::array();
    for (const TokenLogprob& t : lps[i].top) {
      const std::string s = f.token(t.token);
      top.push_back({{"token", s}, {"logprob", logprob_value(t.logprob)}, {"bytes", byte_list(s)}});
    }
    const std::string s = f.token(ids[i]);
    content.push_back({{"token", s},
                       {"logprob", logprob_value(lps[i].logprob)},
                       {"bytes", byte_list(s)},
                       {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}, {"refusal", nullptr}};
}

Json completion_logprobs(const LogprobsFormat& f, const std::vector<int32_t>& ids,
                         const std::vector<TokenLogprobs>& lps, int64_t& offset) {
  Json tokens = Json::array(), token_lps = Json::array(), tops = Json::array(),
       offsets = Json::array();
  for (size_t i = 0; i < ids.size() && i < lps.size(); ++i) {
    const std::string s = f.token(ids[i]);
    tokens.push_back(s);
    token_lps.push_back(logprob_value(lps[i].logprob));
    Json top = Json::object();
    for (const TokenLogprob& t : lps[i].top) top[f.token(t.token)] = logprob_value(t.logprob);
    top[s] = logprob_value(lps[i].logprob);  // the chosen token is always listed (vLLM)
    tops.push_back(std::move(top));
    offsets.push_back(offset);
    offset += text_length(s);
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_lps)},
          {"top_logprobs", std::move(tops)},
          {"text_offset", std::move(offsets)}};
}

Json echo_completion_logprobs(const LogprobsFormat& f, const ChoiceResult& c) {
  Json tokens = Json::array(), token_lps = Json::array(), tops = Json::array(),
       offsets = Json::array();
  int64_t offset = 0;
  for (size_t j = 0; j < c.prompt_ids.size(); ++j) {
    const std::string s = f.token(c.prompt_ids[j]);
    tokens.push_back(s);
    offsets.push_back(offset);
    offset += text_length(s);
    if (j == 0 || j - 1 >= c.prompt_logprobs.size()) {
      token_lps.push_back(nullptr);
      tops.push_back(nullptr);
      continue;
    }
    const TokenLogprobs& lp = c.prompt_logprobs[j - 1];
    token_lps.push_back(logprob_value(lp.logprob));
    Json top = Json::object();
    for (const TokenLogprob& t : lp.top) top[f.token(t.token)] = logprob_value(t.logprob);
    top[s] = logprob_value(lp.logprob);  // the prompt's token is always listed (vLLM)
    tops.push_back(std::move(top));
  }
  Json gen = completion_logprobs(f, c.token_ids, c.logprobs, offset);
  for (Json& x : gen["tokens"]) tokens.push_back(std::move(x));
  for (Json& x : gen["token_logprobs"]) token_lps.push_back(std::move(x));
  for (Json& x : gen["top_logprobs"]) tops.push_back(std::move(x));
  for (Json& x : gen["text_offset"]) offsets.push_back(std::move(x));
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_lps)},
          {"top_logprobs", std::move(tops)},
          {"text_offset", std::move(offsets)}};
}

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }
std::string dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string sse(const Json& j) { return "data: " + dump(j) + "\n\n"; }
std::string sse(const nlohmann::json& j) { return "data: " + dump(j) + "\n\n"; }

Json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

Json full_response(const ResponseMeta& m, const std::vector<ChoiceResult>& choices,
                   const Usage& u, bool with_token_ids, const LogprobsFormat* logprobs) {
  Json r = head(m, chat(m) ? "chat.completion" : "text_completion");
  Json list = Json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    Json c = {{"index", i}};
    if (chat(m)) {
      const ChoiceResult& ch = choices[i];
      c["message"] = {{"role", "assistant"},
                      {"content", ch.text.empty() && !ch.tool_calls.empty() ? Json(nullptr)
                                                                            : Json(ch.text)}};
      if (!ch.tool_calls.empty()) {
        Json calls = Json::array();
        for (const ToolCallOut& t : ch.tool_calls) calls.push_back(tool_call_json(t));
        c["message"]["tool_calls"] = std::move(calls);
      }
    } else {
      c["text"] = choices[i].echoed() ? choices[i].prompt_text + choices[i].text : choices[i].text;
    }
    if (with_token_ids) c["token_ids"] = choices[i].token_ids;
    if (logprobs == nullptr) {
      c["logprobs"] = nullptr;
    } else if (chat(m)) {
      c["logprobs"] = chat_logprobs(*logprobs, choices[i].token_ids, choices[i].logprobs);
    } else if (choices[i].echoed()) {
      c["logprobs"] = echo_completion_logprobs(*logprobs, choices[i]);
    } else {
      int64_t offset = 0;
      c["logprobs"] =
          completion_logprobs(*logprobs, choices[i].token_ids, choices[i].logprobs, offset);
    }
    c["finish_reason"] = choices[i].finish_name ? Json(*choices[i].finish_name)
                                                : Json(finish_reason_name(choices[i].finish_reason));
    list.push_back(std::move(c));
  }
  r["choices"] = std::move(list);
  r["usage"] = usage_json(u);
  return r;
}

Json stream_chunk(const ResponseMeta& m, uint32_t choice, const std::string& text,
                  std::optional<FinishReason> finish, bool include_usage,
                  const std::vector<int32_t>* token_ids, const Json* logprobs) {
  Json r = head(m, chat(m) ? "chat.completion.chunk" : "text_completion");
  Json c = {{"index", choice}};
  if (chat(m)) {
    c["delta"] = text.empty() ? Json::object() : Json{{"content", text}};
  } else {
    c["text"] = text;
  }
  if (token_ids != nullptr) c["token_ids"] = *token_ids;
  c["logprobs"] = logprobs != nullptr ? *logprobs : Json(nullptr);
  c["finish_reason"] = finish ? Json(finish_reason_name(*finish)) : Json(nullptr);
  r["choices"] = Json::array({std::move(c)});
  if (include_usage) r["usage"] = nullptr;
  return r;
}

Json role_chunk(const ResponseMeta& m, uint32_t choice, bool include_usage) {
  Json r = head(m, "chat.completion.chunk");
  r["choices"] = Json::array({{{"index", choice},
                               {"delta", {{"role", "assistant"}, {"content", ""}}},
                               {"logprobs", nullptr},
                               {"finish_reason", nullptr}}});
  if (include_usage) r["usage"] = nullptr;
  return r;
}

Json tool_call_chunk(const ResponseMeta& m, uint32_t choice, size_t index,
                     const ToolCallOut& call, bool include_usage) {
  Json r = head(m, "chat.completion.chunk");
  Json t = {{"index", index},  // OpenAI's order: index first
            {"id", call.id},
            {"type", "function"},
            {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
  r["choices"] = Json::array({{{"index", choice},
                               {"delta", {{"tool_calls", Json::array({std::move(t)})}}},
                               {"logprobs", nullptr},
                               {"finish_reason", nullptr}}});
  if (include_usage) r["usage"] = nullptr;
  return r;
}

Json finish_chunk(const ResponseMeta& m, uint32_t choice, const std::string& reason,
                  bool include_usage) {
  Json r = stream_chunk(m, choice, "", std::nullopt, include_usage);
  r["choices"][0]["finish_reason"] = reason;
  return r;
}

Json usage_chunk(const ResponseMeta& m, const Usage& u) {
  Json r = head(m, chat(m) ? "chat.completion.chunk" : "text_completion");
  r["choices"] = Json::array();
  r["usage"] = usage_json(u);
  return r;
}

}  // namespace kvattn::server
