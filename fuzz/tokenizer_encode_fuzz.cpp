// Properties of encode/decode on fixed tokenizers (the tiny byte-level test vocabulary under each
// pre-tokenizer, then the SentencePiece one from GGUF and as legacy / Gemma tokenizer.json):
// decode(encode(x)) == x for any bytes x (SentencePiece: without parsing special tokens, and
// unless x spells "▁" itself), and StreamDecoder only ever emits valid UTF-8, reproducing x exactly
// when x is valid UTF-8 (SentencePiece: after the prefix space, when it has one). The first input
// byte picks the tokenizer.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "../tests/engine/model_file_writer.h"
#include "engine/tokenizer/utf8.h"
#include "fuzz_util.h"
#include "kvattn/engine/gguf.h"
#include "kvattn/engine/tokenizer.h"

namespace {
#include "../tests/engine/spm_tokenizer_test_data.inc"
#include "../tests/engine/spm_gguf_vocab.inc"
#include "../tests/engine/tokenizer_test_data.inc"

struct Fixture {
  kvattn::Tokenizer tok;
  bool spm;
  std::string stream_prefix;  // what StreamDecoder emits before the text
};

std::vector<Fixture> spm_tokenizers() {
  using kvattn::Tokenizer;
  kvattn::testing::GgufBuilder g;
  add_spm_vocab(g);
  std::vector<Fixture> v;
  v.push_back({Tokenizer::from_gguf(kvattn::GgufFile::from_bytes(g.build(), "spm.gguf")), true, " "});
  v.push_back({Tokenizer::from_hf_json_text(kSpmTokenizerJson), true, " "});
  std::string gemma = kSpmTokenizerJson;  // Replace normalizer only, no Strip decoder
  const size_t at = gemma.find("\"normalizer\":");
  const size_t end = gemma.find(",\"pre_tokenizer\"");
  gemma.replace(at, end - at, R"("normalizer":{"type":"Replace","pattern":{"String":" "},"content":"\u2581"})");
  const size_t strip = gemma.find(",{\"type\":\"Strip\"");
  gemma.erase(strip, gemma.find('}', strip) + 1 - strip);
  v.push_back({Tokenizer::from_hf_json_text(gemma), true, ""});
  return v;
}

const std::vector<Fixture>& tokenizers() {
  static const std::vector<Fixture> all = [] {
    std::vector<Fixture> v;
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
      v.push_back({kvattn::Tokenizer::from_hf_json_text(j), false, ""});
    }
    for (Fixture& f : spm_tokenizers()) v.push_back(std::move(f));
    return v;
  }();
  return all;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvattn;
  if (size == 0) return 0;
  const Fixture& f = tokenizers()[data[0] % tokenizers().size()];
  const Tokenizer& tok = f.tok;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  // SentencePiece: special tokens get a prefix space after them, and a typed "▁" decodes as ' '.
  const bool exact = !f.spm || text.find("\xE2\x96\x81") == std::string::npos;
  for (bool special : {true, false}) {
    const std::vector<int32_t> ids = tok.encode(text, special);
    for (int32_t id : ids) FUZZ_ASSERT(id >= 0 && id < tok.vocab_size());
    const bool round_trip = exact && (!f.spm || !special);
    if (round_trip) FUZZ_ASSERT(tok.decode(ids) == text);
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
    if (round_trip && !text.empty() && tokenizer_detail::is_valid_utf8(text)) {
      FUZZ_ASSERT(streamed == f.stream_prefix + text);
    }
  }
  return 0;
}
