// How the token kernels (token_layers.h) split a step over their CTAs, in plain C++ (host and
// device) so that the CPU tests check it without a GPU: the model's shape and the plan (shared
// memory layout, row and column shares), each CTA's shares, the attention pieces, and the
// three-phase form's fixed-point sums (token_flow.cuh).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#if defined(__CUDACC__)
#define KVATTN_TOKEN_HD __host__ __device__
#else
#define KVATTN_TOKEN_HD
#endif

namespace kvattn::cuda_model {

// The model's shape and its RoPE (the fields of QkNormRope the kernel supports).
struct TokenShape {
  int num_layers = 0, hidden = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0, inter = 0;
  float eps = 1e-6f;
  float scale = 0.0f;  // softmax scale (1/sqrt(head_dim) when 0)
  const float* inv_freq = nullptr;  // device [rotary_dim / 2] or null (plain RoPE at theta)
  float theta = 10000.0f;
  float attention_factor = 1.0f;
  int rotary_dim = 0;  // 0: head_dim
  bool interleaved = false;
};

struct TokenLayersPlan {
  bool ok = false;
  std::string why_not;  // when !ok
  int ctas = 0;
  size_t smem_bytes = 0;
  size_t workspace_bytes = 0;  // the attention pieces (float)
  // Shared-memory layout (byte offsets) and the per-CTA row counts of each GEMV phase.
  size_t off_xs = 0, off_slab0 = 0, off_slab1 = 0, off_att = 0, off_red = 0, off_norm = 0;
  size_t slab0_bytes = 0, slab1_bytes = 0;
  int rows_qkv = 0, rows_o = 0, rows_gate_up = 0, rows_down = 0;
  int max_pieces = 0;  // attention pieces per KV head at most
  // max_pieces x the keys of one round: longer contexts read a piece in several dependent
  // rounds (correct, but slower than the layered path's decode kernel; the model keeps those
  // on the layered path).
  int64_t max_context = 0;
  // The three-phase kernel (token_flow.cu) when set: o_proj split by query head (o_per_head
  // CTAs a head, o_rows output rows each, loaded in boxes of o_box_rows rows), down by the
  // CTA's gate_up features (rows_gate_up, a multiple of 8, columns a CTA, boxes of
  // down_box_rows rows); off_act: the CTA's SiLU * up values (floats [rows_gate_up]).
  bool flow = false;
  int o_per_head = 0, o_rows = 0, o_box_rows = 0, down_box_rows = 0;
  size_t off_act = 0;
  size_t flow_state_bytes = 0;  // TokenLayersArgs::flow_state
};

namespace token {

inline constexpr int kWarps = 8;
inline constexpr int kThreads = kWarps * 32;
inline constexpr int kMaxGroup = 8;         // query heads per KV head
inline constexpr int kRoundKeys = 64;       // cached keys a CTA holds in shared memory at once
inline constexpr int kMinPieceKeys = 32;    // keys below which a KV head is not split further
inline constexpr int kMaxPiecesPerHead = 32;
inline constexpr int kMaxBoxRows = 256;     // a TMA box's rows at most
// The three-phase form: its tensor maps travel in the kernel's parameters (token_params.cuh
// FlowParams), so the layers are bounded; and at most 255 CTAs add into one fixed-point
// element (the clamp below keeps 255 partials within 2^63).
inline constexpr int kMaxFlowLayers = 64;
inline constexpr int kMaxFlowCtas = 255;

// The attention area of shared memory (token_attention.cuh says what each part holds).
template <int D>
struct AttSmem {
  static constexpr size_t kBf16 = 2;
  static constexpr size_t kQ = 0;
  static constexpr size_t kKnew = kQ + sizeof(float) * kMaxGroup * D;
  static constexpr size_t kVnew = kKnew + sizeof(float) * D;
  static constexpr size_t kRaw = kVnew + sizeof(float) * D;
  static constexpr size_t kNorm = kRaw + kBf16 * kWarps * D;
  static constexpr size_t kRope = kNorm + sizeof(float) * kWarps * D;   // cos, sin [D / 2] each
  static constexpr size_t kQkNorm = kRope + sizeof(float) * D;          // q, k norm weights bf16 [D]
  static constexpr size_t kBlocks = kQkNorm + kBf16 * 2 * D;          // int [kRoundKeys]
  static constexpr size_t kUnion = kBlocks + sizeof(int) * kRoundKeys;
  static constexpr size_t kRoundBytes = kBf16 * 2 * kRoundKeys * D;
  static constexpr size_t kStateBytes = sizeof(float) * kWarps * kMaxGroup * (D + 2);
  static constexpr size_t kBytes = kUnion + (kRoundBytes > kStateBytes ? kRoundBytes : kStateBytes);
};

// The attention area's size for head_dim d (64 or 128).
constexpr size_t att_smem_bytes(int d) {
  return d == 64 ? AttSmem<64>::kBytes : AttSmem<128>::kBytes;
}

constexpr size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

// The output rows [first, first + count) CTA b owns of a phase of n rows, `rows` a CTA.
struct RowRange {
  int first, count;
};
KVATTN_TOKEN_HD inline RowRange row_range_of(int b, int n, int rows) {
  const int first = b * rows;
  const int left = n - first;
  return {first, left <= 0 ? 0 : (left < rows ? left : rows)};
}

// The attention pieces of a step over L keys: every KV head's keys split into `pieces` ranges
// of `chunk` keys (the last shorter, or empty), pieces * nkv items over the CTAs (item = head
// * pieces + piece).
struct Pieces {
  int pieces, chunk, items;
};
KVATTN_TOKEN_HD inline Pieces pieces_of(int L, int max_pieces, int nkv) {
  if (L <= 0) return {0, 0, 0};
  const int want = (L + kMinPieceKeys - 1) / kMinPieceKeys;
  const int pieces = want < max_pieces ? (want > 1 ? want : 1) : max_pieces;
  const int chunk = (L + pieces - 1) / pieces;
  return {pieces, chunk, pieces * nkv};
}

// The three-phase form's o_proj share of CTA b: query head qh's columns of output rows [r0,
// r0 + nr) (nr 0: none).
struct OUnit {
  int qh, r0, nr;
};
KVATTN_TOKEN_HD inline OUnit o_unit_of(int b, int nh, int o_per_head, int o_rows, int hidden) {
  const int qh = b / o_per_head;
  if (qh >= nh) return {0, 0, 0};
  const int r0 = (b - qh * o_per_head) * o_rows;
  const int left = hidden - r0;
  return {qh, r0, left <= 0 ? 0 : (left < o_rows ? left : o_rows)};
}

// The three-phase form's state (TokenLayersArgs::flow_state): the two fixed-point sums
// [2][hidden] (u64), then their non-finite flags [2] and the KV heads' arrival counters [nkv]
// (u32), each part 128-byte aligned.
constexpr size_t flow_flags_offset(int hidden) { return align_up(sizeof(uint64_t) * 2 * hidden, 128); }
constexpr size_t flow_state_bytes(int hidden, int nkv) {
  return flow_flags_offset(hidden) + align_up(sizeof(unsigned) * (2 + nkv), 128);
}

// Fixed point for the split-K sums (token_flow.cuh): 2^32 units per 1.0, partials clamped to
// 2^23 in magnitude (kMaxFlowCtas of them stay below 2^63).
inline constexpr float kFixedOne = 4294967296.0f;
inline constexpr float kFixedClamp = 8388608.0f;

// A finite partial's fixed-point value (two's complement in 64 bits), rounded to nearest.
KVATTN_TOKEN_HD inline unsigned long long fixed_of(float x) {
  x = x < -kFixedClamp ? -kFixedClamp : (x > kFixedClamp ? kFixedClamp : x);
#if defined(__CUDA_ARCH__)
  return static_cast<unsigned long long>(__float2ll_rn(x * kFixedOne));
#else
  return static_cast<unsigned long long>(std::llrint(x * kFixedOne));
#endif
}

// A sum's value (before its rounding to bf16).
KVATTN_TOKEN_HD inline float fixed_sum_value(unsigned long long a) {
  return static_cast<float>(static_cast<double>(static_cast<long long>(a)) * (1.0 / 4294967296.0));
}

}  // namespace token

// The plan's layout for a device of `sms` SMs and `smem_optin` bytes of shared memory a block:
// the five-phase kernel's, or with `flow` the three-phase one's (plain C++: no device query,
// no launch; token_layers_plan adds those).
TokenLayersPlan token_layers_layout(const TokenShape& shape, int sms, size_t smem_optin,
                                    bool flow);

}  // namespace kvattn::cuda_model
