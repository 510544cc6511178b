// Tool calling in the chat templates against transformers' apply_chat_template(tools=...)
// renderings (chat_tools_test_data.inc, from scripts/make_chat_tools_test_data.py).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/tokenizer/chat_tools.h"
#include "kvattn/core/error.h"
#include "kvattn/engine/chat_template.h"

namespace kvattn {
namespace {

#include "engine/chat_tools_test_data.inc"

using Json = nlohmann::ordered_json;

// The messages as the server's request parser makes them (null content: "").
std::vector<ChatMessage> messages_of(const char* text) {
  std::vector<ChatMessage> out;
  for (const Json& m : Json::parse(text)) {
    ChatMessage msg(m["role"], m["content"].is_null() ? "" : m["content"].get<std::string>());
    if (m.contains("tool_calls")) {
      for (const Json& c : m["tool_calls"]) {
        msg.tool_calls.push_back({c["id"], c["function"]["name"], c["function"]["arguments"]});
      }
    }
    if (m.contains("tool_call_id")) msg.tool_call_id = m["tool_call_id"];
    out.push_back(std::move(msg));
  }
  return out;
}

ChatTemplate template_of(const ToolTemplate& src) {
  std::optional<ChatTemplate> t = ChatTemplate::detect(src.source);
  EXPECT_TRUE(t.has_value()) << src.name;
  if (!t) return {};
  if (src.bos[0] != '\0') t->bos_token = src.bos;
  t->eos_token = src.eos;
  t->date_string = src.date;
  return *t;
}

TEST(ChatTools, RenderAsTransformers) {
  int checked = 0, raised = 0;
  for (const ToolCase& c : kToolCases) {
    const ToolTemplate& src = kToolTemplates[c.tmpl];
    const ChatTemplate t = template_of(src);
    const std::vector<ChatMessage> msgs = messages_of(c.messages);
    if (c.raises) {
      EXPECT_THROW(t.render(msgs, c.generation_prompt, std::nullopt, c.tools), Error)
          << src.name << ": HF raises '" << c.expected << "' for " << c.messages;
      ++raised;
    } else {
      std::string got;
      EXPECT_NO_THROW(got = t.render(msgs, c.generation_prompt, std::nullopt, c.tools))
          << src.name << " " << c.messages;
      EXPECT_EQ(got, c.expected) << src.name << ", case " << checked << ": " << c.messages
                                 << " tools " << c.tools;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 8 * 13 * 2);
  EXPECT_GE(raised, 12);  // Llama's parallel calls and missing user turn, Mistral's short id, Gemma
}

TEST(ChatTools, DetectRecordsTheToolFormat) {
  using Tools = ChatTemplate::Tools;
  const std::pair<const char*, Tools> want[] = {
      {"qwen2.5", Tools::kQwen25},     {"qwen3", Tools::kQwen3},
      {"llama3.1", Tools::kLlama31},   {"llama3.2", Tools::kLlama31},
      {"mistral-v3", Tools::kMistral}, {"mistral-nemo", Tools::kMistral},
      {"qwen2", Tools::kNone},         {"gemma3", Tools::kNone}};
  for (const auto& [name, tools] : want) {
    bool found = false;
    for (const ToolTemplate& src : kToolTemplates) {
      if (std::string(src.name) != name) continue;
      found = true;
      EXPECT_EQ(template_of(src).tools, tools) << name;
      EXPECT_EQ(template_of(src).supports_tools(), tools != Tools::kNone) << name;
    }
    EXPECT_TRUE(found) << name;
  }
  // SmolLM2's ChatML and a Llama 3.1 source without the custom-tools block have no tool format.
  EXPECT_FALSE(ChatTemplate::detect("{{'<|im_start|>' + message['role'] + '\\n' + "
                                    "message['content'] + '<|im_end|>' + '\\n'}}")
                   ->supports_tools());
}

TEST(ChatTools, TemplatesWithoutToolsIgnoreThem) {
  // Qwen2's template has no tool format: the tools change nothing, a result is a "tool" turn.
  const ToolTemplate* qwen2 = nullptr;
  for (const ToolTemplate& src : kToolTemplates) {
    if (std::string(src.name) == "qwen2") qwen2 = &src;
  }
  ASSERT_NE(qwen2, nullptr);
  const ChatTemplate t = template_of(*qwen2);
  const std::vector<ChatMessage> msgs = {{"user", "hi"}, {"tool", "42", {}, "abc"}};
  EXPECT_EQ(t.render(msgs, true, std::nullopt, R"([{"type":"function","function":{"name":"f"}}])"),
            t.render(msgs, true));
  EXPECT_NE(t.render(msgs, true).find("<|im_start|>tool\n42<|im_end|>\n"), std::string::npos);
}

TEST(ChatTools, PyJsonIsPythonsJsonDumps) {
  using chat_detail::py_json;
  // repr() of these doubles, as Python prints them.
  const std::pair<double, const char*> floats[] = {
      {1e15, "1000000000000000.0"}, {1e16, "1e+16"},   {0.0001, "0.0001"},  {1e-05, "1e-05"},
      {-0.0, "-0.0"},               {0.0, "0.0"},      {1.5e300, "1.5e+300"}, {123.456, "123.456"},
      {5e-324, "5e-324"},           {-2.5, "-2.5"},    {100.0, "100.0"},    {1.2345e-7, "1.2345e-07"},
      {9007199254740993.0, "9007199254740992.0"},      {0.1, "0.1"}};
  for (const auto& [d, want] : floats) EXPECT_EQ(py_json(Json(d)), want) << want;
  for (const PyFloat& f : kPyFloats) EXPECT_EQ(py_json(Json(f.value)), f.repr);
  EXPECT_GT(std::size(kPyFloats), 500u);
  EXPECT_EQ(py_json(Json::parse(R"({"b":[1,{"x":null}],"a":"\u0001\u007f\"\\\n\t\b\f\r é"})")),
            "{\"b\": [1, {\"x\": null}], \"a\": \"\\u0001\x7f\\\"\\\\\\n\\t\\b\\f\\r é\"}");
  EXPECT_EQ(py_json(Json::parse(R"({"a":[],"b":{},"c":[true,-7]})"), 2),
            "{\n  \"a\": [],\n  \"b\": {},\n  \"c\": [\n    true,\n    -7\n  ]\n}");
  EXPECT_EQ(py_json(Json::parse("18446744073709551615")), "18446744073709551615");
}

TEST(ChatTools, BadJsonIsAnError) {
  const ToolTemplate& src = kToolTemplates[0];  // qwen2.5
  const ChatTemplate t = template_of(src);
  EXPECT_THROW(t.render({{"user", "x"}}, true, std::nullopt, "[{"), Error);
  EXPECT_THROW(t.render({{"user", "x"}}, true, std::nullopt, "{}"), Error);
  EXPECT_THROW(t.render({{"assistant", "", {{"id", "f", "{bad"}}}}, true), Error);
}

}  // namespace
}  // namespace kvattn
