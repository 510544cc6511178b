// llama.cpp's GGUF pre-tokenizer names (tokenizer.ggml.pre, as src/llama-vocab.cpp maps them)
// and the regex pipelines they stand for, written for kvattn's PCRE2 splitter. llama.cpp runs
// most of them through its own code or std::regex on a "collapsed" text; where that differs from
// PCRE2 on the same pattern (whitespace, case folding, class edges) the pattern here says so.
// tests/engine/gguf_pretokenizer_test.cpp checks every pipeline against llama.cpp's own splits.
#include <initializer_list>
#include <string>

#include "engine/tokenizer/pretokenizer.h"
#include "kvattn/core/error.h"

namespace kvattn::tokenizer_detail {

namespace {

bool one_of(const std::string& s, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (s == n) return true;
  }
  return false;
}

// llama.cpp spells the contractions case by case where the published regexes say
// (?i:'s|'t|...): PCRE2's caseless matching folds by Unicode, so (?i) would also take "'ſ"
// (long s), which llama.cpp leaves as "'" + a letter run.
#define KVATTN_CONTRACTIONS R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]))"
constexpr const char* kLlamaCppLlama3 = KVATTN_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kLlamaCppQwen2 = KVATTN_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen 3.5: combining marks (\p{M}) join letter runs and leave punctuation runs.
constexpr const char* kLlamaCppQwen35 = KVATTN_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+)"
    R"(|\s+(?!\S)|\s+)";

// DeepSeek V3 / R1 (and Hunyuan dense, JoyAI, HY v4): digits in threes, CJK and kana runs,
// then an ASCII mark may lead a Latin word, letters carry their combining marks, punctuation
// and symbol runs. Spark 2.5 the same with newlines alone and single digits last.
constexpr const char* kKanaCjk = R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)";
constexpr const char* kDeepSeek3 =
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+)"
    R"(| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kSpark25 =
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+)"
    R"(| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+)";
// Tekken (Mistral Nemo) and GPT-4o (Llama 4, MiniMax M2, ...): a word is upper-case letters
// then lower-case ones or the reverse, where llama.cpp counts every letter but a-z as upper and
// every letter but A-Z as lower (its regexes say so with lookaheads; the published \p{Lu}/\p{Ll}
// split non-ASCII letters by case, llama.cpp does not).
#define KVATTN_UPPER R"(((?=[\p{L}])([^a-z])))"
#define KVATTN_LOWER R"(((?=[\p{L}])([^A-Z])))"
constexpr const char* kTekken =
    R"([^\r\n\p{L}\p{N}]?)" KVATTN_UPPER "*" KVATTN_LOWER "+"
    R"(|[^\r\n\p{L}\p{N}]?)" KVATTN_UPPER "+" KVATTN_LOWER "*"
    R"(|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kGpt4o =
    R"([^\r\n\p{L}\p{N}]?)" KVATTN_UPPER "*" KVATTN_LOWER "+" KVATTN_CONTRACTIONS "?"
    R"(|[^\r\n\p{L}\p{N}]?)" KVATTN_UPPER "+" KVATTN_LOWER "*" KVATTN_CONTRACTIONS "?"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
#undef KVATTN_UPPER
#undef KVATTN_LOWER
// Granite embedding multilingual 97M: GPT-4o's with combining marks counted as letters.
#define KVATTN_UPPER R"(((?=[\p{L}\p{M}])([^a-z])))"
#define KVATTN_LOWER R"(((?=[\p{L}\p{M}])([^A-Z])))"
constexpr const char* kGraniteEmbedMulti =
    R"([^\r\n\p{L}\p{N}]?)" KVATTN_UPPER "*" KVATTN_LOWER "+" KVATTN_CONTRACTIONS "?"
    R"(|[^\r\n\p{L}\p{N}]?)" KVATTN_UPPER "+" KVATTN_LOWER "*" KVATTN_CONTRACTIONS "?"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
#undef KVATTN_UPPER
#undef KVATTN_LOWER
// Qwen2's regex with one change each.
constexpr const char* kSeedCoder = KVATTN_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kUfakzeka =  // no contractions: Turkish suffixes after ' stay attached
    R"([^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kBailingMoe =  // one newline per whitespace piece
    R"('(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)";
