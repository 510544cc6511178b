#include "support/reference.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

namespace kvattn::test {
namespace {

double load(DType dt, const char* p) {
  switch (dt) {
    case DType::kF32: { float f; std::memcpy(&f, p, 4); return f; }
    case DType::kBF16: { bf16_t b; std::memcpy(&b, p, 2); return bf16_to_float(b); }
    case DType::kF16: { f16_t h; std::memcpy(&h, p, 2); return f16_to_float(h); }
    default: throw std::invalid_argument("reference: not a float dtype");
  }
}

const char* at3(const TensorView& t, int64_t i, int64_t j, int64_t k) {
  const int64_t off = i * t.strides[0] + j * t.strides[1] + k * t.strides[2];
  return static_cast<const char*>(t.data) + off * dtype_size(t.dtype);
}

const char* at4(const TensorView& t, int64_t i, int64_t j, int64_t k, int64_t l) {
  const int64_t off = i * t.strides[0] + j * t.strides[1] + k * t.strides[2] + l * t.strides[3];
  return static_cast<const char*>(t.data) + off * dtype_size(t.dtype);
}

void require(bool cond, const std::string& what) {
  if (!cond) throw std::out_of_range("reference: " + what);
}

RefAttention make_result(int64_t total_q, int64_t heads, int64_t dim) {
  RefAttention r;
  r.out.assign(static_cast<size_t>(total_q * heads * dim), 0.0);
  r.lse.assign(static_cast<size_t>(heads * total_q), -std::numeric_limits<double>::infinity());
  return r;
}

}  // namespace

void attention_reference(const double* q, const double* k, const double* v, int64_t lq,
                         int64_t lk, int64_t num_heads, int64_t num_kv_heads, int64_t head_dim,
                         double scale, bool causal, double* out, double* lse,
                         int64_t lse_stride, const RefMask& mask) {
  const int64_t group = num_heads / num_kv_heads;
  const int64_t D = head_dim;
  // The definition, one (i, j) pair at a time.
  const auto sees = [&](int64_t i, int64_t j) {
    const int64_t diag = i + lk - lq;
    if (causal && j > diag) return false;
    if (mask.window_left >= 0 && j < diag - mask.window_left) return false;
    if (mask.window_right >= 0 && j > diag + mask.window_right) return false;
    return true;
  };
  const auto visible = [&](int64_t i) {
    int64_t n = 0;
    for (int64_t j = 0; j < lk; ++j) n += sees(i, j) ? 1 : 0;
    return n;
  };
  const auto cap = [&](double s) {
    return mask.softcap > 0.0 ? mask.softcap * std::tanh(s / mask.softcap) : s;
  };
  const auto bias = [&](int64_t i, int64_t j, int64_t h) {
    if (mask.alibi.empty()) return 0.0;
    const double slope = mask.alibi[(mask.alibi_per_seq ? mask.seq * num_heads : 0) + h];
    return -slope * static_cast<double>(std::llabs(i + lk - lq - j));
  };
  // Two-pass softmax per (query row, head). The rows of a chunk and the heads of a KV group
  // are handled together so each key row is read once per chunk (memory order only; the
  // arithmetic of every row is the plain definition).
  constexpr int64_t kChunk = 8;
  std::vector<double> scores;
  for (int64_t i0 = 0; i0 < lq; i0 += kChunk) {
    const int64_t i1 = std::min(lq, i0 + kChunk);
    const int64_t rows = (i1 - i0) * group;
    scores.assign(static_cast<size_t>(rows * lk), 0.0);
    for (int64_t kh = 0; kh < num_kv_heads; ++kh) {
      // r = (i - i0) * group + g  <->  query row i, head kh * group + g
      const auto qrow = [&](int64_t r) { return q + ((i0 + r / group) * num_heads + kh * group + r % group) * D; };
      const auto orow = [&](int64_t r) { return out + ((i0 + r / group) * num_heads + kh * group + r % group) * D; };
      // Keys some row of the chunk sees (the others only cost time): [jmin, jmax).
      int64_t jmin = lk, jmax = 0;
      for (int64_t i = i0; i < i1; ++i) {
        for (int64_t j = 0; j < lk; ++j) {
          if (sees(i, j)) jmin = std::min(jmin, j), jmax = std::max(jmax, j + 1);
        }
      }
      for (int64_t j = jmin; j < jmax; ++j) {
        const double* kr = k + (j * num_kv_heads + kh) * D;
        for (int64_t r = 0; r < rows; ++r) {
          const double* qr = qrow(r);
          double s = 0.0;
#pragma omp simd reduction(+ : s)
          for (int64_t d = 0; d < D; ++d) s += qr[d] * kr[d];
          scores[r * lk + j] = cap(s * scale) + bias(i0 + r / group, j, kh * group + r % group);
        }
      }
      std::vector<double> m(rows, -std::numeric_limits<double>::infinity()), sum(rows, 0.0);
      for (int64_t r = 0; r < rows; ++r) {
        double* o = orow(r);
        for (int64_t d = 0; d < D; ++d) o[d] = 0.0;
        const int64_t i = i0 + r / group;
        for (int64_t j = 0; j < lk; ++j) {
          if (sees(i, j)) m[r] = std::max(m[r], scores[r * lk + j]);
        }
        for (int64_t j = 0; j < lk; ++j) {
          scores[r * lk + j] = sees(i, j) ? std::exp(scores[r * lk + j] - m[r]) : 0.0;
          sum[r] += scores[r * lk + j];
        }
      }
      for (int64_t j = jmin; j < jmax; ++j) {
        const double* vr = v + (j * num_kv_heads + kh) * D;
        for (int64_t r = 0; r < rows; ++r) {
          if (!sees(i0 + r / group, j)) continue;
          const double p = scores[r * lk + j];
          double* o = orow(r);
#pragma omp simd
          for (int64_t d = 0; d < D; ++d) o[d] += p * vr[d];
        }
      }
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = i0 + r / group, h = kh * group + r % group;
        if (visible(i) == 0) {  // sees no key: zeros, lse -inf
          lse[h * lse_stride + i] = -std::numeric_limits<double>::infinity();
          continue;
        }
        double* o = orow(r);
        for (int64_t d = 0; d < D; ++d) o[d] /= sum[r];
        lse[h * lse_stride + i] = m[r] + std::log(sum[r]);
      }
    }
  }
}

