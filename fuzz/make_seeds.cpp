// Writes the fuzzers' seed corpora into <dir>/{gguf,safetensors,tokenizer_json,tokenizer_encode,
// request_parser,structured}:
// small valid files from the same writers the parser tests use.
#include <filesystem>
#include <iostream>
#include <iterator>
#include <map>

#include "engine/model_file_writer.h"

namespace {
#include "engine/spm_tokenizer_test_data.inc"
#include "engine/spm_gguf_vocab.inc"
#include "engine/tokenizer_test_data.inc"
}

namespace fs = std::filesystem;
using namespace kvattn::testing;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: fuzz_make_seeds <corpus dir>\n";
    return 2;
  }
  const fs::path root = argv[1];
  for (const char* d : {"gguf", "safetensors", "tokenizer_json", "tokenizer_encode",
                        "request_parser", "structured"}) {
    fs::create_directories(root / d);
  }

  // GGUF: a tiny model (llama, qwen3 untied), metadata of many types, and a tokenizer.
  TinyShape small;
  small.vocab = 32, small.hidden = 32, small.inter = 32, small.layers = 1, small.heads = 2,
  small.kv_heads = 1, small.head_dim = 16;
  write_file(root / "gguf/llama.gguf", tiny_gguf(small, nullptr).build());
  TinyShape qwen = small;
  qwen.arch = "qwen3", qwen.tied = false;
  write_file(root / "gguf/qwen3.gguf", tiny_gguf(qwen, nullptr).build());
  // Gemma 3 metadata: soft-caps, scale, window, a per-layer sliding_window_pattern.
  GgufBuilder gemma;
  gemma.kv_str("general.architecture", "gemma3")
      .kv_u32("gemma3.embedding_length", 8)
      .kv_u32("gemma3.feed_forward_length", 16)
      .kv_u32("gemma3.block_count", 3)
      .kv_u32("gemma3.attention.head_count", 2)
      .kv_u32("gemma3.attention.head_count_kv", 1)
      .kv_u32("gemma3.attention.key_length", 8)
      .kv_u32("gemma3.attention.value_length", 8)
      .kv_u32("gemma3.attention.sliding_window", 4)
      .kv_i32s("gemma3.attention.sliding_window_pattern", {1, 1, 0})
      .kv_f32("gemma3.attention.scale", 0.25f)
      .kv_f32("gemma3.final_logit_softcapping", 30.0f)
      .kv_f32("gemma3.rope.freq_base_swa", 10000.0f);
  gemma.tensor("token_embd.weight", {8, 4}, 0, std::vector<uint8_t>(128, 0));
  write_file(root / "gguf/gemma3.gguf", gemma.build());
  GgufBuilder meta;
  meta.version = 2;
  meta.kv("u8", kU8, Bytes().u8(7)).kv("f64", kF64, Bytes().put<double>(1.5)).kv_bool("b", true);
  meta.kv_strs("names", {"a", "bc"}).kv_i32s("ints", {1, -2});
  meta.kv_u32("general.alignment", 64);
  meta.alignment = 64;
  meta.tensor("q4_0", {32}, 2, std::vector<uint8_t>(18, 0x35));
  meta.tensor("q4_1", {32}, 3, std::vector<uint8_t>(20, 0x47));
  meta.tensor("q5_0", {32}, 6, std::vector<uint8_t>(22, 0x19));
  meta.tensor("q5_1", {32}, 7, std::vector<uint8_t>(24, 0x28));
  meta.tensor("q4_k", {256}, 12, std::vector<uint8_t>(144, 0x21));
  meta.tensor("q6_k", {256}, 14, std::vector<uint8_t>(210, 0x12));
  meta.tensor("bf16", {2, 2}, 30, bf16_bytes({1, 2, 3, 4}));
  write_file(root / "gguf/types.gguf", meta.build());
  {
    const nlohmann::json j = nlohmann::json::parse(kTinyTokenizerJson);
    std::vector<std::string> tokens(421);
    for (const auto& [t, id] : j["model"]["vocab"].items()) tokens[id.get<size_t>()] = t;
    tokens[420] = "<tool>";
    std::vector<int32_t> types(421, 1);
    types[0] = types[1] = types[2] = 3;
    types[420] = 4;
    GgufBuilder g;
    g.kv_str("tokenizer.ggml.model", "gpt2").kv_str("tokenizer.ggml.pre", "smollm");
    g.kv_strs("tokenizer.ggml.tokens", tokens).kv_i32s("tokenizer.ggml.token_type", types);
    g.kv_strs("tokenizer.ggml.merges", j["model"]["merges"].get<std::vector<std::string>>());
    g.kv_u32("tokenizer.ggml.eos_token_id", 2);
    g.kv_str("tokenizer.chat_template", "{{ '<|im_start|>system\\nHi<|im_end|>\\n' }}");
    write_file(root / "gguf/tokenizer.gguf", g.build());
  }
  {  // SentencePiece-style (tokenizer.ggml.model "llama")
    GgufBuilder g;
    add_spm_vocab(g);
    g.kv_u32("tokenizer.ggml.bos_token_id", 1).kv_bool("tokenizer.ggml.add_space_prefix", true);
    write_file(root / "gguf/spm_tokenizer.gguf", g.build());
  }

  // safetensors: every float dtype, an int tensor, metadata, an empty tensor.
  write_file(root / "safetensors/mixed.safetensors",
             build_safetensors({{"a", "F32", {2, 2}, f32_bytes({1, 2, 3, 4})},
                                {"b", "F16", {3}, f16_bytes({1, -2, 0.5f})},
                                {"c", "BF16", {1, 2}, bf16_bytes({7, 8})},
                                {"d", "I32", {1}, {1, 0, 0, 0}},
                                {"e", "F32", {0}, {}}},
                               {{"format", "pt"}}));
  write_file(root / "safetensors/one.safetensors",
             build_safetensors({{"model.norm.weight", "BF16", {4}, bf16_bytes({1, 1, 1, 1})}}));

  // tokenizer.json variants, one with a tokenizer_config after a NUL byte.
  const std::string json = kTinyTokenizerJson;
  write_text(root / "tokenizer_json/tiny.json", json);
  write_text(root / "tokenizer_json/tiny_with_config.json",
             json + std::string(1, '\0') +
                 R"({"bos_token":"<|im_start|>","eos_token":{"content":"<|im_end|>"},"add_bos_token":true,"chat_template":"<|im_start|>"})");
  nlohmann::json seq = nlohmann::json::parse(json);
  seq["normalizer"] = {{"type", "NFC"}};
  seq["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Digits"}, {"individual_digits", true}},
        {{"type", "Split"}, {"pattern", {{"String", "|"}}}, {"behavior", "Removed"}},
        {{"type", "Split"}, {"pattern", {{"Regex", R"(\p{N}{1,3}|\s+)"}}}, {"behavior", "Isolated"}},
        {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", false}}}}};
  seq["model"]["ignore_merges"] = true;
  write_text(root / "tokenizer_json/sequence.json", seq.dump());
  nlohmann::json nfkc = nlohmann::json::parse(json);
  nfkc["normalizer"] = {{"type", "Sequence"},
                        {"normalizers", {{{"type", "NFKD"}}, {{"type", "NFKC"}}, {{"type", "NFD"}}}}};
  write_text(root / "tokenizer_json/nfkc.json", nfkc.dump());
  // Chat templates of each family (their markers and the variant snippets detection reads).
  const char* templates[] = {
      R"({"chat_template":"{{ bos_token }}<|start_header_id|>Cutting Knowledge Date: December 2023\n{%- set date_string = "26 Jul 2024" %}strftime_now"})",
      R"({"chat_template":"{{ bos_token }}{{'<start_of_turn>' + first_user_prefix + message['content'] | trim}}"})",
      R"({"chat_template":"{%- if loop.last and system_message is defined %}{{- '[INST] ' + system_message + message['content'] + '[/INST]' }}{{- ' ' + message['content']|trim + eos_token}}"})",
      R"({"chat_template":"{%- if loop.first and system_message %}{{- ' [INST] ' + m + ' [/INST]' }}{{- ' ' + message['content'] + eos_token}}"})",
      R"({"chat_template":"'<|im_start|>system
You are Qwen.<|im_end|>
' </think>"})"};
  for (size_t i = 0; i < std::size(templates); ++i) {
    write_text(root / ("tokenizer_json/template" + std::to_string(i) + ".json"),
               json + std::string(1, '\0') + templates[i]);
  }
  write_text(root / "tokenizer_json/spm_legacy.json", kSpmTokenizerJson);
  nlohmann::json meta_json = nlohmann::json::parse(kSpmTokenizerJson);
  meta_json["normalizer"] = nullptr;
  meta_json["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"},
                                {"prepend_scheme", "first"}, {"split", true}};
  meta_json["decoder"] = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"},
                          {"prepend_scheme", "always"}};
  write_text(root / "tokenizer_json/spm_metaspace.json", meta_json.dump());

  // Texts for the encode properties (first byte picks the tokenizer).
  for (size_t i = 0; i < kTexts.size(); ++i) {
    write_text(root / ("tokenizer_encode/text" + std::to_string(i)),
               std::string(1, static_cast<char>(i % 3)) + kTexts[i]);
  }
  for (size_t i = 0; i < kSpmTexts.size(); ++i) {  // bytes 3..5 pick the SentencePiece ones
    write_text(root / ("tokenizer_encode/spm" + std::to_string(i)),
               std::string(1, static_cast<char>(3 + i % 3)) + kSpmTexts[i]);
  }
  // Server request bodies (first byte: 0 completions, 1 chat, 2 /tokenize, 3 /detokenize,
  // 4 the tool-call parsers, 5 /v1/responses).
  const std::vector<std::string> bodies = {
      std::string(1, '\0') + R"({"model": "m", "prompt": "hello", "max_tokens": 5, "temperature": 0.7,)"
                              R"( "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": 3, "stop": ["x", "y"],)"
                              R"( "n": 2, "stream": true, "stream_options": {"include_usage": true},)"
                              R"( "ignore_eos": true, "logprobs": null, "echo": false, "best_of": 2})",
      std::string(1, '\0') + R"({"prompt": [[1, 2, 3], [4]], "return_token_ids": true, "user": "u"})",
      std::string(1, '\1') + R"({"messages": [{"role": "system", "content": "be brief"},)"
                              R"( {"role": "user", "content": [{"type": "text", "text": "hi"}]},)"
                              R"( {"role": "assistant", "content": null}], "max_completion_tokens": 9,)"
                              R"( "response_format": {"type": "text"}, "top_logprobs": 0})",
      std::string(1, '\0') + R"({"prompt": "score me", "echo": true, "logprobs": 1, "max_tokens": 0,)"
                              R"( "stop_token_ids": [2, 7]})",
      std::string(1, '\2') + R"({"prompt": "hello", "add_special_tokens": false, "model": "m"})",
      std::string(1, '\2') + R"({"messages": [{"role": "user", "content": "hi"}],)"
                              R"( "add_generation_prompt": true})",
      std::string(1, '\3') + R"({"tokens": [1, 2, 3], "model": "m"})",
      std::string(1, '\1') + R"({"messages": [{"role": "user", "content": "hi"}],)"
                              R"( "response_format": {"type": "json_schema", "json_schema":)"
                              R"( {"name": "x", "schema": {"type": "object", "properties":)"
                              R"( {"a": {"type": "integer"}}}, "strict": true}}})",
      std::string(1, '\0') + R"({"prompt": "p", "guided_choice": ["a", "b"],)"
                              R"( "guided_decoding_backend": "xgrammar"})",
      std::string(1, '\0') + R"({"prompt": "p", "structured_outputs": {"regex": "[0-9]{3}"}})",
      // Tool calling: tools, each tool_choice form, parallel_tool_calls, a history with calls.
      std::string(1, '\1') + R"({"messages": [{"role": "user", "content": "weather?"}],)"
                              R"( "tools": [{"type": "function", "function": {"name": "get_weather",)"
                              R"( "description": "d", "parameters": {"type": "object", "properties":)"
                              R"( {"city": {"type": "string"}}, "required": ["city"]}, "strict": true}},)"
                              R"( {"type": "function", "function": {"name": "now"}}],)"
                              R"( "tool_choice": "required", "parallel_tool_calls": false})",
      std::string(1, '\1') + R"({"messages": [{"role": "user", "content": "q"}], "tools": [{"type":)"
                              R"( "function", "function": {"name": "f", "parameters": {"$defs": {"p":)"
                              R"( {"type": "integer"}}, "type": "object", "properties": {"x": {"$ref":)"
                              R"( "#/$defs/p"}}}}}], "tool_choice": {"type": "function", "function":)"
                              R"( {"name": "f"}}})",
      std::string(1, '\1') + R"({"messages": [{"role": "user", "content": "q"},)"
                              R"( {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1",)"
                              R"( "type": "function", "function": {"name": "f", "arguments":)"
                              R"( "{\"a\": 1}"}}]}, {"role": "tool", "tool_call_id": "call_1",)"
                              R"( "content": "2"}], "tools": [{"type": "function", "function": {"name":)"
                              R"( "f"}}], "tool_choice": "auto"})",
      // The tool-call parsers: byte 4, the format (% 5), the split point, the text.
      std::string("\4\0\7") + "Hi <tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n"
                                "</tool_call>",
      std::string("\4\1\3") + "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}; "
                                "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"x\"}}",
      std::string("\4\2\11") + "ok [TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {}}]",
      std::string("\4\3\2") + "[{\"name\": \"f\", \"parameters\": {\"x\": [1, 2]}}]",
      std::string("\4\4\1") + "{\"x\": 1}",
      // The Responses API: byte 5.
      std::string(1, '\5') + R"({"model": "m", "instructions": "be brief", "input": [{"role":)"
                              R"( "user", "content": [{"type": "input_text", "text": "hi"}]},)"
                              R"( {"type": "message", "role": "assistant", "content": "ok"}],)"
                              R"( "max_output_tokens": 9, "stream": true, "store": false,)"
                              R"( "text": {"format": {"type": "json_schema", "name": "x", "schema":)"
                              R"( {"type": "integer", "minimum": 1, "maximum": 99}}}})",
      std::string(1, '\5') + R"({"input": "hello", "temperature": 0.5, "metadata": {"k": "v"}})",
      std::string(1, '\5') + R"({"input": [{"role": "user", "content": "q"}, {"type":)"
                              R"( "function_call", "call_id": "c", "name": "f", "arguments": "{}"},)"
                              R"( {"type": "function_call_output", "call_id": "c", "output": "o"}],)"
                              R"( "tools": [{"type": "function", "name": "f", "parameters": {"type":)"
                              R"( "object", "properties": {"n": {"type": "integer"}}}}],)"
                              R"( "tool_choice": {"type": "function", "name": "f"},)"
                              R"( "parallel_tool_calls": false, "max_tool_calls": 2})",
  };
  for (size_t i = 0; i < bodies.size(); ++i) {
    write_text(root / ("request_parser/body" + std::to_string(i)), bodies[i]);
  }
  // Structured outputs: a compiler byte (% 3: 0 JSON schema, 1 regex, 2 GBNF), the spec, NUL,
  // a text.
  const std::vector<std::string> structured = {
      std::string(1, '\0') + R"({"type": "object", "properties": {"a": {"type": "string",)"
          R"( "maxLength": 4}, "b": {"type": "array", "items": {"enum": [1, "x", null]}}},)"
          R"( "required": ["a"]})" + std::string(1, '\0') + R"({"a": "hi", "b": [1, null]})",
      std::string(1, '\0') + R"({"$defs": {"n": {"type": "object", "properties": {"k":)"
          R"( {"$ref": "#/$defs/n"}}}}, "$ref": "#/$defs/n"})" + std::string(1, '\0') +
          R"({"k": {"k": {}}})",
      std::string(1, '\1') + R"(^(?:[a-z]+|\d{2,4})-[^\s@]{1,3}\.?$)" + std::string(1, '\0') +
          "abc-x.",
      std::string(1, '\1') + "[\u00e0-\u00ff]+|caf\u00e9" + std::string(1, '\0') +
          "caf\xc3\xa9",
      std::string(1, '\2') + R"gbnf(root  ::= (expr "=" ws term "\n")+
expr  ::= term ([-+*/] term)*
term  ::= ident | num | "(" ws expr ")" ws
ident ::= [a-z] [a-z0-9_]* ws   # a comment
num   ::= [0-9]{1,3} ws
ws    ::= [ \t\n]*)gbnf" + std::string(1, '\0') + "(a +b_1) *7=z\n",
      std::string(1, '\2') + R"gbnf(root ::= "{" ws (pair ("," ws pair)*)? "}"
pair ::= "\"" [^"\\\x00-\x1F]* "\"" ws ":" ws ("true" | "null" | [0-9]+ | root) ws
ws   ::= | " " | "\n" [ \t]{0,4})gbnf" + std::string(1, '\0') + R"({"a": {"b": 1}, "c": true})",
      std::string(1, '\2') + "root ::= [\u3041-\u309f]+ (. | [^a-z\\x85])? \"\\U0001F600\"?\n" +
          std::string(1, '\0') + "\xe3\x81\x82\xc3\xa9\xf0\x9f\x98\x80",
  };
  for (size_t i = 0; i < structured.size(); ++i) {
    write_text(root / ("structured/seed" + std::to_string(i)), structured[i]);
  }
  std::cout << "fuzz seeds written to " << root << "\n";
  return 0;
}
