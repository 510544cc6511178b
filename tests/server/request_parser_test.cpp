// The request parser on its own: every accepted field lands in ParsedRequest, every bad field
// is a 400 ApiError naming it, and random malformed bodies (truncations, wrong types, huge
// numbers, invalid UTF-8, deep nesting, random bytes) only ever produce ApiError.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>

#include "server/api_error.h"
#include "server/request_parser.h"

namespace kvattn::server {
namespace {

using Json = nlohmann::json;

ParsedRequest parse(const std::string& body, Endpoint e = Endpoint::kCompletions) {
  return parse_request(body, e);
}

// The ApiError a body raises (fails the test when it parses).
// What parse(body) throws (a failure when it throws nothing).
ApiError error_from(auto&& parse, const std::string& body) {
  try {
    parse(body);
  } catch (const ApiError& err) {
    return err;
  }
  ADD_FAILURE() << "expected an error for " << body;
  return ApiError(0, "");
}

ApiError error_of(const std::string& body, Endpoint e = Endpoint::kCompletions) {
  return error_from([e](const std::string& b) { parse_request(b, e); }, body);
}

TEST(RequestParser, CompletionFields) {
  const ParsedRequest r = parse(R"({"model": "m", "prompt": "hi", "max_tokens": 7,
      "temperature": 0.5, "top_p": 0.9, "top_k": 40, "min_p": 0.1, "seed": -3,
      "stop": ["a", "bc"], "n": 2, "stream": true, "stream_options": {"include_usage": true},
      "ignore_eos": true, "user": "u", "presence_penalty": 0, "logprobs": null, "echo": false,
      "best_of": 2})");
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.text_prompts.size(), 1u);
  EXPECT_EQ(r.text_prompts[0], "hi");
  EXPECT_TRUE(r.id_prompts.empty());
  EXPECT_EQ(r.params.max_tokens, 7);
  EXPECT_TRUE(r.max_tokens_given);
  EXPECT_FLOAT_EQ(r.params.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.params.top_p, 0.9f);
  EXPECT_EQ(r.params.top_k, 40);
  EXPECT_FLOAT_EQ(r.params.min_p, 0.1f);
  EXPECT_EQ(r.params.seed, static_cast<uint64_t>(int64_t{-3}));
  EXPECT_TRUE(r.seed_given);
  EXPECT_EQ(r.params.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_EQ(r.params.n, 2);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_TRUE(r.params.ignore_eos);
}

TEST(RequestParser, Defaults) {
  const ParsedRequest r = parse(R"({"prompt": [1, 2, 3]})");
  EXPECT_EQ(r.id_prompts, (std::vector<std::vector<int32_t>>{{1, 2, 3}}));
  EXPECT_EQ(r.params.max_tokens, 16);  // OpenAI's completions default
  EXPECT_FALSE(r.max_tokens_given);
  EXPECT_FLOAT_EQ(r.params.temperature, 1.0f);
  EXPECT_FALSE(r.seed_given);
  EXPECT_FALSE(r.stream);
  EXPECT_EQ(r.params.n, 1);
  EXPECT_EQ(parse(R"({"prompt": "x", "top_k": -1})").params.top_k, 0);
}

TEST(RequestParser, PromptForms) {
  EXPECT_EQ(parse(R"({"prompt": ["a", "b"]})").text_prompts.size(), 2u);
  EXPECT_EQ(parse(R"({"prompt": [[1], [2, 3]]})").id_prompts,
            (std::vector<std::vector<int32_t>>{{1}, {2, 3}}));
  EXPECT_EQ(error_of(R"({"prompt": []})").param(), "prompt");
  EXPECT_EQ(error_of(R"({"prompt": ["a", [1]]})").param(), "prompt");
  EXPECT_EQ(error_of(R"({"prompt": [1, "a"]})").param(), "prompt");
  EXPECT_EQ(error_of(R"({"prompt": [-1]})").param(), "prompt");
  EXPECT_EQ(error_of(R"({"prompt": [4294967296]})").param(), "prompt");
  EXPECT_EQ(error_of(R"({"prompt": [1.5]})").param(), "prompt");
  EXPECT_EQ(error_of(R"({"prompt": 5})").param(), "prompt");
  EXPECT_EQ(error_of(R"({"prompt": [[]]})").param(), "prompt");
  std::string many = R"({"prompt": [)";
  for (int i = 0; i < 65; ++i) many += std::string(i ? "," : "") + "\"p\"";
  EXPECT_EQ(error_of(many + "]}").param(), "prompt");
  EXPECT_EQ(error_of(R"({"max_tokens": 3})").code(), "missing_required_parameter");
}

TEST(RequestParser, ChatMessages) {
  const ParsedRequest r = parse(R"({"messages": [
      {"role": "developer", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "hel"}, {"type": "text", "text": "lo"}]},
      {"role": "assistant", "content": null, "name": "bot"},
      {"role": "user", "content": "again"}], "max_completion_tokens": 5})",
                                Endpoint::kChat);
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].content, "hel\nlo");  // parts joined by newlines (vLLM)
  EXPECT_EQ(r.messages[2].content, "");
  EXPECT_EQ(r.params.max_tokens, 5);
  EXPECT_EQ(r.params.max_tokens, 5);
  for (const char* bad : {R"({"messages": []})", R"({"messages": "hi"})",
                          R"({"messages": [{"role": "tool", "content": "x"}]})",
                          R"({"messages": [{"role": "user"}]})",
                          R"({"messages": [{"content": "x"}]})",
                          R"({"messages": [{"role": "user", "content": 3}]})",
                          R"({"messages": [{"role": "user", "content": null}]})",
                          R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
                          R"({"messages": [{"role": "user", "content": "x", "tool_calls": [{"id": "1"}]}]})",
                          R"({"messages": [{"role": "assistant", "content": "x", "function_call": {}}]})",
                          R"({"messages": [{"role": "assistant", "content": "x", "refusal": 3}]})",
                          R"({"messages": [{"role": "user", "content": "x", "weights": 1}]})",
                          R"({"messages": [7]})"}) {
    const ApiError e = error_of(bad, Endpoint::kChat);
    EXPECT_EQ(e.status(), 400) << bad;
    EXPECT_EQ(e.param(), "messages") << bad;
  }
  // A response's message sent back as history (the openai client's model_dump(), vLLM's
  // reasoning_content): its empty and null fields, a refusal or reasoning text are taken.
  const ParsedRequest h = parse(R"({"messages": [
      {"role": "user", "content": "hi"},
      {"role": "assistant", "content": "hello", "refusal": null, "tool_calls": [],
       "function_call": null, "audio": null, "annotations": [], "reasoning_content": "think"},
      {"role": "assistant", "content": "no", "refusal": "I can't", "tool_calls": null,
       "reasoning": null, "annotations": null},
      {"role": "user", "content": "again"}]})",
                                Endpoint::kChat);
  ASSERT_EQ(h.messages.size(), 4u);
  EXPECT_EQ(h.messages[1].content, "hello");
  EXPECT_EQ(h.messages[2].content, "no");
  // Fields of the other endpoint are unknown here.
  EXPECT_EQ(error_of(R"({"messages": [{"role": "user", "content": "x"}], "prompt": "p"})",
                     Endpoint::kChat)
                .code(),
            "unknown_parameter");
  EXPECT_EQ(error_of(R"({"prompt": "p", "messages": []})").code(), "unknown_parameter");
}

