// Tokenizer from GGUF metadata (the keys llama.cpp's converter writes). The SentencePiece keys
// of tokenizer.ggml.model "llama" are read by load_gguf_spm.cpp.
#include <algorithm>
#include <cctype>
#include <string>

#include "engine/tokenizer/tokenizer_impl.h"

namespace kvattn {

using tokenizer_detail::Impl;

namespace {
constexpr int64_t kUnknown = tokenizer_detail::kTypeUnknown;
constexpr int64_t kControl = tokenizer_detail::kTypeControl;
constexpr int64_t kUserDefined = tokenizer_detail::kTypeUserDefined;
}  // namespace

Tokenizer Tokenizer::from_gguf(const GgufFile& g) {
  auto t = std::make_shared<Impl>();
  t->name = g.path();
  const std::string& file = t->name;
  KVATTN_CHECK(g.find("tokenizer.ggml.model") != nullptr, file,
               ": tokenizer.ggml.model is missing (the file has no tokenizer)");
  const std::string model = g.get_string("tokenizer.ggml.model", "");
  KVATTN_CHECK(model == "gpt2" || model == "llama", file, ": tokenizer.ggml.model is '", model,
               "' (supported: 'gpt2', byte-level BPE, and 'llama', SentencePiece BPE)");
  const bool spm = model == "llama";
  auto key = [&](const char* k) -> const GgufValue& { return g.get(k); };
  auto strings = [&](const char* k) -> const std::vector<std::string>& {
    try {
      return key(k).as_strings();
    } catch (const Error& e) {
      KVATTN_FAIL(file, ": metadata '", k, "': ", e.what());
    }
  };
  t->tokens = strings("tokenizer.ggml.tokens");
  KVATTN_CHECK(!t->tokens.empty() &&
                   static_cast<int64_t>(t->tokens.size()) <= tokenizer_detail::kMaxVocab,
               file, ": tokenizer.ggml.tokens has ", t->tokens.size(), " entries");
  if (const GgufValue* types = g.find("tokenizer.ggml.token_type")) {
    const std::vector<int64_t>* tt = nullptr;
    try {
      tt = &types->as_ints();
    } catch (const Error& e) {
      KVATTN_FAIL(file, ": metadata 'tokenizer.ggml.token_type': ", e.what());
    }
    KVATTN_CHECK(tt->size() == t->tokens.size(), file, ": tokenizer.ggml.token_type has ",
                 tt->size(), " entries but tokenizer.ggml.tokens has ", t->tokens.size());
    for (size_t i = 0; i < tt->size(); ++i) {
      const int64_t type = (*tt)[i];
      if (type == kControl || type == kUnknown || type == kUserDefined) {
        t->added.push_back({t->tokens[i], static_cast<int32_t>(i), type != kUserDefined});
      }
    }
    if (spm) tokenizer_detail::read_gguf_token_types(*tt, *t);
  }
  // GGUF has no strip flags; llama.cpp sets them by the model's name: Phi-3's special tokens
  // (and </s>) eat the whitespace after them, except <unk>, <s> and <|endoftext|>, as HF's
  // Phi-3 tokenizer.json says with rstrip.
  std::string name = g.get_string("general.name", "");
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
    for (auto& a : t->added) {
      a.rstrip = a.content != "<unk>" && a.content != "<s>" && a.content != "<|endoftext|>";
    }
  }
  if (spm) tokenizer_detail::read_gguf_spm(g, *t);
  if (!spm && g.find("tokenizer.ggml.merges") != nullptr) {
    const auto& merges = strings("tokenizer.ggml.merges");
    t->merges.reserve(merges.size());
    for (size_t r = 0; r < merges.size(); ++r) {
      const std::string& m = merges[r];
      const size_t sp = m.find(' ', 1);
      KVATTN_CHECK(sp != std::string::npos, file, ": tokenizer.ggml.merges[", r, "] = '", m,
                   "' has no space separating its two parts");
      t->merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
    }
  }
  bool add_bos_default = spm;  // llama.cpp's: SentencePiece and the Llama 3 pre types add BOS
  if (!spm) {
    auto gp = tokenizer_detail::pretokenizer_for_gguf(
        g.get_string("tokenizer.ggml.pre", "default"), file);
    t->pre = std::move(gp.pre);
    t->ignore_merges = gp.ignore_merges;
    add_bos_default = gp.add_bos;
  }
  // llama.cpp's SentencePiece defaults: <unk> 0, <s> 1, </s> 2, and BOS is added.
  const auto n = static_cast<int64_t>(t->tokens.size());
  auto id = [&](const char* k, int64_t spm_default) {
    const int64_t v = g.get_int(k, spm && spm_default < n ? spm_default : -1);
    KVATTN_CHECK(v >= -1 && v < static_cast<int64_t>(t->tokens.size()), file, ": ", k, " = ", v,
                 " is outside the vocabulary of ", t->tokens.size());
    return static_cast<int32_t>(v);
  };
  t->unk = id("tokenizer.ggml.unknown_token_id", 0);
  t->bos = id("tokenizer.ggml.bos_token_id", 1);
  t->eos = id("tokenizer.ggml.eos_token_id", 2);
  t->add_bos = g.get_bool("tokenizer.ggml.add_bos_token", add_bos_default);
  const std::string tmpl = g.get_string("tokenizer.chat_template", "");
  t->chat_template = ChatTemplate::detect(tmpl);
  t->finalize();
  if (!t->chat_template && tmpl.empty() && t->ids.count("<|im_start|>")) {
    t->chat_template = ChatTemplate{};  // ChatML vocabulary without a template: plain ChatML
  }
  return Tokenizer(std::move(t));
}

}  // namespace kvattn
