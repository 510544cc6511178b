// tokenizer.json BPE with byte_fallback (Llama 2, Mistral, Gemma as converted by transformers).
// Supported: normalizers Prepend, Replace (string pattern), NFC/NFD/NFKC/NFKD (utf8proc) and
// Sequence of those; pre-tokenizer none or Metaspace; decoders Replace (string), ByteFallback,
// Metaspace, Fuse and Strip after Fuse, alone or in a Sequence. Other steps (Lowercase, Strip,
// Precompiled, ...) are rejected by name.
#include "engine/model_files/json_util.h"
#include "engine/tokenizer/tokenizer_impl.h"

namespace kvattn::tokenizer_detail {

using nlohmann::json;

namespace {

struct Ctx {
  const std::string& file;
  std::string type_of(const json& node, const std::string& where) const {
    KVATTN_CHECK(node.is_object(), file, ": ", where, " must be an object");
    return json_string(json_field(node, "type", file), where + ".type", file);
  }
  std::string str(const json& node, const char* key, const std::string& where) const {
    return json_string(json_field(node, key, file), where + "." + key, file);
  }
  bool flag(const json& node, const char* key, bool fallback) const {
    auto it = node.find(key);
    return it == node.end() || it->is_null() ? fallback : json_bool(*it, key, file);
  }
  // Replace's {"String": "x"}; a Regex pattern is not supported.
  std::string pattern(const json& node, const std::string& where) const {
    const json& p = json_field(node, "pattern", file);
    KVATTN_CHECK(p.is_object() && p.contains("String"), file, ": ", where,
                 " with a non-string pattern is not supported with byte_fallback BPE");
    std::string s = json_string(p.at("String"), where + ".pattern.String", file);
    KVATTN_CHECK(!s.empty(), file, ": ", where, ".pattern.String must not be empty");
    return s;
  }
  SpmMetaspace metaspace(const json& node, const std::string& where) const {
    SpmMetaspace m;
    if (auto r = node.find("replacement"); r != node.end()) {
      m.replacement = json_string(*r, where + ".replacement", file);
      KVATTN_CHECK(!m.replacement.empty(), file, ": ", where, ".replacement must not be empty");
    }
    if (auto p = node.find("prepend_scheme"); p != node.end() && !p->is_null()) {
      const std::string& s = json_string(*p, where + ".prepend_scheme", file);
      using P = SpmMetaspace::Prepend;
      KVATTN_CHECK(s == "always" || s == "first" || s == "never", file, ": ", where,
                   ".prepend_scheme '", s, "' is not one of always, first, never");
      m.prepend = s == "always" ? P::kAlways : s == "first" ? P::kFirst : P::kNever;
    } else if (!flag(node, "add_prefix_space", true)) {  // before tokenizers 0.14
      m.prepend = SpmMetaspace::Prepend::kNever;
    }
    m.split = flag(node, "split", true);
    return m;
  }
};

void add_normalizer(const Ctx& c, const json& node, SpmConfig& spm) {
  if (node.is_null()) return;
  const std::string type = c.type_of(node, "normalizer");
  if (type == "Sequence") {
    const json& list = json_field(node, "normalizers", c.file);
    KVATTN_CHECK(list.is_array(), c.file, ": normalizer.normalizers must be an array");
    for (const json& sub : list) add_normalizer(c, sub, spm);
  } else if (type == "Prepend") {
    spm.rules.push_back({SpmTextRule::Kind::kPrepend, c.str(node, "prepend", "Prepend"), ""});
  } else if (type == "Replace") {
    spm.rules.push_back({SpmTextRule::Kind::kReplace, c.pattern(node, "normalizer Replace"),
                         c.str(node, "content", "Replace")});
  } else {
    const auto form = unicode_form(type);
    KVATTN_CHECK(form.has_value(), c.file, ": normalizer '", type,
                 "' is not supported with byte_fallback BPE (Prepend, Replace, NFC, NFD, NFKC, "
                 "NFKD, Sequence)");
    spm.rules.push_back({SpmTextRule::Kind::kUnicode, "", "", *form});
  }
}

void read_decoder(const Ctx& c, const json& node, SpmConfig& spm) {
  KVATTN_CHECK(!node.is_null(), c.file, ": byte_fallback BPE needs a decoder (Replace, "
               "ByteFallback, Fuse, Strip or Metaspace)");
  std::vector<const json*> steps;
  if (c.type_of(node, "decoder") == "Sequence") {
    const json& list = json_field(node, "decoders", c.file);
    KVATTN_CHECK(list.is_array(), c.file, ": decoder.decoders must be an array");
    for (const json& sub : list) steps.push_back(&sub);
  } else {
    steps.push_back(&node);
  }
  bool fused = false;
  for (const json* step : steps) {
    const std::string type = c.type_of(*step, "decoder step");
    // Per-token steps must come before Fuse; only Strip may follow it (it then cuts the text).
    KVATTN_CHECK(!fused || type == "Strip", c.file, ": decoder step '", type,
                 "' after Fuse is not supported");
    if (type == "Replace") {
      spm.steps.push_back({SpmDecodeStep::Kind::kReplace, c.pattern(*step, "decoder Replace"),
                           c.str(*step, "content", "Replace")});
    } else if (type == "ByteFallback") {
      spm.steps.push_back({SpmDecodeStep::Kind::kByteFallback, "", ""});
    } else if (type == "Metaspace") {
      const SpmMetaspace m = c.metaspace(*step, "decoder Metaspace");
      spm.steps.push_back({SpmDecodeStep::Kind::kMetaspace, m.replacement, " ",
                           m.prepend != SpmMetaspace::Prepend::kNever});
    } else if (type == "Fuse") {
      fused = true;
    } else if (type == "Strip") {
      KVATTN_CHECK(fused, c.file, ": decoder Strip before Fuse is not supported");
      KVATTN_CHECK(c.str(*step, "content", "Strip") == " ", c.file,
                   ": decoder Strip of anything but ' ' is not supported");
      const int64_t start = json_int(json_field(*step, "start", c.file), "Strip.start", c.file);
      const int64_t stop = json_int(json_field(*step, "stop", c.file), "Strip.stop", c.file);
      KVATTN_CHECK(start >= 0 && start <= 64 && stop >= 0 && stop <= 64, c.file,
                   ": decoder Strip start ", start, " / stop ", stop, " must lie in [0, 64]");
      spm.strip_leading += static_cast<int>(start);
      spm.strip_trailing += static_cast<int>(stop);
    } else {
      KVATTN_FAIL(c.file, ": decoder '", type, "' is not supported with byte_fallback BPE "
                  "(Replace, ByteFallback, Fuse, Strip, Metaspace)");
    }
  }
}

}  // namespace

void read_hf_byte_fallback(const json& j, Impl& t) {
  const Ctx c{t.name};
  t.model = Model::kSpmByRank;
  t.spm.fuse_unk = c.flag(json_field(j, "model", c.file), "fuse_unk", false);
  if (auto n = j.find("normalizer"); n != j.end()) add_normalizer(c, *n, t.spm);
  if (auto p = j.find("pre_tokenizer"); p != j.end() && !p->is_null()) {
    const std::string type = c.type_of(*p, "pre_tokenizer");
    KVATTN_CHECK(type == "Metaspace", c.file, ": pre_tokenizer type '", type,
                 "' is not supported with byte_fallback BPE (Metaspace or none)");
    t.spm.metaspace = true;
    t.spm.meta = c.metaspace(*p, "pre_tokenizer Metaspace");
  }
  auto d = j.find("decoder");
  read_decoder(c, d == j.end() ? json() : *d, t.spm);
}

}  // namespace kvattn::tokenizer_detail