TEST(RequestParser, Penalties) {
  const ParsedRequest r = parse(R"({"prompt": "x", "presence_penalty": 0.5,
      "frequency_penalty": -1.25, "repetition_penalty": 1.1})");
  EXPECT_FLOAT_EQ(r.params.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.params.frequency_penalty, -1.25f);
  EXPECT_FLOAT_EQ(r.params.repetition_penalty, 1.1f);
  const ParsedRequest d = parse(R"({"prompt": "x", "presence_penalty": 0})");
  EXPECT_FALSE(d.params.has_penalties());
  const ParsedRequest b = parse(R"({"prompt": "x", "logit_bias": {"7": -100, "12": 2.5}})");
  auto bias = b.params.logit_bias;
  std::sort(bias.begin(), bias.end());
  EXPECT_EQ(bias, (std::vector<std::pair<int32_t, float>>{{7, -100.0f}, {12, 2.5f}}));
  EXPECT_TRUE(parse(R"({"prompt": "x", "logit_bias": {}})").params.logit_bias.empty());
}

// Log-probabilities: completions take a count (the legacy API), chat a bool plus
// top_logprobs; both become SamplingParams::logprobs (-1: none).
TEST(RequestParser, Logprobs) {
  EXPECT_EQ(parse(R"({"prompt": "x"})").params.logprobs, -1);
  EXPECT_EQ(parse(R"({"prompt": "x", "logprobs": null})").params.logprobs, -1);
  EXPECT_EQ(parse(R"({"prompt": "x", "logprobs": 0})").params.logprobs, 0);
  EXPECT_EQ(parse(R"({"prompt": "x", "logprobs": 20})").params.logprobs, 20);
  const std::string m = R"("messages": [{"role": "user", "content": "x"}])";
  auto chat = [&](const std::string& extra) {
    return parse("{" + m + extra + "}", Endpoint::kChat).params.logprobs;
  };
  EXPECT_EQ(chat(""), -1);
  EXPECT_EQ(chat(R"(, "logprobs": false)"), -1);
  EXPECT_EQ(chat(R"(, "logprobs": true)"), 0);
  EXPECT_EQ(chat(R"(, "logprobs": true, "top_logprobs": 5)"), 5);
  EXPECT_EQ(chat(R"(, "logprobs": false, "top_logprobs": 0)"), -1);
  for (const std::string bad : {R"(, "top_logprobs": 3)", R"(, "logprobs": false, "top_logprobs": 2)",
                                R"(, "logprobs": true, "top_logprobs": 21)",
                                R"(, "logprobs": 2)"}) {
    const ApiError e = error_of("{" + m + bad + "}", Endpoint::kChat);
    EXPECT_EQ(e.status(), 400) << bad;
    EXPECT_TRUE(e.param() == "top_logprobs" || e.param() == "logprobs") << bad << ": " << e.param();
  }
}

