// Generated text -> tool calls: each family's format, malformed calls left as content, and the
// streaming contract: split anywhere (every byte boundary, and byte by byte), the content and
// calls are exactly the whole text's, and nothing that may start a marker is sent early.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/tool_parsers.h"

namespace kvattn::server {
namespace {

using Calls = std::vector<ParsedToolCall>;
const std::set<std::string> kTools = {"get_weather", "add", "now"};

struct Result {
  std::string content;
  Calls calls;
};

Result whole(ToolFormat f, std::string_view text, const std::string& named = {}) {
  ToolCallParser p(f, kTools, named);
  Result r;
  r.content = parse_tool_calls(p, text, r.calls);
  return r;
}

// Streams `pieces` through one parser.
Result streamed(ToolFormat f, const std::vector<std::string_view>& pieces,
                const std::string& named = {}) {
  ToolCallParser p(f, kTools, named);
  Result r;
  for (std::string_view s : pieces) r.content += p.feed(s, r.calls);
  r.content += p.finish(r.calls);
  return r;
}

void expect_split_invariant(ToolFormat f, const std::string& text, const std::string& named = {}) {
  const Result w = whole(f, text, named);
  for (size_t k = 0; k <= text.size(); ++k) {
    const std::string_view t = text;
    const Result s = streamed(f, {t.substr(0, k), t.substr(k)}, named);
    EXPECT_EQ(s.content, w.content) << "split at " << k << " of " << text;
    EXPECT_EQ(s.calls, w.calls) << "split at " << k << " of " << text;
  }
  std::vector<std::string_view> bytes;
  for (size_t i = 0; i < text.size(); ++i) bytes.push_back(std::string_view(text).substr(i, 1));
  const Result b = streamed(f, bytes, named);
  EXPECT_EQ(b.content, w.content) << "byte by byte: " << text;
  EXPECT_EQ(b.calls, w.calls) << "byte by byte: " << text;
}

TEST(ToolParsers, Hermes) {
  const auto f = ToolFormat::kHermes;
  Result r = whole(f, "Let me check.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                      "{\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"add\", "
                      "\"arguments\": {\"a\": 1, \"b\": 2.5}}\n</tool_call>");
  EXPECT_EQ(r.content, "Let me check.");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0], (ParsedToolCall{"get_weather", "{\"city\":\"Paris\"}"}));
  EXPECT_EQ(r.calls[1], (ParsedToolCall{"add", "{\"a\":1,\"b\":2.5}"}));
  // Only calls: no content. An unclosed last block still counts (the generation ended).
  r = whole(f, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>\n\n"
               "<tool_call>{\"name\": \"now\", \"arguments\": {}}");
  EXPECT_EQ(r.content, "");
  EXPECT_EQ(r.calls.size(), 2u);
  // Malformed blocks stay content as written; the good one is a call.
  r = whole(f, "a <tool_call>{\"name\": \"now\", \"arguments\": {}</tool_call> b "
               "<tool_call>{\"name\": \"nope\", \"arguments\": {}}</tool_call>"
               "<tool_call>{\"name\": \"now\", \"arguments\": []}</tool_call>"
               "<tool_call>{\"name\": \"now\", \"arguments\": {\"x\": 1}}</tool_call>\nc");
  EXPECT_EQ(r.content, "a <tool_call>{\"name\": \"now\", \"arguments\": {}</tool_call> b "
                       "<tool_call>{\"name\": \"nope\", \"arguments\": {}}</tool_call>"
                       "<tool_call>{\"name\": \"now\", \"arguments\": []}</tool_call>c");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, "{\"x\":1}");
  // No calls: the text unchanged, whitespace included; a lone marker prefix is text.
  EXPECT_EQ(whole(f, "  Hello <tool_ world \n").content, "  Hello <tool_ world \n");
  EXPECT_EQ(whole(f, "Hi <tool_call>{oops").content, "Hi <tool_call>{oops");
  EXPECT_EQ(whole(f, "<tool_call").content, "<tool_call");
  EXPECT_EQ(whole(f, "").content, "");
}

TEST(ToolParsers, Llama3Json) {
  const auto f = ToolFormat::kLlama3Json;
  Result r = whole(f, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}");
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0], (ParsedToolCall{"get_weather", "{\"city\":\"Oslo\"}"}));
  r = whole(f, " <|python_tag|>{\"name\": \"now\", \"arguments\": {}}; {\"name\": \"add\", "
               "\"parameters\": {\"a\": 1, \"b\": \"}\"}} ");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[1].arguments, "{\"a\":1,\"b\":\"}\"}");
  // All or nothing: one bad part and the whole text is content.
  for (const char* bad : {"{\"name\": \"now\", \"parameters\": {}}; {\"name\": \"x\", \"parameters\": {}}",
                          "{\"name\": \"now\", \"parameters\": {}} and more",
                          "{\"name\": \"now\", \"parameters\": {}};",
                          "{\"name\": \"now\"}", "{\"name\": \"now\", \"parameters\": 3}",
                          "{\"name\": \"now\", \"parameters\": {", "{}", "<|python_tag|>",
                          "\n{not json}"}) {
    r = whole(f, bad);
    EXPECT_EQ(r.content, bad);
    EXPECT_TRUE(r.calls.empty()) << bad;
  }
  EXPECT_EQ(whole(f, "The answer is {42}.").content, "The answer is {42}.");
  EXPECT_EQ(whole(f, "<|python").content, "<|python");
}

