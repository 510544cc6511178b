// POST /tokenize and /detokenize (vLLM's): the model's tokenizer over HTTP, so a client can
// count and build prompts in this model's ids without a tokenizer of its own. The engine is
// not involved; a model without a tokenizer answers 400.
#include <httplib.h>

#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/openai_format.h"
#include "server/server_context.h"

namespace kvattn::server {
namespace {

const Tokenizer& tokenizer_of(const ServerContext& ctx, const std::string& model) {
  ctx.check_model(model);
  if (ctx.llm.tokenizer() == nullptr) {
    throw ApiError(400, "this model has no tokenizer", "", "invalid_request_error");
  }
  return *ctx.llm.tokenizer();
}

}  // namespace

void handle_tokenize(ServerContext& ctx, std::string_view body, httplib::Response& res) {
  const TokenizeRequest r = parse_tokenize(body);
  const Tokenizer& tok = tokenizer_of(ctx, r.model);
  if (r.chat() && !tok.chat_template()) {
    throw ApiError(400, "this model has no chat template", "messages", "invalid_value");
  }
  // As the completion endpoints encode (prompt_builder.cpp): LLM::encode adds the model's BOS.
  const std::string text =
      r.chat() ? tok.apply_chat_template(r.messages, r.add_generation_prompt, r.enable_thinking,
                                         r.tools_json)
               : r.prompt;
  const std::vector<int32_t> ids = r.add_special_tokens ? ctx.llm.encode(text) : tok.encode(text);
  const nlohmann::json out = {{"count", ids.size()},
                              {"max_model_len", ctx.llm.max_model_len()},
                              {"tokens", ids}};
  res.set_content(dump(out), "application/json");
}

void handle_detokenize(ServerContext& ctx, std::string_view body, httplib::Response& res) {
  const DetokenizeRequest r = parse_detokenize(body);
  const Tokenizer& tok = tokenizer_of(ctx, r.model);
  for (size_t i = 0; i < r.tokens.size(); ++i) {
    if (r.tokens[i] >= tok.vocab_size()) {
      throw ApiError(400, "tokens[" + std::to_string(i) + "] is " + std::to_string(r.tokens[i]) +
                              ", outside the vocabulary [0, " + std::to_string(tok.vocab_size()) +
                              ")",
                     "tokens", "invalid_value");
    }
  }
  res.set_content(dump(nlohmann::json{{"prompt", tok.decode(r.tokens)}}), "application/json");
}

}  // namespace kvattn::server