// vLLM's /tokenize and /detokenize bodies.
TEST(RequestParser, TokenizeAndDetokenize) {
  const TokenizeRequest t = parse_tokenize(R"({"prompt": "hi there", "model": "m"})");
  EXPECT_FALSE(t.chat());
  EXPECT_EQ(t.prompt, "hi there");
  EXPECT_EQ(t.model, "m");
  EXPECT_TRUE(t.add_special_tokens);
  const TokenizeRequest c = parse_tokenize(
      R"({"messages": [{"role": "user", "content": "x"}], "add_generation_prompt": false,
          "add_special_tokens": false})");
  EXPECT_TRUE(c.chat());
  ASSERT_EQ(c.messages.size(), 1u);
  EXPECT_FALSE(c.add_generation_prompt);
  EXPECT_FALSE(c.add_special_tokens);
  EXPECT_EQ(parse_detokenize(R"({"tokens": [3, 1, 4]})").tokens, (std::vector<int32_t>{3, 1, 4}));
  EXPECT_TRUE(parse_detokenize(R"({"tokens": []})").tokens.empty());
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"({})", "prompt"},
      {R"({"prompt": "x", "messages": [{"role": "user", "content": "x"}]})", "messages"},
      {R"({"prompt": 5})", "prompt"},
      {R"({"prompt": "x", "add_special_tokens": 1})", "add_special_tokens"},
      {R"({"prompt": "x", "temperature": 1})", "temperature"},
      {R"({"messages": []})", "messages"}};
  for (const auto& [body, param] : bad) {
    const ApiError e = error_from([](const std::string& b) { parse_tokenize(b); }, body);
    EXPECT_EQ(e.status(), 400) << body;
    EXPECT_EQ(e.param(), param) << body;
  }
  for (const auto& [body, param] : std::vector<std::pair<std::string, std::string>>{
           {R"({})", "tokens"}, {R"({"tokens": 5})", "tokens"}, {R"({"tokens": [-1]})", "tokens"},
           {R"({"tokens": [1], "prompt": "x"})", "prompt"}, {R"([1, 2])", ""}}) {
    const ApiError e = error_from([](const std::string& b) { parse_detokenize(b); }, body);
    EXPECT_EQ(e.status(), 400) << body;
    EXPECT_EQ(e.param(), param) << body;
  }
}

// vLLM's stop_token_ids reach SamplingParams as given (both endpoints).
TEST(RequestParser, StopTokenIds) {
  EXPECT_TRUE(parse(R"({"prompt": "x"})").params.stop_token_ids.empty());
  EXPECT_EQ(parse(R"({"prompt": "x", "stop_token_ids": [7, 3]})").params.stop_token_ids,
            (std::vector<int32_t>{7, 3}));
  EXPECT_TRUE(parse(R"({"prompt": "x", "stop_token_ids": []})").params.stop_token_ids.empty());
  EXPECT_EQ(parse(R"({"prompt": "x", "min_tokens": 4})").params.min_tokens, 4);
  EXPECT_EQ(parse(R"({"prompt": "x"})").params.min_tokens, 0);
  EXPECT_EQ(parse(R"({"messages": [{"role": "user", "content": "x"}], "stop_token_ids": [9]})",
                  Endpoint::kChat)
                .params.stop_token_ids,
            (std::vector<int32_t>{9}));
}