TEST(ToolParsers, Mistral) {
  const auto f = ToolFormat::kMistral;
  Result r = whole(f, "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                      "\"Rome\"}}, {\"name\": \"now\", \"arguments\": {}}]");
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[1], (ParsedToolCall{"now", "{}"}));
  r = whole(f, "Sure. [TOOL_CALLS][{\"name\": \"now\", \"arguments\": {}}]");
  EXPECT_EQ(r.content, "Sure.");
  EXPECT_EQ(r.calls.size(), 1u);
  for (const char* bad : {"Sure. [TOOL_CALLS][{\"name\": \"now\"}]", "[TOOL_CALLS]{\"name\": \"now\", "
                          "\"arguments\": {}}", "x [TOOL_CALLS][]", "[TOOL_CALLS] [{\"name\": \"now\", "
                          "\"arguments\": {}}"}) {
    r = whole(f, bad);
    EXPECT_EQ(r.content, bad);
    EXPECT_TRUE(r.calls.empty()) << bad;
  }
  EXPECT_EQ(whole(f, "[TOOL_CALL").content, "[TOOL_CALL");
}

TEST(ToolParsers, RequiredAndNamed) {
  Result r = whole(ToolFormat::kRequired,
                   "[{\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}, {\"name\": \"now\", "
                   "\"parameters\": {}}]");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0], (ParsedToolCall{"add", "{\"a\":1,\"b\":2}"}));
  EXPECT_EQ(r.content, "");
  // Cut off (max_tokens): the text is content, no calls.
  r = whole(ToolFormat::kRequired, "[{\"name\": \"add\", \"param");
  EXPECT_EQ(r.content, "[{\"name\": \"add\", \"param");
  EXPECT_TRUE(r.calls.empty());
  r = whole(ToolFormat::kNamed, " {\"city\": \"Lima\"}\n", "get_weather");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0], (ParsedToolCall{"get_weather", "{\"city\":\"Lima\"}"}));
  EXPECT_EQ(whole(ToolFormat::kNamed, "{\"city\": ", "get_weather").content, "{\"city\": ");
}

TEST(ToolParsers, StreamingEqualsWholeAtEverySplit) {
  const std::string hermes[] = {
      "Let me check.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Zürich\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, "
      "\"b\": 2}}\n</tool_call>",
      "a <tool_call>{bad}</tool_call> b <tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call>"
      "  \n tail <tool_cal",
      "  plain text \n\n", "<tool_call>{\"name\": \"now\", \"arguments\": {}}",
      "x<tool_call><tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call></tool_call>"};
  for (const std::string& t : hermes) expect_split_invariant(ToolFormat::kHermes, t);
  const std::string llama[] = {
      "<|python_tag|>{\"name\": \"now\", \"parameters\": {}}; {\"name\": \"add\", \"parameters\": "
      "{\"a\": 1}}",
      "  {\"name\": \"now\", \"parameters\": {}} x", " <|python_ta", "Hello {there}", "\n\n"};
  for (const std::string& t : llama) expect_split_invariant(ToolFormat::kLlama3Json, t);
  const std::string mistral[] = {
      "Sure.\n[TOOL_CALLS] [{\"name\": \"now\", \"arguments\": {}}]", "a [TOOL_CALLS] oops",
      "[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {\"a\": [1, 2]}}]", "no calls [TOOL"};
  for (const std::string& t : mistral) expect_split_invariant(ToolFormat::kMistral, t);
  expect_split_invariant(ToolFormat::kRequired, "[{\"name\": \"now\", \"parameters\": {}}]");
  expect_split_invariant(ToolFormat::kNamed, "{\"a\": 1}", "add");
}

TEST(ToolParsers, StreamingHoldsBackOnlyWhatMayBeAMarker) {
  ToolCallParser p(ToolFormat::kHermes, kTools);
  Calls calls;
  EXPECT_EQ(p.feed("Hello <tool", calls), "Hello");  // the space waits with the marker's start
  EXPECT_EQ(p.feed("s> and", calls), " <tools> and");
  EXPECT_EQ(p.feed(" <tool_call>{\"name\": \"now\", \"arguments\": {}}", calls), "");
  EXPECT_TRUE(calls.empty());
  EXPECT_EQ(p.feed("\n</tool_call>", calls), "");
  ASSERT_EQ(calls.size(), 1u);  // sent at its closing tag, before the end
  EXPECT_EQ(p.num_calls(), 1);
  EXPECT_EQ(p.finish(calls), "");

  ToolCallParser m(ToolFormat::kMistral, kTools);
  EXPECT_EQ(m.feed("Hi [TOOL", calls), "Hi");
  EXPECT_EQ(m.feed("S] x", calls), " [TOOLS] x");

  ToolCallParser l(ToolFormat::kLlama3Json, kTools);
  EXPECT_EQ(l.feed("  ", calls), "");
  EXPECT_EQ(l.feed("Sure", calls), "  Sure");  // not a call: sent as it comes
  ToolCallParser l2(ToolFormat::kLlama3Json, kTools);
  EXPECT_EQ(l2.feed("{\"name\"", calls), "");  // may be a call: held to the end
}

}  // namespace
}  // namespace kvattn::server
