#include "server/prompt_builder.h"

#include <algorithm>
#include <string>

#include "kvattn/core/error.h"
#include "server/api_error.h"

namespace kvattn::server {
namespace {

int64_t context_of(const LLM& llm) { return llm.max_model_len(); }

std::vector<int32_t> encode(const LLM& llm, const std::string& text, const char* param) {
  if (llm.tokenizer() == nullptr) {
    throw bad_request("this model has no tokenizer: send the prompt as token ids", param);
  }
  try {
    return llm.encode(text);
  } catch (const Error& e) {
    throw bad_request(std::string("the prompt could not be tokenized: ") + e.what(), param);
  }
}

// vLLM's continue_final_message, as HF's apply_chat_template does it: the rendered chat ends
// right after the final message's content (its end-of-turn marks cut off), so the model goes
// on with that message. The content is looked for as given, then trimmed (templates such as
// Llama 3.1's trim messages).
std::string open_final_message(const std::string& rendered, const std::string& content) {
  const auto trimmed = [](const std::string& s) {
    const size_t b = s.find_first_not_of(" \t\n\r");
    if (b == std::string::npos) return std::string();
    return s.substr(b, s.find_last_not_of(" \t\n\r") - b + 1);
  };
  for (const std::string& c : {content, trimmed(content)}) {
    if (c.empty()) break;
    if (const size_t at = rendered.rfind(c); at != std::string::npos) {
      return rendered.substr(0, at + c.size());
    }
  }
  throw bad_request("continue_final_message needs a final message whose content the chat "
                    "template renders (it is empty or the template drops it)",
                    "continue_final_message");
}

// vLLM's bad_words as token sequences (get_bad_words_logits_processors): each word, stripped
// on the left, as it starts the text, and with a space before it where that spells the word
// with a different first token of as many tokens (the word in mid-text).
std::vector<std::vector<int32_t>> bad_words_ids(const LLM& llm,
                                                const std::vector<std::string>& words) {
  std::vector<std::vector<int32_t>> ids;
  if (words.empty()) return ids;
  if (llm.tokenizer() == nullptr) {
    throw bad_request("bad_words needs a tokenizer, and this model has none", "bad_words");
  }
  for (const std::string& word : words) {
    const std::string bare = word.substr(word.find_first_not_of(" \t\n\r"));
    const std::vector<int32_t> start = llm.tokenizer()->encode(bare, /*parse_special=*/false);
    if (start.empty()) continue;
    ids.push_back(start);
    std::vector<int32_t> mid = llm.tokenizer()->encode(" " + bare, /*parse_special=*/false);
    if (!mid.empty() && mid.front() != start.front() && mid.size() == start.size()) {
      ids.push_back(std::move(mid));
    }
  }
  return ids;
}

// Tool calling's checks that need the model: "auto" needs a template with a tool format (its
// parser reads the calls; vLLM likewise refuses auto without a tool parser), Mistral's calls
// start with a special token that must stay in the text, and each tool's parameters schema
// must compile where the output is constrained to calls (the 400 names the tool).
void check_tools(const ParsedRequest& r, const LLM& llm, SamplingParams& params) {
  using Choice = ToolRequest::Choice;
  const std::optional<ChatTemplate>& t = llm.tokenizer()->chat_template();
  if (r.tools.choice == Choice::kAuto) {
    if (!t || !t->supports_tools()) {
      throw bad_request("tool_choice \"auto\" needs a chat template with a tool format (Qwen2.5 / "
                        "Qwen3, Llama 3.1+, Mistral v0.3); this model's template has none: use "
                        "tool_choice \"required\" or a named function, which constrain the "
                        "output to a call on any template",
                        "tool_choice");
    }
    if (t->tools == ChatTemplate::Tools::kMistral) params.skip_special_tokens = false;
  }
  if (r.tools.choice != Choice::kRequired && r.tools.choice != Choice::kNamed) return;
  for (size_t i = 0; i < r.tools.tools.size(); ++i) {
    const ToolSpec& tool = r.tools.tools[i];
    if (tool.parameters.is_null()) continue;
    if (r.tools.choice == Choice::kNamed && tool.name != r.tools.named) continue;
    try {
      llm.prepare_structured({StructuredOutput::Kind::kJsonSchema, tool.parameters.dump(), {}});
    } catch (const Error& e) {
      throw bad_request("tools[" + std::to_string(i) + "].function.parameters (" + tool.name +
                            ") cannot constrain the call: " + e.what(),
                        "tools");
    }
  }
}

}  // namespace

EnginePrompts build_prompts(const ParsedRequest& r, const LLM& llm, uint64_t random_seed) {
  EnginePrompts out;
  const bool chat = r.endpoint == Endpoint::kChat;
  const char* param = chat ? "messages" : "prompt";
  if (chat) {
    if (!llm.has_chat_template()) {
      throw bad_request("this model has no chat template: use /v1/completions", "messages");
    }
    std::string text;
    try {
      text = llm.tokenizer()->apply_chat_template(r.messages, r.add_generation_prompt,
                                                  r.enable_thinking, r.tools.tools_json);
    } catch (const Error& e) {
      throw bad_request(std::string("the chat template failed: ") + e.what(), "messages");
    }
    if (r.continue_final_message) text = open_final_message(text, r.messages.back().content);
    out.prompts.push_back(encode(llm, text, param));
  } else {
    for (const std::string& t : r.text_prompts) out.prompts.push_back(encode(llm, t, param));
    out.prompts.insert(out.prompts.end(), r.id_prompts.begin(), r.id_prompts.end());
  }

  const int64_t context = context_of(llm);
  const int64_t vocab = llm.config().vocab_size;
  if (r.truncate_prompt_tokens) {  // vLLM's: keep the last k tokens (-1: the context's length)
    const int64_t k = *r.truncate_prompt_tokens;
    const auto keep = static_cast<size_t>(k < 0 ? context : k);
    for (auto& p : out.prompts) {
      if (p.size() <= keep) continue;
      p.erase(p.begin(), p.end() - static_cast<std::ptrdiff_t>(keep));
      out.truncated = true;
    }
  }
  int64_t longest = 0;
  for (const auto& p : out.prompts) {
    if (p.empty()) throw bad_request("the prompt is empty (no tokens)", param);
    for (int32_t id : p) {
      if (id < 0 || id >= vocab) {
        throw bad_request("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                              std::to_string(vocab) + ")",
                          param);
      }
    }
    longest = std::max<int64_t>(longest, static_cast<int64_t>(p.size()));
  }
  // The errors' wording is OpenAI's and vLLM's ("maximum context length"), which clients
  // (litellm, LangChain) match to tell an overflow from other 400s.
  if (longest >= context) {
    throw bad_request("This model's maximum context length is " + std::to_string(context) +
                          " tokens. However, your request has " + std::to_string(longest) +
                          " input tokens (at least one must be left to generate). Please reduce "
                          "the length of the input " + (chat ? "messages." : "prompt."),
                      param, "context_length_exceeded");
  }
  out.params = r.params;
  if (chat) check_tools(r, llm, out.params);
  if (!r.max_tokens_given) {  // chat: up to the context; completions: OpenAI's 16
    const int64_t room = std::min<int64_t>(context - longest, 1 << 30);
    out.params.max_tokens = static_cast<int>(chat ? room : std::min<int64_t>(16, room));
  }
  if (longest + out.params.max_tokens > context) {
    throw bad_request("This model's maximum context length is " + std::to_string(context) +
                          " tokens. However, you requested " +
                          std::to_string(longest + out.params.max_tokens) + " tokens (" +
                          std::to_string(longest) + " in the " + (chat ? "messages" : "prompt") +
                          ", " + std::to_string(out.params.max_tokens) + " in the completion: " +
                          r.max_tokens_field + "). Please reduce the length of the " +
                          (chat ? "messages" : "prompt") + " or completion.",
                      r.max_tokens_given ? r.max_tokens_field : param, "context_length_exceeded");
  }
  // Ids the parser took as non-negative must also lie in the vocabulary (only the model
  // knows it), named by their field.
  const auto check_id = [&](const char* field, const char* verb, int32_t id) {
    if (id >= vocab) {
      throw bad_request(std::string(field) + " " + verb + " token " + std::to_string(id) +
                            ", outside the vocabulary [0, " + std::to_string(vocab) + ")",
                        field);
    }
  };
  for (const auto& [id, bias] : out.params.logit_bias) check_id("logit_bias", "names", id);
  for (int32_t id : out.params.allowed_token_ids) check_id("allowed_token_ids", "holds", id);
  out.params.bad_words_ids = bad_words_ids(llm, r.bad_words);
  if (out.params.min_tokens > out.params.max_tokens) {
    throw bad_request("min_tokens (" + std::to_string(out.params.min_tokens) +
                          ") must not exceed max_tokens (" + std::to_string(out.params.max_tokens) +
                          ")",
                      "min_tokens");
  }
  if (!r.seed_given) out.params.seed = random_seed;
  try {
    validate(out.params);
    // A new schema compiles here, on the request's thread, not on the engine's.
    if (out.params.structured.active()) llm.prepare_structured(out.params.structured);
  } catch (const Error& e) {
    throw bad_request(e.what());
  }
  return out;
}

}  // namespace kvattn::server