// vLLM's allowed_token_ids and truncate_prompt_tokens (both endpoints).
TEST(RequestParser, AllowedTokenIdsAndTruncation) {
  EXPECT_TRUE(parse(R"({"prompt": "x"})").params.allowed_token_ids.empty());
  EXPECT_EQ(parse(R"({"prompt": "x", "allowed_token_ids": [7, 3, 7]})").params.allowed_token_ids,
            (std::vector<int32_t>{7, 3, 7}));
  EXPECT_FALSE(parse(R"({"prompt": "x"})").truncate_prompt_tokens.has_value());
  EXPECT_EQ(parse(R"({"prompt": "x", "truncate_prompt_tokens": 5})").truncate_prompt_tokens, 5);
  EXPECT_EQ(parse(R"({"prompt": "x", "truncate_prompt_tokens": -1})").truncate_prompt_tokens, -1);
  EXPECT_EQ(parse(R"({"prompt": "x", "bad_words": ["Paris", " the end"]})").bad_words,
            (std::vector<std::string>{"Paris", " the end"}));
  const ParsedRequest chat =
      parse(R"({"messages": [{"role": "user", "content": "x"}], "allowed_token_ids": [9],
                "truncate_prompt_tokens": 64})",
            Endpoint::kChat);
  EXPECT_EQ(chat.params.allowed_token_ids, (std::vector<int32_t>{9}));
  EXPECT_EQ(chat.truncate_prompt_tokens, 64);
}

// vLLM's continue_final_message (chat; add_generation_prompt then off, both true refused) and
// request_id (both endpoints).
TEST(RequestParser, ContinueFinalMessageAndRequestId) {
  const char* msgs = R"("messages": [{"role": "user", "content": "x"},
                                      {"role": "assistant", "content": "The"}])";
  const ParsedRequest c =
      parse(std::string("{") + msgs + R"(, "continue_final_message": true})", Endpoint::kChat);
  EXPECT_TRUE(c.continue_final_message);
  EXPECT_FALSE(c.add_generation_prompt);
  EXPECT_TRUE(parse(std::string("{") + msgs + "}", Endpoint::kChat).add_generation_prompt);
  const ParsedRequest off = parse(
      std::string("{") + msgs + R"(, "continue_final_message": true, "add_generation_prompt": false})",
      Endpoint::kChat);
  EXPECT_TRUE(off.continue_final_message);
  const ApiError both = error_of(
      std::string("{") + msgs + R"(, "continue_final_message": true, "add_generation_prompt": true})",
      Endpoint::kChat);
  EXPECT_EQ(both.param(), "continue_final_message");
  EXPECT_EQ(error_of(R"({"prompt": "x", "continue_final_message": true})").code(),
            "unknown_parameter");  // chat's field only
  EXPECT_EQ(parse(R"({"prompt": "x", "request_id": "abc-1"})").request_id, "abc-1");
  EXPECT_TRUE(parse(R"({"prompt": "x"})").request_id.empty());
  EXPECT_EQ(error_of(R"({"prompt": "x", "request_id": 5})").param(), "request_id");
  EXPECT_EQ(error_of(R"({"prompt": "x", "request_id": ")" + std::string(300, 'a') + "\"}").param(),
            "request_id");
}

// echo (completions): the prompt leads each choice; with logprobs its tokens' log-
// probabilities come too (SamplingParams::prompt_logprobs = logprobs); max_tokens 0 is taken
// with echo only (the prompt scored, nothing generated).
TEST(RequestParser, Echo) {
  const ParsedRequest off = parse(R"({"prompt": "x"})");
  EXPECT_FALSE(off.echo);
  EXPECT_EQ(off.params.prompt_logprobs, -1);
  const ParsedRequest plain = parse(R"({"prompt": "x", "echo": true})");
  EXPECT_TRUE(plain.echo);
  EXPECT_EQ(plain.params.prompt_logprobs, -1);
  const ParsedRequest lp = parse(R"({"prompt": "x", "logprobs": 3, "echo": true})");
  EXPECT_TRUE(lp.echo);
  EXPECT_EQ(lp.params.prompt_logprobs, 3);
  EXPECT_EQ(lp.params.logprobs, 3);
  const ParsedRequest score = parse(R"({"prompt": "x", "echo": true, "max_tokens": 0, "logprobs": 0})");
  EXPECT_EQ(score.params.max_tokens, 0);
  EXPECT_EQ(score.params.prompt_logprobs, 0);
  EXPECT_FALSE(parse(R"({"prompt": "x", "echo": false})").echo);
  EXPECT_FALSE(parse(R"({"prompt": "x", "echo": null})").echo);
  EXPECT_EQ(error_of(R"({"prompt": "x", "max_tokens": 0})").param(), "max_tokens");
  const ApiError chat =
      error_of(R"({"messages": [{"role": "user", "content": "x"}], "echo": true})", Endpoint::kChat);
  EXPECT_EQ(chat.status(), 400);
  EXPECT_EQ(chat.param(), "echo");
}

