// The token kernels' split of a step over their CTAs (src/engine/model/token_layers/
// token_split.h), checked on the CPU for random model shapes and devices, both forms:
// - every GEMV phase's output rows, the three-phase form's o_proj shares (query head x rows)
//   and its down columns are owned by exactly one CTA, and each share fits the shared-memory
//   slab its copies land in (TMA boxes of at most 256 rows, 16-byte rows, 128-byte-aligned
//   box starts);
// - the attention pieces cover each KV head's keys exactly once, each piece within one round
//   up to the plan's max_context, and no more items than CTAs;
// - the shared-memory areas are aligned, disjoint and within the device's limit; the plan
//   refuses only for a reason it names (and accepts every coverable shape given room);
// - the fixed-point sums: the same bits in any order of the partials, within 2^-33 per partial
//   of the exact sum, no overflow at the clamp with the most CTAs allowed.
// The model shapes the kernels are measured on (SmolLM2-135M, Qwen3-0.6B on 132 SMs, 227 KB)
// plan in both forms.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "engine/model/token_layers/token_split.h"

namespace kvattn::cuda_model {
namespace {

using token::kMaxBoxRows;

constexpr size_t kH100Smem = 227 * 1024;

TokenShape shape_of(int layers, int hidden, int nh, int nkv, int d, int inter) {
  TokenShape s;
  s.num_layers = layers;
  s.hidden = hidden;
  s.num_heads = nh;
  s.num_kv_heads = nkv;
  s.head_dim = d;
  s.inter = inter;
  return s;
}

// Rows [0, n) of a phase whose CTA b owns row_range_of(b, n, rows): each exactly once.
void check_rows(const char* what, int n, int rows, int ctas) {
  std::vector<int> seen(n, 0);
  for (int b = 0; b < ctas; ++b) {
    const token::RowRange r = token::row_range_of(b, n, rows);
    RC_ASSERT(r.count >= 0);
    RC_ASSERT(r.count <= rows);
    for (int i = 0; i < r.count; ++i) {
      RC_ASSERT(r.first + i < n);
      ++seen[r.first + i];
    }
  }
  for (int i = 0; i < n; ++i) {
    if (seen[i] != 1) RC_FAIL(std::string(what) + ": row " + std::to_string(i) + " owned " + std::to_string(seen[i]) + " times");
  }
}

void check_pieces(const TokenLayersPlan& plan, const TokenShape& s, int L) {
  const token::Pieces pc = token::pieces_of(L, plan.max_pieces, s.num_kv_heads);
  // CTA b takes items b, b + ctas, ... (attention_items), so more items than CTAs are right in
  // the five-phase form; the plan gives that only where there are fewer CTAs than KV heads (a
  // piece a head). The three-phase form counts each item's arrival once by its CTA: one item
  // a CTA at most (its plan needs at least as many CTAs as query heads).
  if (plan.flow) {
    RC_ASSERT(pc.items <= plan.ctas);
  } else {
    RC_ASSERT(pc.items <= plan.ctas || (pc.pieces == 1 && plan.ctas < s.num_kv_heads));
  }
  RC_ASSERT(pc.pieces <= plan.max_pieces);
  RC_ASSERT(pc.items == pc.pieces * s.num_kv_heads);
  int covered = 0, longest = 0;
  for (int piece = 0; piece < pc.pieces; ++piece) {
    const int k0 = std::min(L, piece * pc.chunk), k1 = std::min(L, k0 + pc.chunk);
    RC_ASSERT(k0 == std::min(L, covered));  // contiguous, in order
    covered = std::max(covered, k1);
    longest = std::max(longest, k1 - k0);
  }
  RC_ASSERT(covered == L);
  if (L <= plan.max_context) RC_ASSERT(longest <= token::kRoundKeys);
}

void check_layout(const TokenLayersPlan& p, size_t optin) {
  // Areas in order: red, xs, slab0, slab1, att, norm (, act), each 128-aligned after red.
  const std::vector<size_t> starts = {p.off_red, p.off_xs, p.off_slab0, p.off_slab1,
                                      p.off_att, p.off_norm};
  RC_ASSERT(p.off_red >= 16u);  // the two mbarriers
  for (size_t i = 1; i < starts.size(); ++i) {
    RC_ASSERT(starts[i] % 128 == 0);
    RC_ASSERT(starts[i] > starts[i - 1]);
  }
  RC_ASSERT(p.off_slab1 - p.off_slab0 >= p.slab0_bytes);
  RC_ASSERT(p.off_att - p.off_slab1 >= p.slab1_bytes);
  RC_ASSERT(p.smem_bytes <= optin);
  if (p.flow) {
    RC_ASSERT(p.off_act % 128 == 0);
    RC_ASSERT(p.off_act > p.off_norm);
    RC_ASSERT(p.off_act + sizeof(float) * p.rows_gate_up <= p.smem_bytes);
  }
}

void check_plan(const TokenShape& s, int sms, size_t optin, bool flow) {
  const TokenLayersPlan p = token_layers_layout(s, sms, optin, flow);
  RC_TAG(flow ? "three-phase" : "five-phase", p.ok ? "planned" : "refused");
  const int D = s.head_dim, H = s.hidden, I = s.inter, QD = s.num_heads * D;
  const int qkv_dim = (s.num_heads + 2 * s.num_kv_heads) * D;
  if (!p.ok) {
    RC_ASSERT(!p.why_not.empty());
    // Given room, every shape the kernel covers plans (the five-phase form always; the
    // three-phase one within its own limits).
    const TokenLayersPlan roomy = token_layers_layout(s, sms, size_t(1) << 30, flow);
    const int cols = ((I + sms - 1) / sms + 7) / 8 * 8;
    const bool flow_fits = s.num_heads <= sms && sms <= token::kMaxFlowCtas &&
                           s.num_layers <= token::kMaxFlowLayers && cols <= kMaxBoxRows;
    RC_ASSERT(roomy.ok == (!flow || flow_fits));
    return;
  }
  RC_ASSERT(p.flow == flow);
  RC_ASSERT(p.ctas == sms);
  check_layout(p, optin);
  check_rows("qkv", qkv_dim, p.rows_qkv, p.ctas);
  check_rows("gate_up", I, p.rows_gate_up, p.ctas);
  RC_ASSERT(p.slab0_bytes >= size_t(p.rows_qkv) * H * 2);
  RC_ASSERT(p.slab0_bytes >= size_t(2) * p.rows_gate_up * H * 2);
  RC_ASSERT(p.workspace_bytes >= sizeof(float) * size_t(p.max_pieces) * s.num_heads * (D + 2));
  RC_ASSERT(p.max_context == int64_t{p.max_pieces} * token::kRoundKeys);
  for (int L : {1, 2, 31, 32, 33, 63, 64, 65, int(p.max_context) - 1, int(p.max_context),
                int(p.max_context) + 1, 5000}) {
    if (L >= 1) check_pieces(p, s, L);
  }
  if (!flow) {
    check_rows("o_proj", H, p.rows_o, p.ctas);
    check_rows("down", H, p.rows_down, p.ctas);
    RC_ASSERT(p.slab1_bytes >= size_t(p.rows_o) * QD * 2);
    RC_ASSERT(p.slab1_bytes >= size_t(p.rows_down) * I * 2);
    return;
  }
  // o_proj shares: every (query head, output row) exactly once; a share's boxes fit slab 1.
  RC_ASSERT(p.o_per_head >= 1);
  RC_ASSERT(p.o_box_rows >= 1 && p.o_box_rows <= kMaxBoxRows);
  RC_ASSERT((D * 2) % 16 == 0);
  RC_ASSERT((size_t(p.o_box_rows) * D * 2) % 128 == 0);
  std::vector<int> seen(size_t(s.num_heads) * H, 0);
  for (int b = 0; b < p.ctas; ++b) {
    const token::OUnit u = token::o_unit_of(b, s.num_heads, p.o_per_head, p.o_rows, H);
    RC_ASSERT(u.nr >= 0 && u.nr <= p.o_rows);
    const int boxes = (u.nr + p.o_box_rows - 1) / p.o_box_rows;
    RC_ASSERT(size_t(boxes) * p.o_box_rows * D * 2 <= p.slab1_bytes);
    for (int r = 0; r < u.nr; ++r) {
      RC_ASSERT(u.qh < s.num_heads && u.r0 + r < H);
      ++seen[size_t(u.qh) * H + u.r0 + r];
    }
  }
  RC_ASSERT(std::all_of(seen.begin(), seen.end(), [](int v) { return v == 1; }));
  // down shares: the CTA's features (whole 16-byte units, <= 256), all H rows in boxes.
  const int cols = p.rows_gate_up;
  RC_ASSERT(cols % 8 == 0 && cols <= kMaxBoxRows);
  RC_ASSERT(p.down_box_rows >= 1 && p.down_box_rows <= kMaxBoxRows);
  const int down_boxes = (H + p.down_box_rows - 1) / p.down_box_rows;
  RC_ASSERT(size_t(down_boxes) * p.down_box_rows * cols * 2 <= p.slab1_bytes);
  if (down_boxes > 1) RC_ASSERT((size_t(p.down_box_rows) * cols * 2) % 128 == 0);
  int contributors = 0;
  for (int b = 0; b < p.ctas; ++b) contributors += token::row_range_of(b, I, cols).count > 0;
  RC_ASSERT(contributors <= token::kMaxFlowCtas);
  RC_ASSERT(s.num_layers <= token::kMaxFlowLayers);
  RC_ASSERT(p.flow_state_bytes >= sizeof(uint64_t) * 2 * H +
                                      sizeof(unsigned) * (2 + s.num_kv_heads));
  RC_ASSERT(token::flow_flags_offset(H) >= sizeof(uint64_t) * 2 * H);
  RC_ASSERT(token::flow_flags_offset(H) + sizeof(unsigned) * (2 + s.num_kv_heads) <=
            p.flow_state_bytes);
}

RC_GTEST_PROP(TokenSplit, EveryShareIsOwnedOnceAndFitsItsSlab, ()) {
  const int d = *rc::gen::element(64, 128);
  const int nkv = *rc::gen::inRange(1, 17);
  const int group = *rc::gen::inRange(1, 9);
  const int hidden = 8 * *rc::gen::inRange(1, 513);
  const int inter = 8 * *rc::gen::inRange(1, 2049);
  const int layers = *rc::gen::inRange(1, 81);
  const int sms = *rc::gen::oneOf(rc::gen::element(78, 114, 132, 144), rc::gen::inRange(1, 300));
  const size_t optin = *rc::gen::element(kH100Smem, size_t(99) * 1024, size_t(1) << 20);
  const bool flow = *rc::gen::arbitrary<bool>();
  check_plan(shape_of(layers, hidden, nkv * group, nkv, d, inter), sms, optin, flow);
}

TEST(TokenSplit, TheMeasuredModelsPlanInBothForms) {
  const TokenShape smol = shape_of(30, 576, 9, 3, 64, 1536);
  const TokenShape q06 = shape_of(28, 1024, 16, 8, 128, 3072);
  for (const TokenShape& s : {smol, q06}) {
    for (bool flow : {false, true}) {
      const TokenLayersPlan p = token_layers_layout(s, 132, kH100Smem, flow);
      EXPECT_TRUE(p.ok) << s.hidden << (flow ? " three-phase: " : " five-phase: ") << p.why_not;
      EXPECT_EQ(p.flow, flow);
    }
  }
  // SmolLM2-135M's three-phase split: 14 CTAs a query head of 42 rows, 16 features a CTA.
  const TokenLayersPlan p = token_layers_layout(smol, 132, kH100Smem, true);
  EXPECT_EQ(p.o_per_head, 14);
  EXPECT_EQ(p.o_rows, 42);
  EXPECT_EQ(p.rows_gate_up, 16);
  EXPECT_EQ(p.max_context, 32 * 64);
  // Refusals name their reason.
  EXPECT_EQ(token_layers_layout(shape_of(30, 576, 9, 3, 96, 1536), 132, kH100Smem, false).why_not,
            "head_dim is not 64 or 128");
  EXPECT_FALSE(token_layers_layout(shape_of(30, 576, 200, 8, 64, 1536), 132, kH100Smem, true).ok);
  EXPECT_FALSE(token_layers_layout(shape_of(80, 576, 9, 3, 64, 1536), 132, kH100Smem, true).ok);
  EXPECT_TRUE(token_layers_layout(shape_of(80, 576, 9, 3, 64, 1536), 132, kH100Smem, false).ok);
}

// The fixed-point sums: order-free, exact to 2^-33 a partial, and within 2^63 at the clamp.
TEST(TokenSplit, FixedPointSumsDoNotDependOnOrder) {
  std::mt19937_64 rng(3501);
  std::uniform_real_distribution<double> mag(-6.0, 6.0);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + static_cast<int>(rng() % token::kMaxFlowCtas);
    std::vector<float> parts(n);
    for (float& v : parts) {
      v = static_cast<float>((rng() & 1 ? 1.0 : -1.0) * std::pow(10.0, mag(rng)));
    }
    auto sum = [](const std::vector<float>& v) {
      unsigned long long a = 0;
      for (float x : v) a += token::fixed_of(x);
      return a;
    };
    const unsigned long long first = sum(parts);
    double exact = 0.0;
    for (float x : parts) exact += static_cast<double>(x);
    for (int k = 0; k < 3; ++k) {
      std::shuffle(parts.begin(), parts.end(), rng);
      ASSERT_EQ(sum(parts), first) << "trial " << trial;
    }
    const double got = token::fixed_sum_value(first);
    const double tol = n * std::ldexp(1.0, -33) + std::fabs(exact) * std::ldexp(1.0, -23);
    ASSERT_NEAR(got, exact, tol) << "trial " << trial << ", " << n << " partials";
  }
  // The clamp: the most CTAs, each at the largest magnitude, neither wrap nor lose the sign.
  for (float big : {1e9f, -1e9f}) {
    unsigned long long a = 0;
    for (int i = 0; i < token::kMaxFlowCtas; ++i) a += token::fixed_of(big);
    const double want = token::kMaxFlowCtas * static_cast<double>(big > 0 ? token::kFixedClamp
                                                                          : -token::kFixedClamp);
    EXPECT_EQ(token::fixed_sum_value(a), static_cast<float>(want));
  }
}

}  // namespace
}  // namespace kvattn::cuda_model
