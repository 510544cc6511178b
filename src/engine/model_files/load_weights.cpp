// load_gguf_model / load_hf_model: every tensor becomes a host tensor under its HF name (float32,
// or bf16/f16 read in place with HfLoadOptions::keep_16bit).
#include <algorithm>
#include <filesystem>
#include <set>

#include "engine/model_files/json_util.h"
#include "kvattn/engine/safetensors.h"
#include "kvattn/engine/weights.h"

namespace kvattn {
namespace {

namespace fs = std::filesystem;

// GGUF tensor name -> HF name. Per-layer names are "blk.N.<suffix>". llama.cpp's ffn_norm is
// the MLP's input norm: Llama's post_attention_layernorm, Gemma's pre_feedforward_layernorm
// (Gemma's post_attention_layernorm is GGUF's post_attention_norm).
// Phi-3 files fuse projections (HF qkv_proj / gate_up_proj; GGUF attn_qkv, and ffn_up holding
// gate then up): they load under the fused HF names and split_fused_projections cuts them.
std::string hf_name_for_gguf(const std::string& name, bool sandwich_norms, bool fused_gate_up) {
  static const std::pair<const char*, const char*> kGlobal[] = {
      {"token_embd.weight", "model.embed_tokens.weight"},
      {"output_norm.weight", "model.norm.weight"},
      {"output.weight", "lm_head.weight"}};
  static const std::pair<const char*, const char*> kLayer[] = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},
      {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},
      {"attn_qkv.weight", "self_attn.qkv_proj.weight"},
      {"attn_output.weight", "self_attn.o_proj.weight"},
      {"attn_q.bias", "self_attn.q_proj.bias"},
      {"attn_k.bias", "self_attn.k_proj.bias"},
      {"attn_v.bias", "self_attn.v_proj.bias"},
      {"attn_output.bias", "self_attn.o_proj.bias"},
      {"attn_q_norm.weight", "self_attn.q_norm.weight"},
      {"attn_k_norm.weight", "self_attn.k_norm.weight"},
      {"post_attention_norm.weight", "post_attention_layernorm.weight"},
      {"post_ffw_norm.weight", "post_feedforward_layernorm.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"}};
  for (const auto& [g, h] : kGlobal) {
    if (name == g) return h;
  }
  if (name.rfind("blk.", 0) == 0) {
    const size_t dot = name.find('.', 4);
    if (dot != std::string::npos && dot > 4) {
      const std::string layer = name.substr(4, dot - 4);
      const std::string suffix = name.substr(dot + 1);
      if (suffix == "ffn_norm.weight") {
        return "model.layers." + layer + "." +
               (sandwich_norms ? "pre_feedforward_layernorm.weight"
                               : "post_attention_layernorm.weight");
      }
      if (!sandwich_norms && suffix.starts_with("post_")) return {};
      if (fused_gate_up && suffix == "ffn_up.weight") {
        return "model.layers." + layer + ".mlp.gate_up_proj.weight";
      }
      for (const auto& [g, h] : kLayer) {
        if (suffix == g) return "model.layers." + layer + "." + h;
      }
    }
  }
  return {};
}

// Block-quantized GGML types the loader can keep as they are (the model dequantizes what it
// cannot compute on).
bool is_block_type(GgmlType t) {
  const auto traits = ggml_type_traits(static_cast<uint32_t>(t));
  return traits && traits->dequantizable && traits->block_elems > 1;
}

bool is_float_dtype(const std::string& d) { return d == "F32" || d == "F16" || d == "BF16"; }

// Rows [begin, end) of a weight, sharing its memory (a row range of a row-major tensor, or of
// a block-quantized one, whose rows are whole blocks, is contiguous).
Tensor rows_of(const Tensor& t, int64_t begin, int64_t end) {
  return Tensor::wrap(t.view().slice0(begin, end), std::make_shared<Tensor>(t));
}

QuantizedWeight rows_of(const QuantizedWeight& q, int64_t begin, int64_t end) {
  QuantizedWeight out = q;
  out.shape = {end - begin, q.shape[1]};
  out.bytes = q.bytes.subspan(static_cast<size_t>(begin * q.row_bytes()),
                              static_cast<size_t>((end - begin) * q.row_bytes()));
  return out;
}

