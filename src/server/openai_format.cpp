#include "server/openai_format.h"

namespace kvattn::server {
namespace {

using Json = nlohmann::json;

Json head(const ResponseMeta& m, const char* object) {
  return {{"id", m.id}, {"object", object}, {"created", m.created}, {"model", m.model}};
}

bool chat(const ResponseMeta& m) { return m.endpoint == Endpoint::kChat; }

}  // namespace

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string sse(const Json& j) { return "data: " + dump(j) + "\n\n"; }

Json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

Json full_response(const ResponseMeta& m, const std::vector<ChoiceResult>& choices,
                   const Usage& u, bool with_token_ids) {
  Json r = head(m, chat(m) ? "chat.completion" : "text_completion");
  Json list = Json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    Json c = {{"index", i}};
    if (chat(m)) {
      c["message"] = {{"role", "assistant"}, {"content", choices[i].text}};
    } else {
      c["text"] = choices[i].text;
    }
    if (with_token_ids) c["token_ids"] = choices[i].token_ids;
    c["logprobs"] = nullptr;
    c["finish_reason"] = finish_reason_name(choices[i].finish_reason);
    list.push_back(std::move(c));
  }
  r["choices"] = std::move(list);
  r["usage"] = usage_json(u);
  return r;
}

Json stream_chunk(const ResponseMeta& m, uint32_t choice, const std::string& text,
                  std::optional<FinishReason> finish, bool include_usage,
                  const std::vector<int32_t>* token_ids) {
  Json r = head(m, chat(m) ? "chat.completion.chunk" : "text_completion");
  Json c = {{"index", choice}};
  if (chat(m)) {
    c["delta"] = text.empty() ? Json::object() : Json{{"content", text}};
  } else {
    c["text"] = text;
  }
  if (token_ids != nullptr) c["token_ids"] = *token_ids;
  c["logprobs"] = nullptr;
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

Json usage_chunk(const ResponseMeta& m, const Usage& u) {
  Json r = head(m, chat(m) ? "chat.completion.chunk" : "text_completion");
  r["choices"] = Json::array();
  r["usage"] = usage_json(u);
  return r;
}

}  // namespace kvattn::server
