// Tokenizer from HF tokenizer.json (+ tokenizer_config.json). Supported: model BPE over the
// byte-level alphabet; pre-tokenizers ByteLevel, Split (regex or string; Isolated or Removed),
// Digits and Sequence of those; normalizers NFC, NFD, NFKC, NFKD (utf8proc) and Sequence of
// those (Qwen2/2.5/3 declare NFC). BPE with byte_fallback (SentencePiece-style) reads its
// normalizer, pre-tokenizer and decoder in load_hf_spm.cpp.
#include <unordered_set>

#include "engine/model_files/json_util.h"
#include "engine/tokenizer/tokenizer_impl.h"

namespace kvattn {

using tokenizer_detail::Impl;
using tokenizer_detail::PreTokenizer;
using tokenizer_detail::Regex;
using nlohmann::json;

namespace {

std::string type_of(const json& node, const std::string& where, const std::string& file) {
  KVATTN_CHECK(node.is_object(), file, ": ", where, " must be an object");
  return json_string(json_field(node, "type", file), where + ".type", file);
}

std::string string_or_empty(const json& node, const char* key) {
  auto it = node.find(key);
  return it != node.end() && it->is_string() ? it->get<std::string>() : std::string();
}

bool bool_or(const json& node, const char* key, bool fallback, const std::string& file) {
  auto it = node.find(key);
  return it == node.end() || it->is_null() ? fallback : json_bool(*it, key, file);
}

void add_pre_steps(const json& node, PreTokenizer& pre, bool& byte_level, const std::string& file) {
  if (node.is_null()) return;
  const std::string type = type_of(node, "pre_tokenizer", file);
  // ByteLevel maps bytes to its alphabet only at BPE time here, so later steps would see raw text
  // where HF sees the mapped one; no supported family splits after ByteLevel.
  KVATTN_CHECK(!byte_level || type == "Sequence", file, ": pre_tokenizer step '", type,
               "' after ByteLevel is not supported");
  auto regex_step = [&](const std::string& pattern, bool literal, bool drop) {
    pre.steps.push_back({std::make_shared<const Regex>(pattern, literal), drop, false});
  };
  if (type == "Sequence") {
    const json& list = json_field(node, "pretokenizers", file);
    KVATTN_CHECK(list.is_array(), file, ": pre_tokenizer.pretokenizers must be an array");
    for (const json& sub : list) add_pre_steps(sub, pre, byte_level, file);
  } else if (type == "ByteLevel") {
    KVATTN_CHECK(!byte_level, file, ": pre_tokenizer has two ByteLevel steps");
    byte_level = true;
    const bool prefix = bool_or(node, "add_prefix_space", false, file);
    const bool use_regex = bool_or(node, "use_regex", true, file);
    pre.steps.push_back({use_regex ? std::make_shared<const Regex>(tokenizer_detail::kGpt2Pattern)
                                   : nullptr,
                         false, prefix});
  } else if (type == "Split") {
    const json& pattern = json_field(node, "pattern", file);
    KVATTN_CHECK(pattern.is_object(), file, ": pre_tokenizer Split pattern must be an object");
    const std::string behavior =
        json_string(json_field(node, "behavior", file), "Split.behavior", file);
    KVATTN_CHECK(behavior == "Isolated" || behavior == "Removed", file, ": Split behavior '",
                 behavior, "' is not supported (Isolated, Removed)");
    KVATTN_CHECK(!bool_or(node, "invert", false, file), file,
                 ": Split with invert = true is not supported");
    if (auto re = pattern.find("Regex"); re != pattern.end()) {
      regex_step(json_string(*re, "Split.pattern.Regex", file), false, behavior == "Removed");
    } else {
      regex_step(json_string(json_field(pattern, "String", file), "Split.pattern.String", file),
                 true, behavior == "Removed");
    }
  } else if (type == "Digits") {
    regex_step(bool_or(node, "individual_digits", false, file) ? R"(\p{N})" : R"(\p{N}+)", false,
               false);
  } else {
    KVATTN_FAIL(file, ": pre_tokenizer type '", type, "' is not supported");
  }
}

void add_normalizer(const json& node, std::vector<tokenizer_detail::UnicodeForm>& forms,
                    const std::string& file) {
  if (node.is_null()) return;
  const std::string type = type_of(node, "normalizer", file);
  if (type == "Sequence") {
    const json& list = json_field(node, "normalizers", file);
    KVATTN_CHECK(list.is_array(), file, ": normalizer.normalizers must be an array");
    for (const json& sub : list) add_normalizer(sub, forms, file);
    return;
  }
  const auto form = tokenizer_detail::unicode_form(type);
  KVATTN_CHECK(form.has_value(), file, ": normalizer '", type,
               "' is not supported with byte-level BPE (NFC, NFD, NFKC, NFKD, Sequence)");
  forms.push_back(*form);
}

// "bos_token": "<s>" or {"content": "<s>", ...}.
std::string special_token_text(const json& cfg, const char* key, const std::string& file) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return {};
  if (it->is_object()) return json_string(json_field(*it, "content", file), key, file);
  return json_string(*it, key, file);
}

std::string chat_template_source(const json& cfg, const std::string& file) {
  auto it = cfg.find("chat_template");
  if (it == cfg.end() || it->is_null()) return {};
  if (it->is_string()) return it->get<std::string>();
  KVATTN_CHECK(it->is_array(), file, ": chat_template must be a string or a list");
  for (const json& named : *it) {
    if (named.is_object() && string_or_empty(named, "name") == "default") {
      return json_string(json_field(named, "template", file), "chat_template.template", file);
    }
  }
  return {};
}

}  // namespace

