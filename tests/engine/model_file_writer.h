// Test-only writers for small GGUF and safetensors files (valid ones, and raw pieces to build
// corrupt ones), and for tiny Llama/Qwen3 checkpoints in both formats. Shared by the parser tests
// and by the fuzzers' seed generator.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kvattn/core/dtype.h"

namespace kvattn::testing {

struct Bytes {
  std::vector<uint8_t> v;

  template <typename T>
  Bytes& put(T x) {
    const auto* p = reinterpret_cast<const uint8_t*>(&x);
    v.insert(v.end(), p, p + sizeof(T));
    return *this;
  }
  Bytes& u8(uint8_t x) { return put(x); }
  Bytes& u32(uint32_t x) { return put(x); }
  Bytes& u64(uint64_t x) { return put(x); }
  Bytes& i32(int32_t x) { return put(x); }
  Bytes& f32(float x) { return put(x); }
  Bytes& str(const std::string& s) {
    u64(s.size());
    v.insert(v.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& raw(const std::vector<uint8_t>& b) {
    v.insert(v.end(), b.begin(), b.end());
    return *this;
  }
};

// GGUF value type ids.
enum : uint32_t { kU8 = 0, kI8, kU16, kI16, kU32, kI32, kF32, kBool, kString, kArray, kU64, kI64, kF64 };

struct GgufTensorSpec {
  std::string name;
  std::vector<uint64_t> ne;
  uint32_t type;
  std::vector<uint8_t> data;
  std::optional<uint64_t> offset;  // default: packed in order at the alignment
};

class GgufBuilder {
 public:
  uint32_t version = 3;
  uint64_t alignment = 32;  // layout alignment; write general.alignment yourself to change it
  std::vector<Bytes> kvs;
  std::vector<GgufTensorSpec> tensors;

  GgufBuilder& kv(const std::string& key, uint32_t type, const Bytes& value) {
    Bytes b;
    b.str(key).u32(type).raw(value.v);
    kvs.push_back(b);
    return *this;
  }
  GgufBuilder& kv_u32(const std::string& k, uint32_t x) { return kv(k, kU32, Bytes().u32(x)); }
  GgufBuilder& kv_i32(const std::string& k, int32_t x) { return kv(k, kI32, Bytes().i32(x)); }
  GgufBuilder& kv_f32(const std::string& k, float x) { return kv(k, kF32, Bytes().f32(x)); }
  GgufBuilder& kv_bool(const std::string& k, bool x) { return kv(k, kBool, Bytes().u8(x)); }
  GgufBuilder& kv_str(const std::string& k, const std::string& s) {
    return kv(k, kString, Bytes().str(s));
  }
  GgufBuilder& kv_strs(const std::string& k, const std::vector<std::string>& items) {
    Bytes b;
    b.u32(kString).u64(items.size());
    for (const auto& s : items) b.str(s);
    return kv(k, kArray, b);
  }
  GgufBuilder& kv_i32s(const std::string& k, const std::vector<int32_t>& items) {
    Bytes b;
    b.u32(kI32).u64(items.size());
    for (int32_t x : items) b.i32(x);
    return kv(k, kArray, b);
  }
  GgufBuilder& kv_f32s(const std::string& k, const std::vector<float>& items) {
    Bytes b;
    b.u32(kF32).u64(items.size());
    for (float x : items) b.f32(x);
    return kv(k, kArray, b);
  }
  GgufBuilder& tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type,
                      std::vector<uint8_t> data) {
    tensors.push_back({name, std::move(ne), type, std::move(data), std::nullopt});
    return *this;
  }

  std::vector<uint8_t> build() const {
    Bytes b;
    b.v = {'G', 'G', 'U', 'F'};
    b.u32(version).u64(tensors.size()).u64(kvs.size());
    for (const auto& kv : kvs) b.raw(kv.v);
    std::vector<uint64_t> offsets;
    uint64_t off = 0;
    for (const auto& t : tensors) {
      offsets.push_back(t.offset.value_or(off));
      off = (off + t.data.size() + alignment - 1) / alignment * alignment;
    }
    for (size_t i = 0; i < tensors.size(); ++i) {
      const auto& t = tensors[i];
      b.str(t.name).u32(static_cast<uint32_t>(t.ne.size()));
      for (uint64_t d : t.ne) b.u64(d);
      b.u32(t.type).u64(offsets[i]);
    }
    while (b.v.size() % alignment) b.u8(0);
    const size_t data_start = b.v.size();
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i].offset) continue;  // overridden offsets are the test's business
      if (b.v.size() < data_start + offsets[i]) b.v.resize(data_start + offsets[i], 0);
      b.raw(tensors[i].data);
    }
    return b.v;
  }
};

inline std::vector<uint8_t> f32_bytes(const std::vector<float>& x) {
  std::vector<uint8_t> b(x.size() * 4);
  std::memcpy(b.data(), x.data(), b.size());
  return b;
}