// Replaces `fused` (in `tensors` or `quantized`) by consecutive row ranges named `parts`, whose
// sizes are `rows` (their sum must be the fused tensor's row count).
void split_rows(ModelWeights& w, const std::string& fused, const std::vector<std::string>& parts,
                const std::vector<int64_t>& rows, const std::string& source) {
  int64_t total = 0;
  for (int64_t r : rows) total += r;
  auto check = [&](const std::vector<int64_t>& shape) {
    KVATTN_CHECK(shape.size() == 2 && shape[0] == total, source, ": tensor '", fused, "' has ",
                 shape.size() == 2 ? shape[0] : -1, " rows but the config needs ", total);
  };
  if (w.tensors.count(fused) == 0 && w.quantized.count(fused) == 0) return;
  for (const std::string& p : parts) {
    KVATTN_CHECK(w.tensors.count(p) == 0 && w.quantized.count(p) == 0, source, ": tensor '", p,
                 "' is present beside the fused '", fused, "'");
  }
  int64_t begin = 0;
  if (auto it = w.tensors.find(fused); it != w.tensors.end()) {
    const Tensor t = it->second;
    const TensorView& v = t.view();
    check(std::vector<int64_t>(v.shape.begin(), v.shape.begin() + v.ndim));
    for (size_t i = 0; i < parts.size(); begin += rows[i], ++i) {
      w.tensors.emplace(parts[i], rows_of(t, begin, begin + rows[i]));
    }
    w.tensors.erase(it);
  } else if (auto q = w.quantized.find(fused); q != w.quantized.end()) {
    const QuantizedWeight whole = q->second;
    check(whole.shape);
    for (size_t i = 0; i < parts.size(); begin += rows[i], ++i) {
      w.quantized.emplace(parts[i], rows_of(whole, begin, begin + rows[i]));
    }
    w.quantized.erase(q);
  }
}

// Phi-3's fused projections into the separate HF names the models read: qkv_proj rows are
// q, k, v; gate_up_proj rows are gate, then up (HF's chunk(2); llama.cpp's SwiGLU halves).
void split_fused_projections(ModelWeights& w, const std::string& source) {
  const ModelConfig& c = w.config;
  const int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    split_rows(w, p + "self_attn.qkv_proj.weight",
               {p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight",
                p + "self_attn.v_proj.weight"},
               {q, kv, kv}, source);
    split_rows(w, p + "mlp.gate_up_proj.weight",
               {p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"},
               {c.intermediate_size, c.intermediate_size}, source);
  }
}

// The shard file names of an index.json, checked to stay inside the model directory.
std::map<std::string, std::string> read_index(const fs::path& index_path) {
  const std::string file = index_path.string();
  const nlohmann::json j = parse_json(read_text_file(file), file);
  const nlohmann::json& map = json_field(j, "weight_map", file);
  KVATTN_CHECK(map.is_object(), file, ": field 'weight_map' must be an object");
  std::map<std::string, std::string> out;
  for (const auto& [name, shard] : map.items()) {
    const std::string& s = json_string(shard, "weight_map." + name, file);
    KVATTN_CHECK(!s.empty() && s.find('/') == std::string::npos &&
                     s.find('\\') == std::string::npos && s != "." && s != "..",
                 file, ": weight_map['", name, "'] = '", s, "' is not a plain file name");
    out[name] = s;
  }
  return out;
}

}  // namespace

int64_t QuantizedWeight::row_bytes() const {
  const auto traits = ggml_type_traits(static_cast<uint32_t>(type));
  KVATTN_CHECK(traits && shape.size() == 2, "QuantizedWeight: bad type or shape");
  return shape[1] / traits->block_elems * traits->block_bytes;
}

Tensor QuantizedWeight::dequantize() const {
  Tensor out = Tensor::empty(shape, DType::kF32);
  const int64_t rb = row_bytes();
#pragma omp parallel for schedule(static) if (shape[0] * shape[1] > (1 << 16))
  for (int64_t i = 0; i < shape[0]; ++i) {
    dequantize_row(type, bytes.data() + i * rb, out.ptr<float>() + i * shape[1], shape[1]);
  }
  return out;
}

void dequantize_all(ModelWeights& w) {
  for (auto& [name, q] : w.quantized) w.tensors.emplace(name, q.dequantize());
  w.quantized.clear();
}