Tokenizer Tokenizer::from_hf_json(const std::string& tokenizer_json_path,
                                  const std::string& tokenizer_config_path) {
  const std::string text = read_text_file(tokenizer_json_path);
  const std::string config = tokenizer_config_path.empty()
                                 ? std::string()
                                 : read_text_file(tokenizer_config_path);
  return from_hf_json_text(text, config, tokenizer_json_path);
}

Tokenizer Tokenizer::from_hf_json_text(std::string_view tokenizer_json,
                                       std::string_view tokenizer_config_json,
                                       const std::string& name) {
  auto t = std::make_shared<Impl>();
  t->name = name;
  const std::string& file = t->name;
  const json j = parse_json(tokenizer_json, file);
  KVATTN_CHECK(j.is_object(), file, ": must hold a JSON object");

  const json& model = json_field(j, "model", file);
  KVATTN_CHECK(model.is_object(), file, ": field 'model' must be an object");
  if (auto type = model.find("type"); type != model.end()) {
    const std::string& m = json_string(*type, "model.type", file);
    KVATTN_CHECK(m == "BPE", file, ": model.type '", m, "' is not supported (BPE)");
  }
  const bool byte_fallback = bool_or(model, "byte_fallback", false, file);
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    auto it = model.find(k);
    KVATTN_CHECK(it == model.end() || it->is_null() || json_string(*it, k, file).empty(), file,
                 ": model.", k, " is not supported");
  }
  t->ignore_merges = bool_or(model, "ignore_merges", false, file);

  const json& vocab = json_field(model, "vocab", file);
  KVATTN_CHECK(vocab.is_object(), file, ": model.vocab must be an object");
  int64_t size = 0;
  auto check_new_id = [&](int64_t id, const std::string& token) {
    KVATTN_CHECK(id >= 0 && id < tokenizer_detail::kMaxVocab, file, ": token '", token,
                 "' has id ", id, " outside [0, ", tokenizer_detail::kMaxVocab, ")");
    size = std::max(size, id + 1);
  };
  std::vector<std::pair<int64_t, std::string>> entries;
  entries.reserve(vocab.size());
  for (const auto& [token, id] : vocab.items()) {
    entries.emplace_back(json_int(id, "model.vocab['" + token + "']", file), token);
    check_new_id(entries.back().first, token);
  }
  if (auto added = j.find("added_tokens"); added != j.end() && !added->is_null()) {
    KVATTN_CHECK(added->is_array(), file, ": added_tokens must be an array");
    for (const json& a : *added) {
      const std::string& content = json_string(json_field(a, "content", file), "content", file);
      const int64_t id = json_int(json_field(a, "id", file), "added_tokens.id", file);
      check_new_id(id, content);
      t->added.push_back({content, static_cast<int32_t>(id), bool_or(a, "special", false, file),
                          bool_or(a, "lstrip", false, file), bool_or(a, "rstrip", false, file)});
    }
  }
  // Real vocabularies are dense; a few holes are tolerated, a forged id of 10^7 is not.
  std::unordered_set<int64_t> defined;
  for (const auto& e : entries) defined.insert(e.first);
  for (const auto& a : t->added) defined.insert(a.id);
  const auto distinct = static_cast<int64_t>(defined.size());
  KVATTN_CHECK(size <= distinct + 4096, file, ": token ids reach ", size - 1, " but only ",
               distinct, " tokens are defined (too sparse)");
  t->tokens.resize(static_cast<size_t>(size));
  for (auto& [id, token] : entries) t->tokens[id] = std::move(token);
  for (const auto& a : t->added) {
    if (t->tokens[a.id].empty()) t->tokens[a.id] = a.content;
  }

  const json& merges = json_field(model, "merges", file);
  KVATTN_CHECK(merges.is_array(), file, ": model.merges must be an array");
  t->merges.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    const json& m = merges[r];
    const std::string where = "model.merges[" + std::to_string(r) + "]";
    if (m.is_array()) {  // ["a", "b"] (tokenizers >= 0.20)
      KVATTN_CHECK(m.size() == 2, file, ": ", where, " must hold two strings");
      t->merges.emplace_back(json_string(m[0], where, file), json_string(m[1], where, file));
    } else {  // "a b"
      const std::string& s = json_string(m, where, file);
      const size_t sp = s.find(' ', 1);
      KVATTN_CHECK(sp != std::string::npos, file, ": ", where, " = '", s, "' has no space");
      t->merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    }
  }

  if (byte_fallback) {
    tokenizer_detail::read_hf_byte_fallback(j, *t);
  } else {
    if (auto n = j.find("normalizer"); n != j.end()) add_normalizer(*n, t->unicode_forms, file);
    bool byte_level = false;
    if (auto p = j.find("pre_tokenizer"); p != j.end()) add_pre_steps(*p, t->pre, byte_level, file);
    KVATTN_CHECK(byte_level, file, ": pre_tokenizer has no ByteLevel step (byte-level BPE needs "
                 "one; SentencePiece-style BPE sets byte_fallback)");
  }

  auto lookup = [&](const std::string& token) -> int32_t {
    for (size_t i = 0; i < t->tokens.size(); ++i) {
      if (t->tokens[i] == token) return static_cast<int32_t>(i);
    }
    return -1;
  };
  if (auto unk = model.find("unk_token"); unk != model.end() && !unk->is_null()) {
    t->unk = lookup(json_string(*unk, "model.unk_token", file));
  }
  // TemplateProcessing whose single-sequence template starts with a special token adds BOS.
  if (auto pp = j.find("post_processor"); pp != j.end() && pp->is_object()) {
    auto single = pp->find("single");
    if (string_or_empty(*pp, "type") == "TemplateProcessing" && single != pp->end() &&
        single->is_array() && !single->empty() && (*single)[0].is_object()) {
      auto st = (*single)[0].find("SpecialToken");
      if (st != (*single)[0].end() && st->is_object()) {
        t->bos = lookup(json_string(json_field(*st, "id", file), "SpecialToken.id", file));
        t->add_bos = t->bos >= 0;
      }
    }
  }
  std::string tmpl;
  if (!tokenizer_config_json.empty()) {
    const std::string cfg_name = name + " (tokenizer_config)";
    const json cfg = parse_json(tokenizer_config_json, cfg_name);
    KVATTN_CHECK(cfg.is_object(), cfg_name, ": must hold a JSON object");
    if (auto s = special_token_text(cfg, "bos_token", cfg_name); !s.empty()) t->bos = lookup(s);
    if (auto s = special_token_text(cfg, "eos_token", cfg_name); !s.empty()) t->eos = lookup(s);
    t->add_bos = bool_or(cfg, "add_bos_token", t->add_bos, cfg_name);
    tmpl = chat_template_source(cfg, cfg_name);
    t->chat_template = ChatTemplate::detect(tmpl);
  }
  t->finalize();
  if (!t->chat_template && tmpl.empty() && t->ids.count("<|im_start|>")) t->chat_template = ChatTemplate{};
  return Tokenizer(std::move(t));
}

}  // namespace kvattn