// vLLM's integer fields take numbers with an integral value (pydantic's lax mode).
TEST(RequestParser, IntegralNumbersAreIntegers) {
  const ParsedRequest r = parse(R"({"prompt": "x", "max_tokens": 5.0, "n": 2.0, "seed": -1e3,
      "top_k": 4e1, "logprobs": 3.0})");
  EXPECT_EQ(r.params.max_tokens, 5);
  EXPECT_EQ(r.params.n, 2);
  EXPECT_EQ(r.params.seed, static_cast<uint64_t>(int64_t{-1000}));
  EXPECT_EQ(r.params.top_k, 40);
  EXPECT_EQ(r.params.logprobs, 3);
  EXPECT_EQ(parse(R"({"prompt": [1, 2.0]})").id_prompts[0], (std::vector<int32_t>{1, 2}));
  for (const char* bad : {R"({"prompt": "x", "max_tokens": 5.5})",
                          R"({"prompt": "x", "max_tokens": 1e10})",
                          R"({"prompt": "x", "max_tokens": -0.0})",
                          R"({"prompt": "x", "n": 129.0})"}) {
    const ApiError e = error_of(bad);
    EXPECT_EQ(e.status(), 400) << bad;
    EXPECT_TRUE(e.param() == "max_tokens" || e.param() == "n") << bad << ": " << e.what();
  }
}

// Chat: max_completion_tokens replaces max_tokens (OpenAI); given both it wins, in either
// order (vLLM), and errors about the length name it.
TEST(RequestParser, MaxCompletionTokensWins) {
  const std::string msgs = R"("messages": [{"role": "user", "content": "hi"}])";
  for (const std::string& fields : {std::string(R"("max_tokens": 5, "max_completion_tokens": 3)"),
                                    std::string(R"("max_completion_tokens": 3, "max_tokens": 5)")}) {
    const ParsedRequest r = parse("{" + msgs + ", " + fields + "}", Endpoint::kChat);
    EXPECT_EQ(r.params.max_tokens, 3) << fields;
    EXPECT_TRUE(r.max_tokens_given);
    EXPECT_STREQ(r.max_tokens_field, "max_completion_tokens");
  }
  const ParsedRequest only = parse("{" + msgs + R"(, "max_tokens": 5})", Endpoint::kChat);
  EXPECT_EQ(only.params.max_tokens, 5);
  EXPECT_STREQ(only.max_tokens_field, "max_tokens");
  EXPECT_EQ(error_of(R"({"prompt": "x", "max_completion_tokens": 3})").param(),
            "max_completion_tokens");  // chat's field only
}

TEST(RequestParser, IncludeStopStrInOutput) {  // vLLM's extension, both endpoints
  EXPECT_FALSE(parse(R"({"prompt": "x", "stop": "y"})").params.include_stop_str_in_output);
  EXPECT_TRUE(parse(R"({"prompt": "x", "stop": "y", "include_stop_str_in_output": true})")
                  .params.include_stop_str_in_output);
  EXPECT_TRUE(parse(R"({"messages": [{"role": "user", "content": "hi"}],
                        "include_stop_str_in_output": true})",
                    Endpoint::kChat)
                  .params.include_stop_str_in_output);
  EXPECT_EQ(error_of(R"({"prompt": "x", "include_stop_str_in_output": 1})").param(),
            "include_stop_str_in_output");
}

// vLLM's chat template fields: add_generation_prompt, and chat_template_kwargs' one variable the
// native templates read (Qwen3's enable_thinking); /tokenize takes the same.
TEST(RequestParser, ChatTemplateFields) {
  const std::string msgs = R"("messages": [{"role": "user", "content": "hi"}])";
  const ParsedRequest d = parse("{" + msgs + "}", Endpoint::kChat);
  EXPECT_TRUE(d.add_generation_prompt);
  EXPECT_FALSE(d.enable_thinking.has_value());
  const ParsedRequest r = parse("{" + msgs + R"(, "add_generation_prompt": false,
      "chat_template_kwargs": {"enable_thinking": false}})",
                                Endpoint::kChat);
  EXPECT_FALSE(r.add_generation_prompt);
  EXPECT_EQ(r.enable_thinking, std::optional<bool>(false));
  EXPECT_EQ(parse("{" + msgs + R"(, "chat_template_kwargs": {"enable_thinking": null}})",
                  Endpoint::kChat)
                .enable_thinking,
            std::nullopt);
  EXPECT_EQ(parse_tokenize("{" + msgs + R"(, "chat_template_kwargs": {"enable_thinking": true}})")
                .enable_thinking,
            std::optional<bool>(true));
  for (const char* bad : {R"("chat_template_kwargs": {"custom": 1})",
                          R"("chat_template_kwargs": {"enable_thinking": "no"})",
                          R"("chat_template_kwargs": [])", R"("add_generation_prompt": 1)"}) {
    const ApiError e = error_of("{" + msgs + ", " + bad + "}", Endpoint::kChat);
    EXPECT_EQ(e.status(), 400) << bad;
    EXPECT_TRUE(e.param() == "chat_template_kwargs" ||
                e.param() == "chat_template_kwargs.enable_thinking" ||
                e.param() == "add_generation_prompt")
        << bad << ": " << e.param();
  }
  EXPECT_EQ(error_of(R"({"prompt": "x", "add_generation_prompt": true})").code(),
            "unknown_parameter");  // chat's
}