Tensor widen_to_f32(const Tensor& t) {
  if (t.dtype() == DType::kF32) return t;
  KVATTN_CHECK((t.dtype() == DType::kBF16 || t.dtype() == DType::kF16) && t.device().is_cpu() &&
                   t.view().is_contiguous(),
               "widen_to_f32: tensor must be contiguous bf16/f16/float32 on the host but is ",
               t.dtype(), " on ", t.device());
  const TensorView& v = t.view();
  Tensor out = Tensor::empty(std::vector<int64_t>(v.shape.begin(), v.shape.begin() + v.ndim),
                             DType::kF32);
  const GgmlType type = t.dtype() == DType::kBF16 ? GgmlType::kBF16 : GgmlType::kF16;
  const int64_t n = t.numel();
  constexpr int64_t kChunk = int64_t{1} << 16;
  const auto* src = static_cast<const uint8_t*>(t.data());
#pragma omp parallel for schedule(static) if (n > 4 * kChunk)
  for (int64_t c = 0; c < (n + kChunk - 1) / kChunk; ++c) {
    const int64_t b = c * kChunk, e = std::min(n, b + kChunk);
    dequantize_row(type, src + b * 2, out.ptr<float>() + b, e - b);
  }
  return out;
}

void widen_to_f32(ModelWeights& w) {
  for (auto& [name, t] : w.tensors) {
    if (t.dtype() != DType::kF32) t = widen_to_f32(t);
  }
}

void validate_weights(const ModelWeights& w, const std::string& source) {
  const ModelConfig& c = w.config;
  auto expect = [&](const std::string& name, std::vector<int64_t> shape) {
    auto it = w.tensors.find(name);
    std::vector<int64_t> have;
    if (it != w.tensors.end()) {
      const TensorView& v = it->second.view();
      have.assign(v.shape.begin(), v.shape.begin() + v.ndim);
    } else {
      auto q = w.quantized.find(name);
      if (q == w.quantized.end()) {
        auto skipped = w.skipped_dtypes.find(name);
        KVATTN_CHECK(skipped == w.skipped_dtypes.end(), source, ": tensor '", name, "' is ",
                     skipped->second, ", but weights must be F32, F16 or BF16");
        KVATTN_FAIL(source, ": tensor '", name, "' is missing");
      }
      have = q->second.shape;
    }
    TensorView want(nullptr, DType::kF32, Device::cpu(), shape);
    TensorView got(nullptr, DType::kF32, Device::cpu(), have);
    KVATTN_CHECK(have == shape, source, ": tensor '", name, "' has shape ", got.shape_str(),
                 " but the config needs ", want.shape_str());
  };
  const int64_t h = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  expect("model.embed_tokens.weight", {c.vocab_size, h});
  expect("model.norm.weight", {h});
  if (!c.tie_word_embeddings) expect("lm_head.weight", {c.vocab_size, h});
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    expect(p + "input_layernorm.weight", {h});
    expect(p + "self_attn.q_proj.weight", {q, h});
    expect(p + "self_attn.k_proj.weight", {kv, h});
    expect(p + "self_attn.v_proj.weight", {kv, h});
    expect(p + "self_attn.o_proj.weight", {h, q});
    if (c.qkv_bias) {
      expect(p + "self_attn.q_proj.bias", {q});
      expect(p + "self_attn.k_proj.bias", {kv});
      expect(p + "self_attn.v_proj.bias", {kv});
    }
    if (c.o_bias) expect(p + "self_attn.o_proj.bias", {h});
    if (c.qk_norm) {
      expect(p + "self_attn.q_norm.weight", {c.head_dim});
      expect(p + "self_attn.k_norm.weight", {c.head_dim});
    }
    expect(p + "post_attention_layernorm.weight", {h});
    if (c.sandwich_norms) {
      expect(p + "pre_feedforward_layernorm.weight", {h});
      expect(p + "post_feedforward_layernorm.weight", {h});
    }
    expect(p + "mlp.gate_proj.weight", {c.intermediate_size, h});
    expect(p + "mlp.up_proj.weight", {c.intermediate_size, h});
    expect(p + "mlp.down_proj.weight", {h, c.intermediate_size});
  }
}

ModelWeights load_gguf_model(const std::string& path, const LoadProgress& progress,
                             const GgufLoadOptions& options) {
  return load_gguf_model(GgufFile::open(path), progress, options);
}

