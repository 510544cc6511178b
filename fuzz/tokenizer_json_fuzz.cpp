// tokenizer.json (+ tokenizer_config.json after a NUL byte): load, then encode fixed strings and
// the rest of the input; every id is in range and decoding never fails. The chat template (and
// the config text taken as a template source) is detected and rendered for a few conversations,
// tool calls and results among them, with and without tools.
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_util.h"
#include "kvattn/engine/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvattn;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string_view json = in.substr(0, nul);
  const std::string_view config = nul == std::string_view::npos ? std::string_view() : in.substr(nul + 1);
  try {
    const Tokenizer tok = Tokenizer::from_hf_json_text(json, config, "fuzz.json");
    for (std::string_view text : {std::string_view("Hello, world! 1234 <|im_end|> caf\xc3\xa9 \xe6\x97"),
                                  json.substr(0, 256)}) {
      for (bool special : {true, false}) {
        const std::vector<int32_t> ids = tok.encode(text, special);
        for (int32_t id : ids) FUZZ_ASSERT(id >= 0 && id < tok.vocab_size());
        StreamDecoder d(tok);
        for (int32_t id : ids) (void)d.push(id);
        (void)d.flush();
        (void)tok.decode(ids, true);
      }
    }
    if (tok.chat_template()) (void)tok.apply_chat_template({{"user", "x"}}, true);
  } catch (const Error&) {
  }
  // The source as given, then with every tool-format marker appended (the family stays the
  // source's; its tool renderer is switched on).
  const std::string source(config.empty() ? json : config);
  for (const std::string& src :
       {source, source + " <tool_call> <tool_response> last_query_index Given the following "
                         "functions [AVAILABLE_TOOLS] [TOOL_RESULTS]"}) {
    if (auto t = ChatTemplate::detect(src)) {
      const std::vector<std::vector<ChatMessage>> conversations = {
          {{"user", " x\xe3\x80\x80"}},
          {{"system", "s"}, {"user", "u"}, {"assistant", "<think>a</think>b \xff"}, {"user", "v"}},
          {{"user", "u"}, {"user", "v"}},
          {{"system", "s"}},
          {},
          // Tool calls and results (chat_tools.cpp where the source has a tool format).
          {{"system", "s"}, {"user", "u"},
           {"assistant", "",
            {{"abcdefghi", "f", R"({"a": [1, 2.5e-7, "\u00e9"]})"}, {"x", "g", "{}"}}},
           {"tool", "r", {}, "abcdefghi"}, {"tool", "{\"k\": 1}", {}, "x"}},
          {{"tool", "r", {}, "id"}}};
      const char* tools = R"([{"type": "function", "function": {"name": "f", "description": "d\"",)"
                          R"( "parameters": {"type": "object", "properties": {"a": {}}}}}])";
      for (const auto& c : conversations) {
        for (bool gen : {true, false}) {
          for (const char* tools_json : {"", tools}) {
            try {
              (void)t->render(c, gen, std::nullopt, tools_json);
            } catch (const Error&) {
            }
          }
        }
      }
    }
  }
  return 0;
}
