// Properties of encode/decode on fixed tokenizers (the tiny test vocabulary under each
// pre-tokenizer): decode(encode(x)) == x for any bytes x, and StreamDecoder only ever emits valid
// UTF-8, reproducing x exactly when x is valid UTF-8. The first input byte picks the tokenizer.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/tokenizer/utf8.h"
#include "fuzz_util.h"
#include "kvattn/engine/gguf.h"
#include "kvattn/engine/tokenizer.h"

namespace {
#include "../tests/engine/tokenizer_test_data.inc"

const std::vector<kvattn::Tokenizer>& tokenizers() {
  static const std::vector<kvattn::Tokenizer> all = [] {
    std::vector<kvattn::Tokenizer> v;
    const std::string json = kTinyTokenizerJson;
    const std::string pres[] = {
        R"({"type":"ByteLevel","add_prefix_space":false,"use_regex":true})",
        R"({"type":"Sequence","pretokenizers":[{"type":"Digits","individual_digits":true},{"type":"ByteLevel","add_prefix_space":false,"use_regex":true}]})",
        std::string(R"({"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":")") +
            R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+)" +
            R"("},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"use_regex":false}]})"};
    for (const std::string& pre : pres) {
      std::string j = json;
      const size_t at = j.find("\"pre_tokenizer\":");
      const size_t end = j.find(",\"post_processor\"");
      j.replace(at, end - at, "\"pre_tokenizer\":" + pre);
      v.push_back(kvattn::Tokenizer::from_hf_json_text(j));
    }
    return v;
  }();
  return all;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvattn;
  if (size == 0) return 0;
  const Tokenizer& tok = tokenizers()[data[0] % tokenizers().size()];
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  for (bool special : {true, false}) {
    const std::vector<int32_t> ids = tok.encode(text, special);
    FUZZ_ASSERT(tok.decode(ids) == text);
    StreamDecoder d(tok);
    std::string streamed;
    for (int32_t id : ids) {
      const std::string part = d.push(id);
      FUZZ_ASSERT(tokenizer_detail::is_valid_utf8(part));
      streamed += part;
    }
    const std::string tail = d.flush();
    FUZZ_ASSERT(tokenizer_detail::is_valid_utf8(tail));
    streamed += tail;
    if (tokenizer_detail::is_valid_utf8(text)) FUZZ_ASSERT(streamed == text);
  }
  return 0;
}