inline std::vector<uint8_t> f16_bytes(const std::vector<float>& x) {
  Bytes b;
  for (float f : x) b.put(float_to_f16(f).bits);
  return b.v;
}

inline std::vector<uint8_t> bf16_bytes(const std::vector<float>& x) {
  Bytes b;
  for (float f : x) b.put(float_to_bf16(f).bits);
  return b.v;
}

// Q8_0 with one scale per 32 values: d = max|x| / 127.
inline std::vector<uint8_t> q8_0_bytes(const std::vector<float>& x) {
  Bytes b;
  for (size_t i = 0; i < x.size(); i += 32) {
    float amax = 0;
    for (size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[i + j]));
    const float d = amax / 127.0f;
    b.put(float_to_f16(d).bits);
    for (size_t j = 0; j < 32; ++j) {
      b.put(static_cast<int8_t>(d == 0 ? 0 : std::lround(x[i + j] / d)));
    }
  }
  return b.v;
}

inline void write_file(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

inline void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// ---- safetensors ----

struct StTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;
};

inline std::vector<uint8_t> safetensors_raw(const std::string& header,
                                            const std::vector<uint8_t>& data) {
  Bytes b;
  b.u64(header.size());
  b.v.insert(b.v.end(), header.begin(), header.end());
  b.raw(data);
  return b.v;
}

inline std::vector<uint8_t> build_safetensors(const std::vector<StTensor>& tensors,
                                              const std::map<std::string, std::string>& meta = {}) {
  nlohmann::json h = nlohmann::json::object();
  if (!meta.empty()) h["__metadata__"] = meta;
  std::vector<uint8_t> data;
  for (const auto& t : tensors) {
    h[t.name] = {{"dtype", t.dtype},
                 {"shape", t.shape},
                 {"data_offsets", {data.size(), data.size() + t.data.size()}}};
    data.insert(data.end(), t.data.begin(), t.data.end());
  }
  std::string header = h.dump();
  while (header.size() % 8) header += ' ';
  return safetensors_raw(header, data);
}

// ---- tiny checkpoints ----

struct TinyShape {
  std::string arch = "llama";  // "llama" | "qwen3"
  int64_t vocab = 64, hidden = 64, inter = 96, layers = 2, heads = 4, kv_heads = 2, head_dim = 16;
  bool tied = true;
};

// Deterministic, distinct values per tensor: value(i) = sin(seed + 0.37 i) / 4.
inline std::vector<float> pattern(size_t n, int seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::sin(static_cast<float>(seed) + 0.37f * i) * 0.25f;
  return v;
}

// HF-named tensors with row-major shapes; the seed makes each tensor's values distinct.
inline std::vector<std::pair<std::string, std::vector<int64_t>>> tiny_tensor_list(const TinyShape& s) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> t;
  const int64_t q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim;
  t.push_back({"model.embed_tokens.weight", {s.vocab, s.hidden}});
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t.push_back({p + "input_layernorm.weight", {s.hidden}});
    t.push_back({p + "self_attn.q_proj.weight", {q, s.hidden}});
    t.push_back({p + "self_attn.k_proj.weight", {kv, s.hidden}});
    t.push_back({p + "self_attn.v_proj.weight", {kv, s.hidden}});
    t.push_back({p + "self_attn.o_proj.weight", {s.hidden, q}});
    if (s.arch == "qwen3") {
      t.push_back({p + "self_attn.q_norm.weight", {s.head_dim}});
      t.push_back({p + "self_attn.k_norm.weight", {s.head_dim}});
    }
    t.push_back({p + "post_attention_layernorm.weight", {s.hidden}});
    t.push_back({p + "mlp.gate_proj.weight", {s.inter, s.hidden}});
    t.push_back({p + "mlp.up_proj.weight", {s.inter, s.hidden}});
    t.push_back({p + "mlp.down_proj.weight", {s.hidden, s.inter}});
  }
  t.push_back({"model.norm.weight", {s.hidden}});
  if (!s.tied) t.push_back({"lm_head.weight", {s.vocab, s.hidden}});
  return t;
}

inline std::string gguf_name_for(const std::string& hf) {
  static const std::pair<const char*, const char*> kMap[] = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"}};
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  if (hf == "lm_head.weight") return "output.weight";
  const std::string pre = "model.layers.";
  const size_t dot = hf.find('.', pre.size());
  const std::string layer = hf.substr(pre.size(), dot - pre.size());
  const std::string suffix = hf.substr(dot + 1);
  for (const auto& [h, g] : kMap) {
    if (suffix == h) return "blk." + layer + "." + g;
  }
  return hf;
}

