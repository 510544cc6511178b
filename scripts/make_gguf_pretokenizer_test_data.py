#!/usr/bin/env python3
"""Writes tests/engine/gguf_pretokenizer_test_data.inc: llama.cpp's own pre-tokenizer splits.

For each GGUF `tokenizer.ggml.pre` name below, llama.cpp's `unicode_regex_split` (the function
its BPE tokenizer calls, with the regex list llama-vocab.cpp gives that name) splits every input
text; the test checks kvattn's `pretokenizer_for_gguf(name).pre.run(text)` gives the same pieces.
The splits are what is new per pre name; no vocabulary is needed for them.

Needs a llama.cpp source tree and a build of it (libllama.a, any backend):
    python3 scripts/make_gguf_pretokenizer_test_data.py --llama-cpp SRC --lib SRC/build/src/libllama.a
Nothing is copied by hand: the regex lists and the name -> type map are read from
SRC/src/llama-vocab.cpp, the string literals pasted as written into a small C++ driver that is
compiled against SRC/src/unicode.h and the library. The inputs are llama.cpp's test-tokenizer-0
texts (SRC/models/ggml-vocab-{falcon,qwen35}.gguf.inp) plus EXTRA below.
Session 52 used the llama.cpp vendored in llama-cpp-python 0.3.36 (PyPI sdist).
"""
import argparse
import os
import re
import subprocess
import tempfile

# The names whose splits are checked, one per regex list: session 52's new ones first, then one
# of each pipeline kvattn had (regressions, and the case-folding of contractions).
PRE_NAMES = ["falcon", "deepseek-llm", "deepseek-coder", "qwen35", "deepseek-v3", "spark2_5",
             "tekken", "gpt-4o", "granite-embed-multi-97m", "seed-coder", "ufakzeka",
             "bailingmoe", "laguna", "exaone-moe", "minicpm5", "jais-2", "bloom", "viking",
             "youtu", "chatglm-bpe", "tiny_aya", "afmoe", "grok-2", "hunyuan", "llama4", "exaone4",
             "default", "gpt-2", "starcoder", "llama-bpe", "qwen2", "dbrx"]

# Adversarial inputs: combining marks, digits of other scripts, CJK, emoji, whitespace runs and
# non-ASCII whitespace, apostrophes (and the long s, which a case-insensitive regex folds to s),
# newlines, punctuation and symbols of every kind, the letter ranges of DeepSeek's class edges.
EXTRA = [
    "'ſ", "'S 'T 'RE 'VE 'M 'LL 'D", "I'LL DON'T we'Ve", "it's 'tis o'clock ''", "'K 'K",
    "ǅemal ǈ", "Mr. O'Neil's it’s", "١٢٣٤٥ ٦", "１２３４５６", "²³ ½ Ⅻ ⑤", "12345678901234567890",
    "3.14159 1,000,000", "$100,000.50", "a+b=c <=> x^y ~~~ || `cmd`", "\r\n", "a\r\nb\r\n\r\nc",
    "  \n  x", "\u00a0x\u00a0", "x\u3000y", "x\u3000\u3000", "\u3000。、", "\t\t\tfoo", "foo   ",
    " " * 40 + "x", "\n" * 7 + "x", "e\u0301 n\u0303o", "a\u0301\u0302\u0303b", " \u0301x",
    "\u0301\u0301", "x \u0301", "नमस्ते दुनिया", "ภาษาไทย", "こんにちは世界", "カタカナ ｶﾀｶﾅ",
    "안녕하세요", "ㄱㄴㄷ", "你好，世界！", "龥龦 一丁", "ࠀ ࡀ ஐ", "👨‍👩‍👧‍👦 🇺🇸 🦙", "def f(x):\n    return x**2\n",
    "\f\v\x02", "▁Hello ▁ ▁▁", " \n ", "@@@ ### !!! ???", "ÀÉÎÕÜ àéîõü ß ẞ × ÷", "Ωμέγα ΑΒΓ ϐϑ",
    "Привет, мир!", "׳״ עברית", "مرحبا بالعالم", "\U0001F600\U0001F601x", "a\u200bb\u200dc",
    "CamelCaseWordsHERE", "snake_case_var = 42", "https://example.com/path?q=1&r=2", "C++ C# F#",
    "...", "--", "—–", "'", "''", "'s", "\"quoted\"", "“quoted” ‘single’ „low‟", "！＂＃／：～",
    "ａｂｃ ＡＢＣ", "µ ª º ƻ ǀ ʔ ʰ", "Ꭰ ᏸ ᲐᲑ ᴀᴫᴬ ᵫ ᶛ", "ℂ ℇ ℊ Ω K Å ℮ ⅎ Ↄ", "ⰀⱻⱼⱾ ⳤ ⳫⳲ",
    "Ꙁꙮ ꚀꚜꜢꝰ ꞈꞋ ꭰ", "ﬀﬆ ﬓﬗ", "𐐀𐑏𐒰 𐲀 𑢠 𞤀", "x \t\n y", "x  \u2028 y", "tab\there",
    "end with spaces  ", "  lead", "\n\n\n", "\r\r", "a\n\n b", "   \n\n   ", "1 22 333 4444 55555",
    "0x1F 1e10 3/4", "٣.١٤ ۱۲۳ ߀߁ ०१२", "Ⅰ Ⅱ ⅰ ↉", "a1b2c3", "100%! (really?) [yes] {no}",
    "<|im_start|>user\nhi<|im_end|>", "x\u0085y\u00a0\u1680z\u2000\u200a\u202f\u205f",
    "x\u180ey", "\ufeffBOM", "\U0001F3FB\U0001F44D\U0001F3FD", "ǲ ǳ Ǳ", "İstanbul ıi",
    "ſtraße ẞtrasse", "ﷺ ﷽", "\U000E0041\U000E007F", "\ue000\uf8ff", "\u0378\u0379",
    "\u2060\u00ad", "a'b'c'", "'  s", "' s", "x'''y", "'ll've're", "3'd 4's",
    "!\u180e\u180e a\u180e", "\u180e \u180e\n", "한국어！…“a”—：；，、〿︰﹏ ㄅㄆ ㄱㅏ",
    "a  12345 x\t678\n 9", "²³12 ½1234 ١٢٣٤", "x1234567y 123456 1", "豈 ไทย ລາວ ខ្មែរ မြန်မာ ꩠ ꧠ",
    # Code points newer than Unicode 14 (CJK Extension I, Garay) whose pieces agree although
    # PCRE2 10.42's tables (Unicode 14) call them unassigned. Not here: a letter of Unicode 15+
    # after a space and before a letter ("\U0001E030x"), where they disagree (docs/notes/tokenizers.md).
    "\U0002EBF0\U0002EBF1", "\U00010D50\U00010D40\U00010D41",
]