// Fields OpenAI clients send that mean "nothing to do" here are accepted at those values and
// refused, naming themselves, at any other.
TEST(RequestParser, ClientFieldsWithNothingToDo) {
  const std::string msgs = R"("messages": [{"role": "user", "content": "hi"}])";
  const ParsedRequest r = parse("{" + msgs + R"(, "store": false, "metadata": {"k": "v"},
      "service_tier": "auto", "parallel_tool_calls": true, "tools": [], "tool_choice": "none",
      "modalities": ["text"], "priority": 0, "stream": true,
      "stream_options": {"include_usage": true, "continuous_usage_stats": false}})",
                                Endpoint::kChat);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(parse(R"({"prompt": "x", "store": true, "priority": 0.0})").text_prompts.size(), 1u);
  const std::vector<std::pair<std::string, std::string>> refused = {
      {R"("tools": [{"type": "function", "function": {"name": "f"}}],
          "tool_choice": {"type": "function", "function": {"name": "g"}})", "tool_choice"},
      {R"("tool_choice": "auto")", "tool_choice"},
      {R"("tool_choice": {"type": "function", "function": {"name": "f"}})", "tool_choice"},
      {R"("modalities": ["text", "audio"])", "modalities"},
      {R"("priority": 1)", "priority"},
      {R"("metadata": "x")", "metadata"},
      {R"("store": "yes")", "store"},
      {R"("stream": true, "stream_options": {"continuous_usage_stats": true})", "stream_options"},
  };
  for (const auto& [field, param] : refused) {
    const ApiError e = error_of("{" + msgs + ", " + field + "}", Endpoint::kChat);
    EXPECT_EQ(e.status(), 400) << field;
    EXPECT_EQ(e.param(), param) << field << ": " << e.what();
  }
  // The chat-only ones are unknown to completions.
  EXPECT_EQ(error_of(R"({"prompt": "x", "tools": []})").code(), "unknown_parameter");
}