std::vector<int64_t> to_int64s(const TensorView& t) {
  std::vector<int64_t> out(static_cast<size_t>(t.numel()));
  std::vector<int64_t> idx(t.ndim, 0);
  for (size_t n = 0; n < out.size(); ++n) {
    int64_t off = 0;
    for (int d = 0; d < t.ndim; ++d) off += idx[d] * t.strides[d];
    const char* p = static_cast<const char*>(t.data) + off * dtype_size(t.dtype);
    if (t.dtype == DType::kI32) {
      int32_t x; std::memcpy(&x, p, 4); out[n] = x;
    } else if (t.dtype == DType::kI64) {
      int64_t x; std::memcpy(&x, p, 8); out[n] = x;
    } else {
      throw std::invalid_argument("to_int64s: not an integer dtype");
    }
    for (int d = t.ndim - 1; d >= 0; --d) {
      if (++idx[d] < t.shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

std::vector<double> gather_rows(const TensorView& t, int64_t begin, int64_t end) {
  const int64_t H = t.shape[1], D = t.shape[2];
  std::vector<double> out(static_cast<size_t>((end - begin) * H * D));
  size_t n = 0;
  for (int64_t i = begin; i < end; ++i)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < D; ++d) out[n++] = load(t.dtype, at3(t, i, h, d));
  return out;
}

std::vector<double> gather_paged(const TensorView& cache, const int64_t* table_row,
                                 int64_t table_len, int64_t lk) {
  const int64_t num_blocks = cache.shape[0], bs = cache.shape[1];
  const int64_t H = cache.shape[2], D = cache.shape[3];
  std::vector<double> out(static_cast<size_t>(lk * H * D));
  size_t n = 0;
  for (int64_t j = 0; j < lk; ++j) {
    require(j / bs < table_len, "key past the block table");
    const int64_t block = table_row[j / bs];
    require(block >= 0 && block < num_blocks, "block id out of range");
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < D; ++d) out[n++] = load(cache.dtype, at4(cache, block, j % bs, h, d));
  }
  return out;
}

RefAttention prefill_reference(const TensorView& q, const TensorView& k, const TensorView& v,
                               const std::vector<int64_t>& cu_q, const std::vector<int64_t>& cu_k,
                               double scale, bool causal, const RefMask& mask) {
  const int64_t total_q = q.shape[0], H = q.shape[1], D = q.shape[2], Hkv = k.shape[1];
  RefAttention r = make_result(total_q, H, D);
  for (size_t b = 0; b + 1 < cu_q.size(); ++b) {
    const int64_t lq = cu_q[b + 1] - cu_q[b], lk = cu_k[b + 1] - cu_k[b];
    const auto qs = gather_rows(q, cu_q[b], cu_q[b + 1]);
    const auto ks = gather_rows(k, cu_k[b], cu_k[b + 1]);
    const auto vs = gather_rows(v, cu_k[b], cu_k[b + 1]);
    RefMask m = mask;
    m.seq = static_cast<int64_t>(b);
    attention_reference(qs.data(), ks.data(), vs.data(), lq, lk, H, Hkv, D, scale, causal,
                        r.out.data() + cu_q[b] * H * D, r.lse.data() + cu_q[b], total_q, m);
  }
  return r;
}

RefAttention paged_prefill_reference(const TensorView& q, const TensorView& k_cache,
                                     const TensorView& v_cache, const TensorView& block_table,
                                     const std::vector<int64_t>& cu_q,
                                     const std::vector<int64_t>& cu_k, double scale,
                                     bool causal, const RefMask& mask,
                                     const std::vector<int64_t>& leftpad) {
  const int64_t total_q = q.shape[0], H = q.shape[1], D = q.shape[2], Hkv = k_cache.shape[2];
  const auto table = to_int64s(block_table);
  const int64_t width = block_table.shape[1];
  RefAttention r = make_result(total_q, H, D);
  for (size_t b = 0; b + 1 < cu_q.size(); ++b) {
    const int64_t lq = cu_q[b + 1] - cu_q[b], lk = cu_k[b + 1] - cu_k[b];
    const auto qs = gather_rows(q, cu_q[b], cu_q[b + 1]);
    const int64_t pad = b < leftpad.size() ? leftpad[b] : 0;  // keys start at this position
    const int64_t row = Hkv * D;
    const auto ks = gather_paged(k_cache, table.data() + b * width, width, pad + lk);
    const auto vs = gather_paged(v_cache, table.data() + b * width, width, pad + lk);
    RefMask m = mask;
    m.seq = static_cast<int64_t>(b);
    attention_reference(qs.data(), ks.data() + pad * row, vs.data() + pad * row, lq, lk, H, Hkv,
                        D, scale, causal, r.out.data() + cu_q[b] * H * D,
                        r.lse.data() + cu_q[b], total_q, m);
  }
  return r;
}

RefAttention decode_reference(const TensorView& q, const TensorView& k_cache,
                              const TensorView& v_cache, const TensorView& block_table,
                              const TensorView& cache_seqlens, int64_t q_len, double scale,
                              bool causal, const RefMask& mask,
                              const std::vector<int64_t>& leftpad) {
  const auto lens = to_int64s(cache_seqlens);
  std::vector<int64_t> cu_q(lens.size() + 1, 0), cu_k(lens.size() + 1, 0);
  for (size_t b = 0; b < lens.size(); ++b) {
    const int64_t pad = b < leftpad.size() ? leftpad[b] : 0;
    cu_q[b + 1] = cu_q[b] + q_len;
    cu_k[b + 1] = cu_k[b] + lens[b] - pad;
  }
  return paged_prefill_reference(q, k_cache, v_cache, block_table, cu_q, cu_k, scale, causal,
                                 mask, leftpad);
}

void store_kv_reference(const TensorView& key, const TensorView& value, const TensorView& k_cache,
                        const TensorView& v_cache, const TensorView& slot_mapping) {
  const auto slots = to_int64s(slot_mapping);
  const int64_t bs = k_cache.shape[1], H = k_cache.shape[2], D = k_cache.shape[3];
  const int64_t capacity = k_cache.shape[0] * bs;
  const int64_t es = dtype_size(key.dtype);
  for (size_t i = 0; i < slots.size(); ++i) {
    const int64_t s = slots[i];
    if (s < 0) continue;
    require(s < capacity, "slot out of range");
    const auto t = static_cast<int64_t>(i);
    for (int64_t h = 0; h < H; ++h) {
      std::memcpy(const_cast<char*>(at4(k_cache, s / bs, s % bs, h, 0)), at3(key, t, h, 0), D * es);
      std::memcpy(const_cast<char*>(at4(v_cache, s / bs, s % bs, h, 0)), at3(value, t, h, 0),
                  D * es);
    }
  }
}

}  // namespace kvattn::test
