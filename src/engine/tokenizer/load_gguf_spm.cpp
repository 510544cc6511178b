// GGUF tokenizer.ggml.model "llama" (SentencePiece BPE): tokenizer.ggml.scores (float per token,
// absent = all 0 as in llama.cpp), tokenizer.ggml.token_type (1 normal, 2 unknown, 3 control,
// 4 user-defined, 5 unused, 6 byte "<0xXX>"; absent = byte for "<0xXX>" texts, else normal) and
// tokenizer.ggml.add_space_prefix (default true). Merges are not used: llama.cpp merges by score.
#include <cmath>

#include "engine/tokenizer/tokenizer_impl.h"

namespace kvattn::tokenizer_detail {

void read_gguf_token_types(const std::vector<int64_t>& types, Impl& t) {
  t.types.resize(types.size());
  for (size_t i = 0; i < types.size(); ++i) {
    const int64_t type = types[i];
    KVATTN_CHECK(type >= 0 && type <= kTypeByte, t.name, ": tokenizer.ggml.token_type[", i,
                 "] = ", type, " is not a token type (0..6)");
    KVATTN_CHECK(type != kTypeByte || parse_byte_token(t.tokens[i]) >= 0, t.name,
                 ": token ", i, " '", t.tokens[i], "' has type byte but is not spelled <0xXX>");
    t.types[i] = static_cast<uint8_t>(type);
  }
}

void read_gguf_spm(const GgufFile& g, Impl& t) {
  const std::string& file = t.name;
  const size_t n = t.tokens.size();
  t.model = Model::kSpmByScore;
  if (t.types.empty()) {
    t.types.resize(n);
    for (size_t i = 0; i < n; ++i) {
      t.types[i] = parse_byte_token(t.tokens[i]) >= 0 ? kTypeByte : kTypeNormal;
    }
  }
  t.scores.assign(n, 0.0f);
  if (const GgufValue* v = g.find("tokenizer.ggml.scores")) {
    const std::vector<double>* scores = nullptr;
    try {
      scores = &v->as_floats();
    } catch (const Error& e) {
      KVATTN_FAIL(file, ": metadata 'tokenizer.ggml.scores': ", e.what());
    }
    KVATTN_CHECK(scores->size() == n, file, ": tokenizer.ggml.scores has ", scores->size(),
                 " entries but tokenizer.ggml.tokens has ", n);
    for (size_t i = 0; i < n; ++i) {
      // A NaN would break the merge queue's ordering.
      KVATTN_CHECK(std::isfinite((*scores)[i]), file, ": tokenizer.ggml.scores[", i, "] = ",
                   (*scores)[i], " is not finite");
      t.scores[i] = static_cast<float>((*scores)[i]);
    }
  }
  const bool prefix = g.get_bool("tokenizer.ggml.add_space_prefix", true);
  // llama.cpp prepends " " to every span of text (each follows the start or a special token),
  // then spells spaces "▁"; decoding drops the first space again.
  t.spm.rules.push_back({SpmTextRule::Kind::kReplace, " ", std::string(kSpmSpace)});
  if (prefix) t.spm.rules.push_back({SpmTextRule::Kind::kPrepend, std::string(kSpmSpace), ""});
  t.spm.strip_leading = prefix ? 1 : 0;
}

}  // namespace kvattn::tokenizer_detail