TEST(RequestParser, StructuredOutputFields) {
  using Kind = StructuredOutput::Kind;
  const std::string msgs = R"("messages": [{"role": "user", "content": "hi"}])";
  const auto chat = [&](const std::string& field) {
    return parse("{" + msgs + ", " + field + "}", Endpoint::kChat).params.structured;
  };
  EXPECT_FALSE(chat(R"("response_format": {"type": "text"})").active());
  EXPECT_EQ(chat(R"("response_format": {"type": "json_object"})").kind, Kind::kJsonObject);
  // The schema keeps the client's property order (declared order is the output's order).
  const StructuredOutput js = chat(R"("response_format": {"type": "json_schema", "json_schema":
      {"name": "p", "strict": true, "schema": {"type": "object", "properties":
      {"zeta": {"type": "string"}, "alpha": {"type": "integer"}}}}})");
  EXPECT_EQ(js.kind, Kind::kJsonSchema);
  EXPECT_LT(js.spec.find("zeta"), js.spec.find("alpha")) << js.spec;
  EXPECT_EQ(chat(R"("response_format": {"type": "json_schema", "json_schema": {"name": "n"}})")
                .spec,
            "{}");
  // vLLM's forms, completions too.
  const auto completion = [&](const std::string& field) {
    return parse(R"({"prompt": "p", )" + field + "}").params.structured;
  };
  const StructuredOutput gj = completion(R"("guided_json": {"type": "integer"},
      "guided_decoding_backend": "xgrammar")");
  EXPECT_EQ(gj.kind, Kind::kJsonSchema);
  EXPECT_EQ(nlohmann::json::parse(gj.spec), nlohmann::json::parse(R"({"type": "integer"})"));
  EXPECT_EQ(completion(R"("guided_json": "{\"type\": \"string\"}")").spec,
            R"({"type": "string"})");
  EXPECT_EQ(completion(R"("guided_regex": "[0-9]+")").spec, "[0-9]+");
  const StructuredOutput gc = completion(R"("guided_choice": ["a", "b c"])");
  EXPECT_EQ(gc.kind, Kind::kChoice);
  EXPECT_EQ(gc.choices, (std::vector<std::string>{"a", "b c"}));
  EXPECT_EQ(completion(R"("structured_outputs": {"regex": "x+"})").kind, Kind::kRegex);
  EXPECT_EQ(completion(R"("structured_outputs": {"choice": ["y"]})").choices,
            (std::vector<std::string>{"y"}));
  EXPECT_EQ(completion(R"("structured_outputs": {"json_object": true})").kind,
            Kind::kJsonObject);
  EXPECT_EQ(completion(R"("response_format": {"type": "json_object"})").kind, Kind::kJsonObject);
  // Grammars: vLLM's guided_grammar and structured_outputs.grammar, llama.cpp's grammar; and
  // llama.cpp's json_schema.
  for (const std::string field : {R"("guided_grammar": "root ::= \"a\"")",
                                  R"("structured_outputs": {"grammar": "root ::= \"a\""})",
                                  R"("grammar": "root ::= \"a\"")"}) {
    const StructuredOutput g = completion(field);
    EXPECT_EQ(g.kind, Kind::kGrammar) << field;
    EXPECT_EQ(g.spec, R"(root ::= "a")") << field;
  }
  EXPECT_EQ(completion(R"("json_schema": {"type": "integer"})").kind, Kind::kJsonSchema);
  const std::vector<std::pair<std::string, std::string>> refused = {
      {R"("response_format": {"type": "json_object"}, "guided_regex": "a")", "guided_regex"},
      {R"("guided_json": {}, "guided_choice": ["a"])", "guided_choice"},
      {R"("response_format": {"type": "yaml"})", "response_format"},
      {R"("response_format": {"type": "json_schema"})", "response_format"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"schema": 3}})",
       "response_format.json_schema.schema"},
      {R"("response_format": "json")", "response_format"},
      {R"("guided_choice": [])", "guided_choice"},
      {R"("guided_choice": ["a", 1])", "guided_choice"},
      {R"("guided_regex": 5)", "guided_regex"},
      {R"("guided_grammar": 5)", "guided_grammar"},
      {R"("structured_outputs": {"structural_tag": "{}"})", "structured_outputs.structural_tag"},
      {R"("grammar": "root ::= \"a\"", "json_schema": {})", "json_schema"},
      {R"("structured_outputs": {"shape": 1})", "structured_outputs.shape"},
  };
  for (const auto& [field, param] : refused) {
    const ApiError e = error_of(R"({"prompt": "p", )" + field + "}");
    EXPECT_EQ(e.status(), 400) << field;
    EXPECT_EQ(e.param(), param) << field << ": " << e.what();
  }
}