// A tiny GGUF model: 2-D weights as Q8_0 (when the row is a multiple of 32), norms as F32.
// `values` receives the exact float values the loader must produce (HF names).
inline GgufBuilder tiny_gguf(const TinyShape& s, std::map<std::string, std::vector<float>>* values) {
  GgufBuilder g;
  const std::string a = s.arch + ".";
  g.kv_str("general.architecture", s.arch);
  g.kv_u32(a + "context_length", 256);
  g.kv_u32(a + "embedding_length", static_cast<uint32_t>(s.hidden));
  g.kv_u32(a + "feed_forward_length", static_cast<uint32_t>(s.inter));
  g.kv_u32(a + "block_count", static_cast<uint32_t>(s.layers));
  g.kv_u32(a + "attention.head_count", static_cast<uint32_t>(s.heads));
  g.kv_u32(a + "attention.head_count_kv", static_cast<uint32_t>(s.kv_heads));
  g.kv_u32(a + "attention.key_length", static_cast<uint32_t>(s.head_dim));
  g.kv_u32(a + "rope.dimension_count", static_cast<uint32_t>(s.head_dim));
  g.kv_f32(a + "rope.freq_base", 50000.0f);
  g.kv_f32(a + "attention.layer_norm_rms_epsilon", 1e-5f);
  g.kv_u32("tokenizer.ggml.bos_token_id", 1);
  g.kv_u32("tokenizer.ggml.eos_token_id", 2);
  int seed = 0;
  for (const auto& [name, shape] : tiny_tensor_list(s)) {
    size_t n = 1;
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    std::vector<float> v = pattern(n, ++seed);
    std::vector<uint64_t> ne(shape.rbegin(), shape.rend());
    if (shape.size() == 2 && shape[1] % 32 == 0) {
      std::vector<uint8_t> q = q8_0_bytes(v);
      // The loader's output is the dequantized value, so record that.
      for (size_t i = 0; i < n; i += 32) {
        f16_t d;
        std::memcpy(&d.bits, &q[i / 32 * 34], 2);
        for (size_t j = 0; j < 32; ++j) {
          v[i + j] = static_cast<float>(static_cast<int8_t>(q[i / 32 * 34 + 2 + j])) * f16_to_float(d);
        }
      }
      g.tensor(gguf_name_for(name), ne, 8, q);
    } else {
      g.tensor(gguf_name_for(name), ne, 0, f32_bytes(v));
    }
    if (values) (*values)[name] = v;
  }
  return g;
}

inline nlohmann::json tiny_hf_config(const TinyShape& s) {
  return {{"architectures", {s.arch == "qwen3" ? "Qwen3ForCausalLM" : "LlamaForCausalLM"}},
          {"vocab_size", s.vocab},
          {"hidden_size", s.hidden},
          {"intermediate_size", s.inter},
          {"num_hidden_layers", s.layers},
          {"num_attention_heads", s.heads},
          {"num_key_value_heads", s.kv_heads},
          {"head_dim", s.head_dim},
          {"rms_norm_eps", 1e-6},
          {"rope_theta", 1000000.0},
          {"max_position_embeddings", 512},
          {"tie_word_embeddings", s.tied},
          {"bos_token_id", 1},
          {"eos_token_id", 2}};
}

// A tiny HF directory: config.json plus one model.safetensors, or `shards` files and an index.
// Tensors alternate bf16 / f16 / f32; `values` receives the exact floats the loader must produce.
inline void write_tiny_hf(const std::filesystem::path& dir, const TinyShape& s, int shards,
                          std::map<std::string, std::vector<float>>* values) {
  std::filesystem::create_directories(dir);
  write_text(dir / "config.json", tiny_hf_config(s).dump(2));
  std::vector<std::vector<StTensor>> files(static_cast<size_t>(shards));
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
  int seed = 100;
  size_t k = 0;
  for (const auto& [name, shape] : tiny_tensor_list(s)) {
    size_t n = 1;
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    std::vector<float> v = pattern(n, ++seed);
    StTensor t{name, "", shape, {}};
    switch (k % 3) {
      case 0:
        t.dtype = "BF16", t.data = bf16_bytes(v);
        for (float& x : v) x = bf16_to_float(float_to_bf16(x));
        break;
      case 1:
        t.dtype = "F16", t.data = f16_bytes(v);
        for (float& x : v) x = f16_to_float(float_to_f16(x));
        break;
      default: t.dtype = "F32", t.data = f32_bytes(v);
    }
    if (values) (*values)[name] = v;
    const size_t shard = k++ % files.size();
    files[shard].push_back(std::move(t));
    index["weight_map"][name] = "model-0000" + std::to_string(shard + 1) + "-of-0000" +
                                std::to_string(shards) + ".safetensors";
  }
  if (shards == 1) {
    write_file(dir / "model.safetensors", build_safetensors(files[0]));
    return;
  }
  for (int i = 0; i < shards; ++i) {
    write_file(dir / ("model-0000" + std::to_string(i + 1) + "-of-0000" + std::to_string(shards) +
                      ".safetensors"),
               build_safetensors(files[static_cast<size_t>(i)]));
  }
  write_text(dir / "model.safetensors.index.json", index.dump(2));
}

}  // namespace kvattn::testing
