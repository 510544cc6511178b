#include "engine/parallel/sharding.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "kvattn/core/error.h"

namespace kvattn {
namespace {

const Tensor& get(const ModelWeights& w, const std::string& name) {
  auto it = w.tensors.find(name);
  KVATTN_CHECK(it != w.tensors.end(), "shard_weights: tensor '", name, "' is missing");
  const DType d = it->second.dtype();
  KVATTN_CHECK((d == DType::kF32 || d == DType::kBF16 || d == DType::kF16) &&
                   it->second.device().is_cpu() && it->second.view().is_contiguous(),
               "shard_weights: tensor '", name,
               "' must be contiguous float32 (or bf16/f16) on the host");
  return it->second;
}

// Rows [begin, begin + count) of a 2-D (or 1-D) tensor, in its dtype (float32, or bf16/f16
// kept from the file); rows at or past the tensor's end are zero.
Tensor rows(const Tensor& t, int64_t begin, int64_t count) {
  const int64_t n = t.size(0);
  const int64_t cols = t.view().ndim == 2 ? t.size(1) : 1;
  const int64_t es = dtype_size(t.dtype());
  std::vector<int64_t> shape = {count};
  if (t.view().ndim == 2) shape.push_back(cols);
  Tensor out = Tensor::zeros(shape, t.dtype());
  const int64_t have = std::clamp<int64_t>(n - begin, 0, count);
  if (have > 0) {
    std::memcpy(out.data(), static_cast<const char*>(t.data()) + begin * cols * es,
                static_cast<size_t>(have * cols * es));
  }
  return out;
}

// Columns [begin, begin + count) of a 2-D tensor, in its dtype.
Tensor cols(const Tensor& t, int64_t begin, int64_t count) {
  const int64_t n = t.size(0), c = t.size(1);
  const int64_t es = dtype_size(t.dtype());
  Tensor out = Tensor::empty({n, count}, t.dtype());
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(static_cast<char*>(out.data()) + i * count * es,
                static_cast<const char*>(t.data()) + (i * c + begin) * es,
                static_cast<size_t>(count * es));
  }
  return out;
}

Tensor copy(const Tensor& t) { return rows(t, 0, t.size(0)); }

}  // namespace

void check_tensor_parallel(const ModelConfig& c, TensorParallel tp) {
  KVATTN_CHECK(tp.size >= 1, "tensor parallel: size must be >= 1 but is ", tp.size);
  KVATTN_CHECK(tp.rank >= 0 && tp.rank < tp.size, "tensor parallel: rank must be in [0, ",
               tp.size, ") but is ", tp.rank);
  KVATTN_CHECK(c.num_heads % tp.size == 0, "tensor parallel: size ", tp.size,
               " must divide num_heads (", c.num_heads, ")");
  KVATTN_CHECK(c.num_kv_heads % tp.size == 0, "tensor parallel: size ", tp.size,
               " must divide num_kv_heads (", c.num_kv_heads, ")");
  KVATTN_CHECK(c.intermediate_size % tp.size == 0, "tensor parallel: size ", tp.size,
               " must divide intermediate_size (", c.intermediate_size, ")");
}

int64_t vocab_shard_rows(int64_t vocab_size, int size) { return (vocab_size + size - 1) / size; }

ModelWeights shard_weights(const ModelWeights& full, TensorParallel tp) {
  const ModelConfig& c = full.config;
  check_tensor_parallel(c, tp);
  const int64_t n = tp.size, r = tp.rank, d = c.head_dim;
  const int64_t heads = c.num_heads / n, kv_heads = c.num_kv_heads / n;
  const int64_t inter = c.intermediate_size / n;
  const int64_t vs = vocab_shard_rows(c.vocab_size, tp.size);

  ModelWeights out;
  out.config = c;
  out.config.num_heads = heads;
  out.config.num_kv_heads = kv_heads;
  out.config.intermediate_size = inter;
  out.config.vocab_size = vs;
  auto& t = out.tensors;

  t["model.embed_tokens.weight"] = rows(get(full, "model.embed_tokens.weight"), r * vs, vs);
  t["model.norm.weight"] = copy(get(full, "model.norm.weight"));
  if (full.tensors.count("lm_head.weight") != 0) {
    t["lm_head.weight"] = rows(get(full, "lm_head.weight"), r * vs, vs);
  }
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    for (const char* norm : {"input_layernorm.weight", "post_attention_layernorm.weight",
                             "pre_feedforward_layernorm.weight",
                             "post_feedforward_layernorm.weight", "self_attn.q_norm.weight",
                             "self_attn.k_norm.weight"}) {
      if (full.tensors.count(p + norm) != 0) t[p + norm] = copy(get(full, p + norm));
    }
    t[p + "self_attn.q_proj.weight"] =
        rows(get(full, p + "self_attn.q_proj.weight"), r * heads * d, heads * d);
    for (const char* kv : {"self_attn.k_proj.weight", "self_attn.v_proj.weight"}) {
      t[p + kv] = rows(get(full, p + kv), r * kv_heads * d, kv_heads * d);
    }
    if (c.qkv_bias) {
      t[p + "self_attn.q_proj.bias"] =
          rows(get(full, p + "self_attn.q_proj.bias"), r * heads * d, heads * d);
      for (const char* kv : {"self_attn.k_proj.bias", "self_attn.v_proj.bias"}) {
        t[p + kv] = rows(get(full, p + kv), r * kv_heads * d, kv_heads * d);
      }
    }
    // Added after the all-reduce, on every rank: replicated.
    if (c.o_bias) t[p + "self_attn.o_proj.bias"] = copy(get(full, p + "self_attn.o_proj.bias"));
    t[p + "self_attn.o_proj.weight"] =
        cols(get(full, p + "self_attn.o_proj.weight"), r * heads * d, heads * d);
    for (const char* gu : {"mlp.gate_proj.weight", "mlp.up_proj.weight"}) {
      t[p + gu] = rows(get(full, p + gu), r * inter, inter);
    }
    t[p + "mlp.down_proj.weight"] = cols(get(full, p + "mlp.down_proj.weight"), r * inter, inter);
  }
  return out;
}

}  // namespace kvattn