constexpr const char* kMiniCpm5 = KVATTN_CONTRACTIONS  // after a cut into \p{N}{1,3}
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// EXAONE MoE: letters with their marks, space-joined words in one piece.
constexpr const char* kExaoneMoe = KVATTN_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?)"
    R"(|\s*[\r\n]|\s+(?!\S)|\s+)";
// Jais 2: Llama 3's regex, whitespace runs cut into 512, 256, ... 4, 2 or 1.
constexpr const char* kJais2 = KVATTN_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+)"
    R"(|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S))"
    R"(|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1})";
// Youtu: Hangul, CJK punctuation, bopomofo and CJK/kana runs first; then GPT-4o-like words,
// where llama.cpp's collapsed \p{Lu} / \p{Ll} / \p{Lt} / \p{Lm} / \p{Lo} are all "a letter".
constexpr const char* kYoutuCjk =
    R"([\x{AC00}-\x{D7A3}\x{3131}-\x{318E}]+|[\x{FF01}\x{2026}\x{201C}\x{201D}\x{2018}\x{2019})"
    R"(\x{2014}\x{FF1A}\x{FF1B}\x{FF0C}\x{3001}-\x{303F}\x{FE30}-\x{FE4F}]+|[\x{3105}-\x{312F}]+)"
    R"(|[\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)";
constexpr const char* kYoutu =
    R"([^\r\n\p{L}\p{N}]?[\p{L}\p{M}]*[\p{L}\p{M}]+)" KVATTN_CONTRACTIONS "?"
    R"(|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+[\p{L}\p{M}]*)" KVATTN_CONTRACTIONS "?"
    R"(|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Tiny Aya (Cohere 2 MoE): Youtu's words with digits in threes.
constexpr const char* kTinyAya =
    R"([^\r\n\p{L}\p{N}]?[\p{L}\p{M}]*[\p{L}\p{M}]+)" KVATTN_CONTRACTIONS "?"
    R"(|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+[\p{L}\p{M}]*)" KVATTN_CONTRACTIONS "?"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// AFMoE and Tiny Aya first cut digit runs into threes from the right, in llama.cpp's own code:
// each cut also takes the text since the previous one, so "a  12345" is "a  12" + "345" (which
// decides how the next regex splits "a  ": a space, then a space, not one run of two).
constexpr const char* kDigitsFromRight = R"(\P{N}*\p{N}{1,3}(?=(?:\p{N}{3})*(?!\p{N})))";
// AFMoE's CJK and Southeast Asian scripts, as written in llama.cpp (its "豈" is U+8C48, so the
// third range runs from there to U+FAFF).
constexpr const char* kAfmoeAsian =
    R"([\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{8C48}-\x{FAFF}\x{3040}-\x{309F}\x{30A0}-\x{30FF})"
    R"(\x{FF65}-\x{FF9F}\x{2F00}-\x{2FDF}\x{E40}-\x{E7F}\x{E80}-\x{EFF}\x{1780}-\x{17FF})"
    R"(\x{1000}-\x{109F}\x{AA60}-\x{AA7F}\x{A9E0}-\x{A9FF}\x{AC00}-\x{D7AF}\x{1100}-\x{11FF}]+)";
// BLOOM, Poro, GPT-3 Finnish, Viking: anything up to whitespace or one of the sentence marks
// (the parentheses and '|' are members of the class, as published).
constexpr const char* kBloom =
    R"( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{964}\x{6D4}\x{60C})]+)";
#undef KVATTN_CONTRACTIONS

// llama.cpp's whitespace is Unicode's White_Space; PCRE2's \s also takes U+180E (Mongolian
// vowel separator, a format character since Unicode 6.3), which llama.cpp puts in punctuation
// runs. GGUF patterns are written with \s and \S, rewritten to this set before compiling.
constexpr const char* kWhiteSpace =
    R"(\t-\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