ModelWeights load_gguf_model(const GgufFile& g, const LoadProgress& progress,
                             const GgufLoadOptions& options) {
  ModelWeights w;
  w.config = config_from_gguf(g);
  uint64_t total = 0, done = 0;
  for (const auto& t : g.tensors()) total += t.nbytes;
  if (progress) progress(0.0);
  for (const auto& t : g.tensors()) {
    const std::string name =
        hf_name_for_gguf(t.name, w.config.sandwich_norms, w.config.architecture == "phi3");
    if (!name.empty()) w.file_types[name] = t.type;
    if (!name.empty() && options.keep_quantized && t.ne.size() == 2 && is_block_type(t.type)) {
      const auto d = g.tensor_data(t);
      w.quantized.emplace(name, QuantizedWeight{t.type, t.shape(), d, g.mapping()});
    } else if (!name.empty()) {
      w.tensors.emplace(name, g.dequantize(t));
    }
    done += t.nbytes;
    if (progress && total > 0) progress(static_cast<double>(done) / static_cast<double>(total));
  }
  split_fused_projections(w, g.path());
  validate_weights(w, g.path());
  return w;
}

ModelWeights load_hf_model(const std::string& dir, const LoadProgress& progress,
                           const HfLoadOptions& options) {
  const fs::path root(dir);
  ModelWeights w;
  w.config = config_from_hf_json((root / "config.json").string());
  const fs::path gen = root / "generation_config.json";
  if (fs::exists(gen)) {
    const nlohmann::json j = parse_json(read_text_file(gen.string()), gen.string());
    if (auto eos = j.find("eos_token_id"); j.is_object() && eos != j.end()) {
      std::vector<nlohmann::json> ids = eos->is_array() ? eos->get<std::vector<nlohmann::json>>()
                                                        : std::vector<nlohmann::json>{*eos};
      for (const auto& e : ids) {
        const int64_t id = json_int(e, "eos_token_id", gen.string());
        KVATTN_CHECK(id >= 0 && id < w.config.vocab_size, gen.string(), ": eos_token_id ", id,
                     " is outside the vocabulary");
        auto& extra = w.config.extra_eos_ids;
        if (id != w.config.eos_token_id && std::find(extra.begin(), extra.end(), id) == extra.end())
          extra.push_back(id);
      }
    }
  }

  std::map<std::string, std::string> index;  // tensor -> shard, empty for a single file
  std::vector<std::string> shards;
  const fs::path index_path = root / "model.safetensors.index.json";
  if (fs::exists(index_path)) {
    index = read_index(index_path);
    std::set<std::string> unique;
    for (const auto& [name, shard] : index) unique.insert(shard);
    shards.assign(unique.begin(), unique.end());
  } else {
    KVATTN_CHECK(fs::exists(root / "model.safetensors"), dir,
                 ": neither model.safetensors nor model.safetensors.index.json exists");
    shards.push_back("model.safetensors");
  }

  std::vector<SafetensorsFile> files;
  uint64_t total = 0, done = 0;
  for (const auto& s : shards) {
    files.push_back(SafetensorsFile::open((root / s).string()));
    for (const auto& t : files.back().tensors()) total += t.end - t.begin;
  }
  if (progress) progress(0.0);
  for (size_t i = 0; i < files.size(); ++i) {
    for (const auto& t : files[i].tensors()) {
      done += t.end - t.begin;
      if (!index.empty()) {
        auto it = index.find(t.name);
        if (it == index.end() || it->second != shards[i]) continue;  // not this shard's tensor
      }
      if (!is_float_dtype(t.dtype)) {  // e.g. an integer buffer; named if a weight needs it
        w.skipped_dtypes[t.name] = t.dtype;
        continue;
      }
      KVATTN_CHECK(w.tensors.count(t.name) == 0, files[i].path(), ": tensor '", t.name,
                   "' also appears in another shard");
      const bool keep = options.keep_16bit && (t.dtype == "BF16" || t.dtype == "F16");
      w.tensors.emplace(t.name, keep ? files[i].tensor_in_place(t) : files[i].to_f32(t));
      if (progress && total > 0) progress(static_cast<double>(done) / static_cast<double>(total));
    }
  }
  for (const auto& [name, shard] : index) {
    if (auto skipped = w.skipped_dtypes.find(name); skipped != w.skipped_dtypes.end()) {
      continue;  // not a float tensor: validate_weights names it if a weight needs it
    }
    KVATTN_CHECK(w.tensors.count(name) != 0, (root / shard).string(), ": tensor '", name,
                 "' named by model.safetensors.index.json is missing");
  }
  if (w.config.tie_word_embeddings) w.tensors.erase("lm_head.weight");
  split_fused_projections(w, dir);
  validate_weights(w, dir);
  if (progress) progress(1.0);
  return w;
}

}  // namespace kvattn