TEST(RequestParser, BadValuesNameTheirParameter) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"("max_tokens": 0)", "max_tokens"},
      {R"("max_tokens": "5")", "max_tokens"},
      {R"("max_tokens": 1e300)", "max_tokens"},
      {R"("max_tokens": 99999999999999999999999)", "max_tokens"},
      {R"("temperature": 2.5)", "temperature"},
      {R"("temperature": -0.1)", "temperature"},
      {R"("temperature": "hot")", "temperature"},
      {R"("top_p": 0)", "top_p"},
      {R"("top_p": 1.01)", "top_p"},
      {R"("top_k": -2)", "top_k"},
      {R"("min_p": 2)", "min_p"},
      {R"("seed": 1.5)", "seed"},
      {R"("seed": 18446744073709551615)", "seed"},
      {R"("n": 0)", "n"},
      {R"("n": 129)", "n"},
      {R"("stop": 3)", "stop"},
      {R"("stop": [""])", "stop"},
      {R"("stop": ["a", 1])", "stop"},
      {R"("stream": "yes")", "stream"},
      {R"("stream_options": {"include_usage": true})", "stream_options"},
      {R"("stream": true, "stream_options": {"bogus": true})", "stream_options"},
      {R"("ignore_eos": 1)", "ignore_eos"},
      {R"("presence_penalty": 2.5)", "presence_penalty"},
      {R"("frequency_penalty": -3)", "frequency_penalty"},
      {R"("repetition_penalty": 0)", "repetition_penalty"},
      {R"("repetition_penalty": "x")", "repetition_penalty"},
      {R"("logprobs": 21)", "logprobs"},
      {R"("logprobs": -1)", "logprobs"},
      {R"("logprobs": true)", "logprobs"},
      {R"("echo": true, "stream": true)", "echo"},
      {R"("stop_token_ids": 5)", "stop_token_ids"},
      {R"("min_tokens": -1)", "min_tokens"},
      {R"("min_tokens": 1.5)", "min_tokens"},
      {R"("stop_token_ids": [-1])", "stop_token_ids"},
      {R"("stop_token_ids": [1, "2"])", "stop_token_ids"},
      {R"("stop_token_ids": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17])", "stop_token_ids"},
      {R"("echo": 1)", "echo"},
      {R"("allowed_token_ids": [])", "allowed_token_ids"},
      {R"("allowed_token_ids": 5)", "allowed_token_ids"},
      {R"("allowed_token_ids": [1, -2])", "allowed_token_ids"},
      {R"("allowed_token_ids": [1, 2.5])", "allowed_token_ids"},
      {R"("truncate_prompt_tokens": 0)", "truncate_prompt_tokens"},
      {R"("bad_words": "Paris")", "bad_words"},
      {R"("bad_words": [1])", "bad_words"},
      {R"("bad_words": ["  "])", "bad_words"},
      {R"("truncate_prompt_tokens": -2)", "truncate_prompt_tokens"},
      {R"("truncate_prompt_tokens": "5")", "truncate_prompt_tokens"},
      {R"("best_of": 3)", "best_of"},
      {R"("suffix": "x")", "suffix"},
      {R"("logit_bias": {"x": 5})", "logit_bias"},
      {R"("logit_bias": {"-1": 5})", "logit_bias"},
      {R"("logit_bias": {"1": 101})", "logit_bias"},
      {R"("logit_bias": [1, 2])", "logit_bias"},
      {R"("logit_bias": {"99999999999": 1})", "logit_bias"},
      {R"("frobnicate": 1)", "frobnicate"},
      {R"("model": 5)", "model"},
  };
  for (const auto& [field, param] : cases) {
    const std::string body = R"({"prompt": "x", )" + field + "}";
    const ApiError e = error_of(body);
    EXPECT_EQ(e.status(), 400) << body;
    EXPECT_EQ(e.param(), param) << body;
    EXPECT_NE(std::string(e.what()).find(param), std::string::npos) << e.what();
    const Json j = e.to_json();
    EXPECT_EQ(j["error"]["type"], "invalid_request_error");
    EXPECT_EQ(j["error"]["param"], param);
  }
}

TEST(RequestParser, MalformedJson) {
  for (const std::string body :
       {std::string(""), std::string("{"), std::string("[1, 2]"), std::string("null"),
        std::string("{\"prompt\": \"a\xff\"}"), std::string("{\"prompt\": \"\\ud800\"}"),
        std::string(100000, '['), std::string("{\"prompt\": \"x\"} trailing")}) {
    const ApiError e = error_of(body);
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.code(), "invalid_json") << body.substr(0, 40);
  }
}

// Random damage to valid bodies: the parser returns or throws ApiError, nothing else.
TEST(RequestParser, RandomMalformedBodiesOnlyRaiseApiError) {
  const std::vector<std::string> valid = {
      R"({"model": "m", "prompt": "hello", "max_tokens": 5, "temperature": 0.7, "stop": ["x"], "n": 2})",
      R"({"prompt": [[1, 2], [3]], "stream": true, "stream_options": {"include_usage": true}})",
      R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}], "seed": 4})",
  };
  const std::vector<std::string> junk = {"\xff", "\xc3", "\xed\xa0\x80", "1e999", "-", "null",
                                         "\"", "{", "]", "99999999999999999999999", "\\u0000",
                                         "true", "[[[[[[[[", "\x00"};
  std::mt19937_64 rng(1234);
  int accepted = 0, rejected = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string body = valid[rng() % valid.size()];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < edits && !body.empty(); ++k) {
      const size_t at = rng() % body.size();
      switch (rng() % 5) {
        case 0: body.resize(at); break;                                   // truncate
        case 1: body[at] = static_cast<char>(rng() & 0xff); break;        // flip a byte
        case 2: body.insert(at, junk[rng() % junk.size()]); break;        // insert junk
        case 3: body.erase(at, 1 + rng() % 8); break;                     // delete
        default: body.insert(at, body.substr(at, rng() % 16)); break;     // duplicate
      }
    }
    const Endpoint e = body.find("messages") != std::string::npos ? Endpoint::kChat
                                                                  : Endpoint::kCompletions;
    try {
      (void)parse_request(body, e);
      ++accepted;
    } catch (const ApiError& err) {
      ++rejected;
      EXPECT_EQ(err.status(), 400);
      EXPECT_FALSE(std::string(err.what()).empty());
    }
  }
  EXPECT_GT(rejected, 10000);
  EXPECT_GT(accepted, 0);  // some edits keep a valid body (e.g. a changed letter in a string)
}

}  // namespace
}  // namespace kvattn::server
