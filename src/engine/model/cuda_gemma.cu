#include <cuda_bf16.h>

#include <algorithm>

#include "engine/model/cuda_bf16_math.cuh"
#include "engine/model/cuda_gemma.h"
#include "kernels/cuda/cuda_check.h"

namespace kvattn::cuda_model {
namespace {

constexpr int kNormThreads = 256;

__global__ void gemma_scale_rmsnorm_kernel(bf16* __restrict__ x, float scale,
                                           const float* __restrict__ w, float eps,
                                           bf16* __restrict__ out, int64_t hidden) {
  pdl_enter();
  bf16* xr = x + blockIdx.x * hidden;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
    const float v = r(f(xr[i]) * scale);
    xr[i] = b(v);
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum(ss) / static_cast<float>(hidden) + eps);
  bf16* o = out + blockIdx.x * hidden;
  // Each thread reads back the elements it wrote.
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) o[i] = b(f(xr[i]) * inv * w[i]);
}

__global__ void gemma_norm_add_rmsnorm_kernel(bf16* __restrict__ x, const bf16* __restrict__ add,
                                              const float* __restrict__ w_add,
                                              const float* __restrict__ w_out, float eps,
                                              bf16* __restrict__ out,
                                              const int32_t* __restrict__ rows, int64_t hidden) {
  pdl_enter();
  const int64_t r_out = blockIdx.x;
  const int64_t row = rows != nullptr ? rows[r_out] : r_out;
  bf16* xr = x + row * hidden;
  const bf16* ar = add + row * hidden;
  const bool write_back = rows == nullptr;
  // The added row: normed (a sandwich norm), or as it is (w_add null: Gemma 1). The branch
  // is uniform over the grid.
  const bool normed = w_add != nullptr;
  float ss = 0.0f;
  float inv_a = 1.0f;
  if (normed) {
    for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
      const float v = f(ar[i]);
      ss += v * v;
    }
    inv_a = rsqrtf(block_sum(ss) / static_cast<float>(hidden) + eps);
  }
  auto added = [&](int64_t i) { return normed ? r(f(ar[i]) * inv_a * w_add[i]) : f(ar[i]); };
  ss = 0.0f;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
    const float y = added(i);
    const float s = r(f(xr[i]) + y);
    if (write_back) xr[i] = b(s);
    ss += s * s;
  }
  if (out == nullptr || w_out == nullptr) return;  // uniform over the block
  const float inv = rsqrtf(block_sum(ss) / static_cast<float>(hidden) + eps);
  bf16* o = out + r_out * hidden;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
    float s;
    if (write_back) {
      s = f(xr[i]);  // this thread's own write above
    } else {
      s = r(f(xr[i]) + added(i));
    }
    o[i] = b(s * inv * w_out[i]);
  }
}

__global__ void gelu_tanh_mul_kernel(const bf16* __restrict__ gate_up, int64_t tokens,
                                     int64_t inter, bf16* __restrict__ out) {
  pdl_enter();
  // PyTorch's GeluType::Tanh: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
  constexpr float kBeta = 0.7978845608028654f;
  constexpr float kKappa = 0.044715f;
  const int64_t n = tokens * inter;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / inter, j = i % inter;
    const float g = f(gate_up[t * 2 * inter + j]);
    const float u = f(gate_up[t * 2 * inter + inter + j]);
    const float inner = kBeta * (g + kKappa * (g * g * g));
    out[i] = b(r(0.5f * g * (1.0f + tanhf(inner))) * u);
  }
}

__global__ void softcap_kernel(bf16* __restrict__ logits, int64_t ld, int64_t rows, int64_t cols,
                               float cap) {
  pdl_enter();
  const int64_t n = rows * cols;
  const float inv_cap = 1.0f / cap;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    bf16& v = logits[(i / cols) * ld + i % cols];
    v = b(cap * tanhf(f(v) * inv_cap));
  }
}

unsigned grid_for(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 65535));
}

}  // namespace

void gemma_scale_rmsnorm(void* x, float scale, const float* w, float eps, void* out,
                         int64_t tokens, int64_t hidden, Launch on) {
  if (tokens == 0) return;
  launch_kernel(gemma_scale_rmsnorm_kernel, static_cast<unsigned>(tokens), kNormThreads, 0, on,
                static_cast<bf16*>(x), scale, w, eps, static_cast<bf16*>(out), hidden);
}

void gemma_norm_add_rmsnorm(void* x, const void* add, const float* w_add, const float* w_out,
                            float eps, void* out, const int32_t* rows, int64_t num_rows,
                            int64_t hidden, Launch on) {
  if (num_rows == 0) return;
  launch_kernel(gemma_norm_add_rmsnorm_kernel, static_cast<unsigned>(num_rows), kNormThreads, 0,
                on, static_cast<bf16*>(x), static_cast<const bf16*>(add), w_add, w_out, eps,
                static_cast<bf16*>(out), rows, hidden);
}

void gelu_tanh_mul(const void* gate_up, int64_t tokens, int64_t inter, void* out, Launch on) {
  const int64_t n = tokens * inter;
  if (n == 0) return;
  launch_kernel(gelu_tanh_mul_kernel, grid_for(n), 256, 0, on,
                static_cast<const bf16*>(gate_up), tokens, inter, static_cast<bf16*>(out));
}

void softcap_logits(void* logits, int64_t ld, int64_t rows, int64_t cols, float cap,
                    Launch on) {
  const int64_t n = rows * cols;
  if (n == 0) return;
  launch_kernel(softcap_kernel, grid_for(n), 256, 0, on, static_cast<bf16*>(logits), ld, rows,
                cols, cap);
}

}  // namespace kvattn::cuda_model
