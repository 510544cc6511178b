#include <cuda_bf16.h>

#include <algorithm>

#include "engine/model/cuda_kernels.h"
#include "engine/model/cuda_bf16_math.cuh"
#include "kernels/cuda/cuda_check.h"

namespace kvattn::cuda_model {
namespace {

__global__ void embed_kernel(const bf16* __restrict__ table, const int32_t* __restrict__ ids,
                             int64_t hidden, int64_t first_id, int64_t num_ids,
                             bf16* __restrict__ out) {
  pdl_enter();
  const int64_t t = blockIdx.x;
  const int64_t local = static_cast<int64_t>(ids[t]) - first_id;
  if (local < 0 || local >= num_ids) {
    for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) out[t * hidden + i] = bf16(0.0f);
    return;
  }
  const bf16* src = table + local * hidden;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) out[t * hidden + i] = src[i];
}

// embed_kernel + add_rmsnorm_kernel (add = null, rows = null) in one: the same loops and the
// same block size, so x and out are bit-identical to the two launches'.
__global__ void embed_rmsnorm_kernel(const bf16* __restrict__ table,
                                     const int32_t* __restrict__ ids, int64_t hidden,
                                     int64_t first_id, int64_t num_ids,
                                     const bf16* __restrict__ w, float eps,
                                     bf16* __restrict__ x, bf16* __restrict__ out) {
  pdl_enter();
  const int64_t t = blockIdx.x;
  const int64_t local = static_cast<int64_t>(ids[t]) - first_id;
  const bf16* src = local < 0 || local >= num_ids ? nullptr : table + local * hidden;
  bf16* xr = x + t * hidden;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
    const bf16 e = src != nullptr ? src[i] : bf16(0.0f);
    xr[i] = e;
    float v = f(e);
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum(ss) / static_cast<float>(hidden) + eps);
  bf16* o = out + t * hidden;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
    float v = f(src != nullptr ? src[i] : bf16(0.0f));
    o[i] = b(f(w[i]) * r(v * inv));
  }
}

__global__ void add_rmsnorm_kernel(bf16* __restrict__ x, const bf16* __restrict__ add,
                                   const bf16* __restrict__ w, float eps,
                                   bf16* __restrict__ out, const int32_t* __restrict__ rows,
                                   int64_t hidden) {
  pdl_enter();
  const int64_t r_out = blockIdx.x;
  const int64_t row = rows != nullptr ? rows[r_out] : r_out;
  bf16* xr = x + row * hidden;
  const bf16* ar = add != nullptr ? add + row * hidden : nullptr;
  const bool write_back = rows == nullptr && ar != nullptr;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
    float v = f(xr[i]);
    if (ar != nullptr) {
      v = r(v + f(ar[i]));
      if (write_back) xr[i] = b(v);
    }
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum(ss) / static_cast<float>(hidden) + eps);
  bf16* o = out + r_out * hidden;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
    float v = f(xr[i]);
    if (ar != nullptr && !write_back) v = r(v + f(ar[i]));
    o[i] = b(f(w[i]) * r(v * inv));
  }
}

__global__ void silu_mul_kernel(const bf16* __restrict__ gate_up, int64_t tokens,
                                int64_t inter, bf16* __restrict__ out) {
  pdl_enter();
  const int64_t n = tokens * inter;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / inter, j = i % inter;
    const float g = f(gate_up[t * 2 * inter + j]);
    const float u = f(gate_up[t * 2 * inter + inter + j]);
    out[i] = b(r(g / (1.0f + expf(-g))) * u);
  }
}

__global__ void add_bias_kernel(bf16* __restrict__ x, int64_t ld, int64_t rows, int64_t n,
                                const bf16* __restrict__ bias) {
  pdl_enter();
  const int64_t total = rows * n;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / n, j = i % n;
    bf16& v = x[t * ld + j];
    v = b(f(v) + f(bias[j]));
  }
}

__global__ void scatter_block_table_kernel(const int32_t* __restrict__ compact,
                                           const int32_t* __restrict__ meta,
                                           int32_t* __restrict__ table, int64_t width) {
  pdl_enter();
  const int64_t r = blockIdx.x;
  const int64_t n = meta[0];
  const int64_t w = min(static_cast<int64_t>(meta[1]), width);
  if (r >= n) return;
  for (int64_t c = threadIdx.x; c < w; c += blockDim.x) table[r * width + c] = compact[r * meta[1] + c];
}

}  // namespace

void scatter_block_table(const int32_t* compact, const int32_t* meta, int32_t* table,
                         int64_t width, int64_t rows, Launch on) {
  if (rows == 0) return;
  launch_kernel(scatter_block_table_kernel, static_cast<unsigned>(rows), 128, 0, on, compact,
                meta, table, width);
}

void embed(const void* table, const int32_t* ids, int64_t tokens, int64_t hidden,
           int64_t first_id, int64_t num_ids, void* out, Launch on) {
  if (tokens == 0) return;
  launch_kernel(embed_kernel, static_cast<unsigned>(tokens), 128, 0, on,
                static_cast<const bf16*>(table), ids, hidden, first_id, num_ids,
                static_cast<bf16*>(out));
}

void embed_rmsnorm(const void* table, const int32_t* ids, int64_t tokens, int64_t hidden,
                   int64_t first_id, int64_t num_ids, const void* w, float eps, void* x,
                   void* out, Launch on) {
  if (tokens == 0) return;
  launch_kernel(embed_rmsnorm_kernel, static_cast<unsigned>(tokens), 256, 0, on,
                static_cast<const bf16*>(table), ids, hidden, first_id, num_ids,
                static_cast<const bf16*>(w), eps, static_cast<bf16*>(x),
                static_cast<bf16*>(out));
}

void add_rmsnorm(void* x, const void* add, const void* w, float eps, void* out,
                 const int32_t* rows, int64_t num_rows, int64_t hidden, Launch on) {
  if (num_rows == 0) return;
  launch_kernel(add_rmsnorm_kernel, static_cast<unsigned>(num_rows), 256, 0, on,
                static_cast<bf16*>(x), static_cast<const bf16*>(add),
                static_cast<const bf16*>(w), eps, static_cast<bf16*>(out), rows, hidden);
}

void add_bias(void* x, int64_t ld, int64_t rows, int64_t n, const void* bias, Launch on) {
  const int64_t total = rows * n;
  if (total == 0) return;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((total + 255) / 256, 65535));
  launch_kernel(add_bias_kernel, blocks, 256, 0, on, static_cast<bf16*>(x), ld, rows, n,
                static_cast<const bf16*>(bias));
}

void silu_mul(const void* gate_up, int64_t tokens, int64_t inter, void* out, Launch on) {
  const int64_t n = tokens * inter;
  if (n == 0) return;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 65535));
  launch_kernel(silu_mul_kernel, blocks, 256, 0, on, static_cast<const bf16*>(gate_up), tokens,
                inter, static_cast<bf16*>(out));
}

}  // namespace kvattn::cuda_model