def c_string(s: str) -> str:
    out = []
    for b in s.encode("utf-8"):
        if 0x20 <= b < 0x7F and chr(b) not in '"\\?':
            out.append(chr(b))
        else:
            out.append("\\%03o" % b)  # octal: at most three digits, never runs into the next
    return '"' + "".join(out) + '"'


def read_inp(path: str) -> list:
    raw = open(path, "rb").read().decode("utf-8")
    parts = raw.split("\n__ggml_vocab_test__\n")
    return [p for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def regex_lists(vocab_cpp: str) -> tuple:
    """(type -> [C string literal, as written], pre name -> type) from llama-vocab.cpp."""
    src = open(vocab_cpp, encoding="utf-8").read()
    ctor = src[src.index("llm_tokenizer_bpe(const llama_vocab & vocab)"):]
    ctor = ctor[:ctor.index("std::vector<std::string> regex_exprs;")]
    lists = {}
    pending = []
    # Case labels gather until the next "regex_exprs = {" block, which they all share.
    for m in re.finditer(r"case (LLAMA_VOCAB_PRE_TYPE_\w+):|default:|regex_exprs = \{(.*?)\};",
                         ctor, re.S):
        if m.group(0).startswith("case"):
            pending.append(m.group(1))
        elif m.group(0) == "default:":
            pending.append("LLAMA_VOCAB_PRE_TYPE_DEFAULT")
        else:
            lits = []
            for ln in m.group(2).splitlines():
                code = ln.strip()
                if code.startswith('"'):  # comment lines hold the original regexes: skip
                    lits.append(re.match(r'("(?:[^"\\]|\\.)*")', code).group(1))
            for t in pending:
                lists[t] = lits
            pending = []
    names = {"default": "LLAMA_VOCAB_PRE_TYPE_DEFAULT"}
    load = src[src.index('tokenizer_pre == "default"'):]
    load = load[:load.index("unknown pre-tokenizer type")]
    for m in re.finditer(r"((?:tokenizer_pre == \"[^\"]+\"\s*\|*\s*)+)\)\s*\{\s*pre_type = "
                         r"(LLAMA_VOCAB_PRE_TYPE_\w+)", load):
        for n in re.findall(r'"([^"]+)"', m.group(1)):
            names[n] = m.group(2)
    return lists, names


DRIVER = r"""
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>
#include "unicode.h"
static const std::vector<std::vector<std::string>> kLists = {
%s
};
int main(int argc, char** argv) {
  std::ifstream f(argv[1], std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::string> texts;
  for (size_t pos = 0;;) {  // texts separated by NUL, the last one included even if empty
    const size_t next = raw.find('\0', pos);
    texts.push_back(raw.substr(pos, next == std::string::npos ? std::string::npos : next - pos));
    if (next == std::string::npos) break;
    pos = next + 1;
  }
  for (const auto& list : kLists) {
    for (const auto& t : texts) {
      // Empty text has no pieces (llama.cpp never splits it; AFMoE's splitter would throw).
      if (t.empty()) {
        fputc('\1', stdout);
        continue;
      }
      for (const auto& piece : unicode_regex_split(t, list, false)) {
        fwrite(piece.data(), 1, piece.size(), stdout);
        fputc('\0', stdout);
      }
      fputc('\1', stdout);
    }
  }
}
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-cpp", required=True, help="llama.cpp source tree")
    ap.add_argument("--lib", required=True, help="its libllama.a")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests",
                                                  "engine", "gguf_pretokenizer_test_data.inc"))
    a = ap.parse_args()
    lists, names = regex_lists(os.path.join(a.llama_cpp, "src", "llama-vocab.cpp"))
    texts = []
    for vocab in ["falcon", "qwen35"]:  # qwen35's file has the common texts and more
        for t in read_inp(os.path.join(a.llama_cpp, "models", f"ggml-vocab-{vocab}.gguf.inp")):
            if t not in texts:
                texts.append(t)
    for t in EXTRA:
        if t not in texts:
            texts.append(t)
    assert all("\0" not in t and "\1" not in t for t in texts)
    with tempfile.TemporaryDirectory() as tmp:
        body = ",\n".join("  {" + ", ".join(lists[names[n]]) + "}" for n in PRE_NAMES)
        open(os.path.join(tmp, "d.cpp"), "w", encoding="utf-8").write(DRIVER % body)
        exe = os.path.join(tmp, "d")
        subprocess.run(["g++", "-std=c++17", "-O1", "-I", os.path.join(a.llama_cpp, "src"),
                        os.path.join(tmp, "d.cpp"), a.lib, "-o", exe], check=True)
        inp = os.path.join(tmp, "texts")
        open(inp, "wb").write(b"\0".join(t.encode("utf-8") for t in texts))
        r = subprocess.run([exe, inp], capture_output=True)
        if r.returncode != 0:
            raise SystemExit("the llama.cpp driver failed: " + r.stderr.decode(errors="replace")[-2000:])
        out = r.stdout
    results = out.split(b"\1")[:-1]
    assert len(results) == len(PRE_NAMES) * len(texts), (len(results), len(texts))
    lines = [
        "// Generated by scripts/make_gguf_pretokenizer_test_data.py from llama.cpp's",
        "// unicode_regex_split with the regex lists of src/llama-vocab.cpp (llama.cpp vendored",
        "// in llama-cpp-python 0.3.36). Do not edit.",
        "const std::vector<std::string> kPreTexts = {",
    ]
    lines += ["    " + c_string(t) + "," for t in texts]
    lines += ["};", "// kPreSplits[name][i]: the byte lengths of the pieces of kPreTexts[i].",
              "const std::map<std::string, std::vector<std::vector<int>>> kPreSplits = {"]
    for k, n in enumerate(PRE_NAMES):
        lines.append("  {" + c_string(n) + ", {")
        row = []
        for i in range(len(texts)):
            pieces = results[k * len(texts) + i].split(b"\0")[:-1]
            assert b"".join(pieces) == texts[i].encode("utf-8"), (n, texts[i])
            row.append("{" + ",".join(str(len(p)) for p in pieces) + "}")
        line = "   "
        for r in row:  # wrapped at 100 columns
            if len(line) + len(r) + 2 > 100:
                lines.append(line)
                line = "   "
            line += " " + r + ","
        lines.append(line)
        lines.append("  }},")
    lines.append("};")
    open(a.out, "w", encoding="utf-8").write("\n".join(lines) + "\n")
    print(f"{len(texts)} texts x {len(PRE_NAMES)} pre names -> {a.out}")


if __name__ == "__main__":
    main()
