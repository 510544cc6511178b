// Chat templates of the supported families against transformers' apply_chat_template renderings
// (chat_template_test_data.inc, from scripts/make_family_tokenizer_test_data.py).
#include <gtest/gtest.h>

#include <ctime>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/tokenizer/utf8.h"
#include "kvattn/core/error.h"
#include "kvattn/engine/tokenizer.h"

namespace kvattn {
namespace {

#include "engine/chat_template_test_data.inc"

using nlohmann::json;

const char* source_of(std::string_view name) {
  for (const auto& t : kChatTemplates) {
    if (name == t.name) return t.source;
  }
  ADD_FAILURE() << "no template " << name;
  return "";
}

std::vector<ChatMessage> messages_of(const ChatCase& c) {
  std::vector<ChatMessage> out;
  for (const auto& m : c.messages) out.push_back({m.role, m.content});
  return out;
}

TEST(ChatTemplateFamilies, RenderAsTransformers) {
  int checked = 0, raised = 0;
  for (const ChatCase& c : kChatCases) {
    const ChatTemplateSource& src = kChatTemplates[c.tmpl];
    auto t = ChatTemplate::detect(src.source);
    ASSERT_TRUE(t.has_value()) << src.name;
    t->date_string = src.date;
    const std::vector<ChatMessage> msgs = messages_of(c);
    if (c.raises) {
      EXPECT_THROW(t->render(msgs, c.generation_prompt), Error)
          << src.name << ": HF raises '" << c.expected << "'";
      ++raised;
    } else {
      EXPECT_EQ(t->render(msgs, c.generation_prompt), c.expected)
          << src.name << ", case " << checked << ", generation prompt " << c.generation_prompt;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 11 * 9 * 2);
  EXPECT_GT(raised, 10);  // Gemma 2's system message, every family's non-alternating roles
}

TEST(ChatTemplateFamilies, DetectsEachVariant) {
  using Style = ChatTemplate::Style;
  using System = ChatTemplate::System;
  auto t = ChatTemplate::detect(source_of("llama3"));
  EXPECT_EQ(t->style, Style::kLlama3);
  EXPECT_FALSE(t->llama3_dated_system);
  t = ChatTemplate::detect(source_of("llama3.1"));
  EXPECT_TRUE(t->llama3_dated_system);
  EXPECT_EQ(t->knowledge_date, "December 2023");
  EXPECT_EQ(t->default_date, "26 Jul 2024");
  EXPECT_FALSE(t->date_is_today);
  EXPECT_TRUE(ChatTemplate::detect(source_of("llama3.2"))->date_is_today);
  EXPECT_EQ(ChatTemplate::detect(source_of("qwen2"))->default_system_prompt,
            "You are a helpful assistant.");
  EXPECT_EQ(ChatTemplate::detect(source_of("qwen2.5"))->default_system_prompt,
            "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
  struct Mistral { const char* name; const char* open; const char* close; System system;
                   const char* prefix; bool trim; };
  for (const Mistral& m : {Mistral{"mistral-v0.1", "[INST] ", " [/INST]", System::kRefused, "", false},
                           Mistral{"mistral-v1", " [INST] ", " [/INST]", System::kFirstUser, " ", false},
                           Mistral{"mistral-v3", "[INST] ", "[/INST]", System::kLastUser, " ", true},
                           Mistral{"mistral-nemo", "[INST]", "[/INST]", System::kLastUser, "", false}}) {
    t = ChatTemplate::detect(source_of(m.name));
    ASSERT_TRUE(t.has_value()) << m.name;
    EXPECT_EQ(t->style, Style::kMistral) << m.name;
    EXPECT_EQ(t->inst_open, m.open) << m.name;
    EXPECT_EQ(t->inst_close, m.close) << m.name;
    EXPECT_EQ(t->system, m.system) << m.name;
    EXPECT_EQ(t->assistant_prefix, m.prefix) << m.name;
    EXPECT_EQ(t->assistant_trim, m.trim) << m.name;
  }
  EXPECT_EQ(ChatTemplate::detect(source_of("gemma2"))->system, System::kRefused);
  EXPECT_EQ(ChatTemplate::detect(source_of("gemma3"))->system, System::kFirstUser);
  EXPECT_EQ(ChatTemplate::detect(source_of("gemma3"))->style, Style::kGemma);
}

TEST(ChatTemplateFamilies, UnknownFormatsAreNotGuessed) {
  // Llama 2 (<<SYS>>), Mistral v7 ([SYSTEM_PROMPT]), an [INST] template without assistant turns.
  EXPECT_FALSE(ChatTemplate::detect("{{ bos_token + '[INST] <<SYS>>\\n' + system + "
                                    "'\\n<</SYS>>\\n\\n' + content + ' [/INST]' }}")
                   .has_value());
  EXPECT_FALSE(ChatTemplate::detect("{{ '[SYSTEM_PROMPT]' + s + '[/SYSTEM_PROMPT]' }}{{ '[INST]' "
                                    "+ message['content'] + '[/INST]' }}{{ message['content'] + "
                                    "eos_token }}")
                   .has_value());
  EXPECT_FALSE(ChatTemplate::detect("{{ '[INST] ' + message['content'] + ' [/INST]' }}").has_value());
}

TEST(ChatTemplateFamilies, Llama32DatesTodayUnlessGiven) {
  auto t = ChatTemplate::detect(source_of("llama3.2"));
  const std::string out = t->render({{"user", "hi"}}, true);
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buf[32];
  std::strftime(buf, sizeof buf, "Today Date: %d %b %Y\n\n", &local);
  EXPECT_NE(out.find(buf), std::string::npos) << out;  // (fails only across a midnight)
  t->date_string = "01 Jan 2030";
  EXPECT_NE(t->render({{"user", "hi"}}, true).find("Today Date: 01 Jan 2030\n\n"),
            std::string::npos);
  const std::string e = [&] {
    try {
      t->render({{"user", "hi"}, {"tool", "{}"}}, true);
    } catch (const Error& err) {
      return std::string(err.what());
    }
    return std::string();
  }();
  EXPECT_NE(e.find("role 'tool'"), std::string::npos) << e;
}

TEST(ChatTemplateFamilies, TrimIsPythonStrip) {
  auto t = ChatTemplate::detect(source_of("gemma2"));
  // U+3000, U+00A0, U+2003 and U+0085 are whitespace to str.strip; U+200B is not.
  EXPECT_EQ(t->render({{"user", "\u3000\u00a0 x y\u2003\u0085\n"}}, false),
            "<bos><start_of_turn>user\nx y<end_of_turn>\n");
  EXPECT_EQ(t->render({{"user", "\u200bx\u200b"}}, false),
            "<bos><start_of_turn>user\n\u200bx\u200b<end_of_turn>\n");
  EXPECT_EQ(t->render({{"user", " \t\n"}}, false), "<bos><start_of_turn>user\n<end_of_turn>\n");
  EXPECT_EQ(t->render({{"user", "\xff  "}}, false), "<bos><start_of_turn>user\n\xff<end_of_turn>\n");
}

// A byte-level tokenizer.json whose added tokens are the family's markers.
std::string tokenizer_with(const std::vector<std::string>& added) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[tokenizer_detail::byte_to_unicode()[b]] = b;
  json adds = json::array();
  for (size_t i = 0; i < added.size(); ++i) {
    adds.push_back({{"id", 256 + i}, {"content", added[i]}, {"special", true}});
  }
  return json{{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}},
              {"added_tokens", adds},
              {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}}}
      .dump();
}

TEST(ChatTemplateFamilies, TokenizerSuppliesItsBosAndEos) {
  const std::string tj = tokenizer_with({"<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"});
  const json cfg = {{"bos_token", "<bos>"}, {"eos_token", "<eos>"},
                    {"chat_template", source_of("gemma3")}};
  const Tokenizer tok = Tokenizer::from_hf_json_text(tj, cfg.dump(), "gemma.json");
  const std::string text = tok.apply_chat_template({{"system", "S"}, {"user", "U"}}, true);
  EXPECT_EQ(text, "<bos><start_of_turn>user\nS\n\nU<end_of_turn>\n<start_of_turn>model\n");
  const std::vector<int32_t> ids = tok.encode(text);
  EXPECT_EQ(ids.front(), tok.bos_id());
  EXPECT_EQ(ids[1], 258);

  // Mistral: the vocabulary's bos/eos, whatever the detection's defaults.
  const std::string mj = tokenizer_with({"<|bos|>", "<|eos|>"});
  const json mcfg = {{"bos_token", "<|bos|>"}, {"eos_token", "<|eos|>"},
                     {"chat_template", source_of("mistral-v3")}};
  const Tokenizer mt = Tokenizer::from_hf_json_text(mj, mcfg.dump(), "mistral.json");
  EXPECT_EQ(mt.apply_chat_template({{"user", "a"}, {"assistant", " b "}, {"user", "c"}}, true),
            "<|bos|>[INST] a[/INST] b<|eos|>[INST] c[/INST]");
}

}  // namespace
}  // namespace kvattn