std::string with_llama_cpp_whitespace(const char* pattern) {
  const std::string ws = kWhiteSpace;
  std::string out;
  bool in_class = false;  // the patterns have no literal '[' or leading ']' inside a class
  for (const char* c = pattern; *c != '\0'; ++c) {
    if (*c == '\\' && c[1] != '\0') {
      const char e = *++c;
      if (e == 's') {
        out += in_class ? ws : "[" + ws + "]";
      } else if (e == 'S') {
        KVATTN_CHECK(!in_class, "tokenizer: \\S inside a class in '", pattern, "'");
        out += "[^" + ws + "]";
      } else {
        out += {'\\', e};
      }
      continue;
    }
    if (*c == '[') in_class = true;
    if (*c == ']') in_class = false;
    out += *c;
  }
  return out;
}

// DeepSeek LLM's letter class, as its tokenizer.json lists it (the cased letters of Latin,
// Greek, Cyrillic, Armenian, Georgian, Cherokee, Glagolitic, Coptic, Deseret, Osage, Old
// Hungarian, Warang Citi, Adlam ... and their fullwidth and letterlike forms), in code points.
constexpr const char* kDeepSeekLetters =
    R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293})"
    R"(\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A})"
    R"(\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556})"
    R"(\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF})"
    R"(\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D})"
    R"(\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D})"
    R"(\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4})"
    R"(\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4})"
    R"(\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124})"
    R"(\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F})"
    R"(\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4})"
    R"(\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F})"
    R"(\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17})"
    R"(\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB})"
    R"(\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)";
// ASCII punctuation and symbols, their fullwidth forms, curly quotes, "、" and "。". The
// published class starts at U+3000, which llama.cpp turns into whitespace before matching.
constexpr const char* kDeepSeekPunct =
    R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3001}\x{3002}]+)";
// CJK ideographs U+4E00..9FA5, everything from U+0800 to U+4E00 and Hangul U+AC00..D7FF, but
// no whitespace (U+1680, U+2000.., U+3000 lie in the range; llama.cpp sees them as spaces).
constexpr const char* kDeepSeekCjk =
    R"((?:(?!\s)[\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}])+)";

}  // namespace

