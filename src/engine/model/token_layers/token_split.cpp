// token_split.h's layout: the token kernels' shared memory and shares for a device's SM count
// and shared-memory limit (plain C++, in every build: the CPU tests check it).
#include "engine/model/token_layers/token_split.h"

#include <algorithm>
#include <utility>

namespace kvattn::cuda_model {

TokenLayersPlan token_layers_layout(const TokenShape& s, int sms, size_t smem_optin, bool flow) {
  TokenLayersPlan plan;
  auto no = [&](std::string why) {
    plan.ok = false;
    plan.why_not = std::move(why);
    return plan;
  };
  if (s.num_layers <= 0) return no("no layers");
  if (s.head_dim != 64 && s.head_dim != 128) return no("head_dim is not 64 or 128");
  if (s.num_kv_heads <= 0 || s.num_heads % s.num_kv_heads != 0) return no("heads");
  const int g = s.num_heads / s.num_kv_heads;
  if (g > token::kMaxGroup) return no("GQA group above 8");
  if (s.hidden <= 0 || s.inter <= 0 || s.hidden % 8 != 0 || s.inter % 8 != 0) {
    return no("hidden or intermediate size not a positive multiple of 8");
  }
  const int R = s.rotary_dim == 0 ? s.head_dim : s.rotary_dim;
  if (R % 2 != 0 || R > s.head_dim) return no("rotary_dim");
  if (sms <= 0) return no("no SMs");
  const int n = sms;
  auto per = [n](int rows) { return (rows + n - 1) / n; };
  const int D = s.head_dim, H = s.hidden, I = s.inter, QD = s.num_heads * D;
  const int qkv_dim = (s.num_heads + 2 * s.num_kv_heads) * D;
  plan.ctas = n;
  plan.rows_qkv = per(qkv_dim);
  plan.rows_o = per(H);
  plan.rows_gate_up = per(I);
  plan.rows_down = per(H);
  plan.max_pieces = std::max(1, std::min(token::kMaxPiecesPerHead, n / s.num_kv_heads));
  plan.max_context = int64_t{plan.max_pieces} * token::kRoundKeys;
  size_t slab0 = std::max(size_t(plan.rows_qkv) * H, size_t(2) * plan.rows_gate_up * H) * 2;
  size_t slab1 = std::max(size_t(plan.rows_o) * QD, size_t(plan.rows_down) * I) * 2;
  if (flow) {
    // token_flow.cu: o_proj split by query head (o_per_head CTAs each, o_rows output rows a
    // CTA), down by the CTA's gate_up features (a multiple of 8 columns, so that its boxes'
    // rows are whole 16-byte units); both shares arrive as TMA boxes of at most 256 rows. A
    // CTA has at most one attention item (pieces x KV heads <= CTAs: nkv <= nh <= CTAs).
    if (s.num_heads > n) return no("more query heads than SMs (the split o_proj)");
    if (n > token::kMaxFlowCtas) return no("more SMs than the fixed-point sums allow");
    if (s.num_layers > token::kMaxFlowLayers) {
      return no("more layers than the kernel's parameters hold");
    }
    plan.flow = true;
    plan.o_per_head = n / s.num_heads;
    plan.o_rows = (H + plan.o_per_head - 1) / plan.o_per_head;
    plan.o_box_rows = std::min(plan.o_rows, token::kMaxBoxRows);
    const int cols = (per(I) + 7) / 8 * 8;
    if (cols > token::kMaxBoxRows) {
      return no("more than 256 intermediate features a CTA (the split down)");
    }
    plan.rows_gate_up = cols;
    plan.down_box_rows = std::min(H, token::kMaxBoxRows);
    auto padded = [](int rows, int box) { return size_t((rows + box - 1) / box) * box; };
    slab0 = std::max(size_t(plan.rows_qkv) * H, size_t(2) * cols * H) * 2;
    slab1 = std::max(padded(plan.o_rows, plan.o_box_rows) * D,
                     padded(H, plan.down_box_rows) * cols) * 2;
    plan.flow_state_bytes = token::flow_state_bytes(H, s.num_kv_heads);
  }
  plan.slab0_bytes = slab0;
  plan.slab1_bytes = slab1;
  const size_t xs = size_t(std::max({H, QD, I})) * 2;
  size_t off = 16;  // the two mbarriers
  plan.off_red = off;
  off = token::align_up(off + sizeof(float) * 16, 128);
  plan.off_xs = off;
  off = token::align_up(off + xs, 128);
  plan.off_slab0 = off;
  off = token::align_up(off + slab0, 128);
  plan.off_slab1 = off;
  off = token::align_up(off + slab1, 128);
  plan.off_att = off;
  off = token::align_up(off + token::att_smem_bytes(D), 128);
  plan.off_norm = off;
  off = token::align_up(off + size_t(4) * H, 128);
  if (plan.flow) {
    plan.off_act = off;
    off = token::align_up(off + sizeof(float) * plan.rows_gate_up, 128);
  }
  plan.smem_bytes = off;
  if (plan.smem_bytes > smem_optin) return no("shared memory above the device's limit");
  plan.workspace_bytes = sizeof(float) * size_t(s.num_kv_heads) * plan.max_pieces * g * (D + 2);
  plan.ok = true;
  return plan;
}

}  // namespace kvattn::cuda_model