GgufPreTokenizer pretokenizer_for_gguf(const std::string& pre, const std::string& file) {
  auto step = [](const char* pattern) {
    return PreTokenizer::Step{std::make_shared<const Regex>(with_llama_cpp_whitespace(pattern)),
                              false, false};
  };
  GgufPreTokenizer g;
  PreTokenizer& p = g.pre;
  if (pre == "default" || pre.empty()) {
    // llama.cpp's DEFAULT (no or an unrecognised-as-default key; old GPT-NeoX-style files):
    // punctuation runs, then GPT-2, then digit runs cut in threes.
    p.steps = {step(R"([\p{P}\$\+<=>\^~\|]+)"), step(kGpt2Pattern), step(R"(\p{N}+)"),
               step("[0-9][0-9][0-9]")};
  } else if (pre == "gpt2" ||
             one_of(pre, {"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es",
                          "jina-v2-de", "a.x-4.0", "mellum", "modern-bert", "jina-v1-en",
                          "jina-v2-code", "roberta-bpe", "mpt", "olmo", "jais", "trillion",
                          "granite-docling", "exaone4"})) {
    p.steps = {step(kGpt2Pattern)};  // "gpt2": kvattn's own name from before the aliases
  } else if (one_of(pre, {"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone",
                          "minerva-7b", "mellum2"})) {
    p.steps = {step(R"(\p{N})"), step(kGpt2Pattern)};  // digits one by one, then GPT-2
  } else if (one_of(pre, {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
                          "midm-2.0", "lfm2", "jina-v5-nano"})) {
    p.steps = {step(kLlamaCppLlama3)};
    g.ignore_merges = true;
    g.add_bos = true;
  } else if (one_of(pre, {"dbrx", "smaug-bpe"})) {
    p.steps = {step(kLlamaCppLlama3)};  // Llama 3's regex, with the merges applied
  } else if (one_of(pre, {"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "stablelm2",
                          "megrez", "hunyuan", "solar-open", "grok-2"})) {
    p.steps = {step(kLlamaCppQwen2)};
  } else if (pre == "qwen35") {
    p.steps = {step(kLlamaCppQwen35)};
  } else if (pre == "falcon") {
    // DEFAULT's punctuation runs (the backquote too) and GPT-2, then digits cut in threes.
    p.steps = {step(R"([\p{P}\$\+<=>\^~\|`]+)"), step(kGpt2Pattern), step("[0-9][0-9][0-9]")};
  } else if (pre == "deepseek-llm") {
    // \z, not $: PCRE2's $ also matches before a final newline (ECMAScript's does not).
    p.steps = {step(R"([\r\n])"), step(kDeepSeekLetters), step(kDeepSeekPunct), step(R"(\s+\z)"),
               step(kDeepSeekCjk), step(R"(\p{N}+)")};
  } else if (pre == "deepseek-coder") {
    p.steps = {step(R"([\r\n])"), step(R"(\s?\p{L}+)"), step(R"(\s?\p{P}+)"), step(kDeepSeekCjk),
               step(R"(\p{N})")};
  } else if (one_of(pre, {"deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"})) {
    p.steps = {step(R"(\p{N}{1,3})"), step(kKanaCjk), step(kDeepSeek3)};
  } else if (pre == "spark2_5") {
    p.steps = {step(R"(\p{N}{1,3})"), step(kKanaCjk), step(kSpark25), step(R"(\p{N})")};
  } else if (pre == "youtu") {
    p.steps = {step(kYoutuCjk), step(kYoutu)};
    g.ignore_merges = true;
  } else if (one_of(pre, {"chatglm-bpe", "glm4", "glm5"})) {
    p.steps = {step(kLlamaCppLlama3)};
    g.ignore_merges = pre != "chatglm-bpe";
  } else if (one_of(pre, {"tiny_aya", "cohere2moe"})) {
    p.steps = {step(kDigitsFromRight), step(kTinyAya)};
  } else if (pre == "afmoe") {
    p.steps = {step(kDigitsFromRight), step(kAfmoeAsian), step(kDeepSeek3)};
  } else if (pre == "tekken") {
    p.steps = {step(kTekken)};
    g.ignore_merges = true;
    g.add_bos = true;
  } else if (one_of(pre, {"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"})) {
    p.steps = {step(kGpt4o)};
  } else if (pre == "granite-embed-multi-97m") {
    p.steps = {step(kGraniteEmbedMulti)};
    g.ignore_merges = true;
  } else if (pre == "seed-coder") {
    p.steps = {step(kSeedCoder)};
  } else if (pre == "ufakzeka") {
    p.steps = {step(kUfakzeka)};
  } else if (one_of(pre, {"bailingmoe", "bailingmoe2", "llada-moe"})) {
    p.steps = {step(kBailingMoe)};
  } else if (pre == "laguna") {
    p.steps = {step(R"([^\n]+|\n+)"), step(kLlamaCppQwen2)};  // lines first, then Qwen2
  } else if (pre == "exaone-moe") {
    p.steps = {step(kExaoneMoe)};
  } else if (pre == "minicpm5") {
    p.steps = {step(R"(\p{N}{1,3})"), step(kMiniCpm5)};
    g.ignore_merges = true;
  } else if (pre == "jais-2") {
    p.steps = {step(kJais2)};
  } else if (one_of(pre, {"bloom", "poro-chat", "gpt3-finnish"})) {
    p.steps = {step(kBloom)};
  } else if (pre == "viking") {
    p.steps = {step(kBloom), step(R"(\p{N})")};
  } else {
    KVATTN_FAIL(file, ": tokenizer.ggml.pre '", pre, "' is not supported (default, gpt-2, "
                "starcoder, llama-bpe, dbrx, qwen2, qwen35, falcon, deepseek-llm / -coder / -v3, "
                "tekken, gpt-4o, ... and their aliases as in llama.cpp's llama-vocab.cpp; not: "
                "chameleon, kimi-k2, superbpe, gemma4, sarvam-moe, whitespace)");
  }
  return g;
}

}  // namespace kvattn::tokenizer_detail
