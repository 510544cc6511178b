// The qkv GEMV with the q/k norm + RoPE + KV write as its epilogue (engine/model/cuda_gemv.h
// run_rmsnorm_rope_kv, thread block clusters of one head each; run_rmsnorm_rope_pairs, warps
// owning rotation pairs, for heads without q/k norms rotated whole) against the two launches it
// replaces, Gemv::run_rmsnorm then qk_norm_rope_store_kv, on the same random inputs: every
// element of qkv (y, padding columns included), of the residual written back, and every byte of
// both caches must be identical, and the fault word the same (the epilogue runs the standalone
// kernel's arithmetic from cuda_rope_math.cuh; the two launches are checked against float64 in
// cuda_gemv_fused_gpu_test and fused_rope_kv_gpu_test). Shapes: Qwen3-0.6B's layer (16/8 heads
// of 128, hidden 1024: clusters of 8 CTAs), SmolLM2's (9/3 of 64, hidden 576: the K-split
// work split, clusters of 4), GQA 1 (8/8), Llama-8B's widths (32/8, hidden 4096), a tiny
// model (4/2 of 32, hidden 64: clusters of one CTA); rows 1-4; bf16 and e4m3 caches (scales
// small enough to saturate); q/k norms on and off; both RoPE styles; page sizes 1 and 16;
// pad rows (slot -1) and a slot past the cache. Also: plain, PDL and CUDA-graph launches, the
// cases it declines (launching nothing), and its argument checks. Exits 77 without a CUDA
// device (or in a build without the CUDA backend).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>
#include <vector>

#include "engine_test_util.h"
#include "rope_kv_test_util.h"
#include "kvattn/core/device.h"
#include "kvattn/core/error.h"
#include "kvattn/core/tensor.h"
#include "support/case_util.h"

#ifdef KVATTN_WITH_CUDA
#include <cuda_runtime_api.h>

#include "engine/model/cuda_gemv.h"
#include "engine/model/cuda_rope_kv.h"
#include "kvattn/kernels/device_faults.h"
#endif

namespace kvattn {
namespace {

#ifdef KVATTN_WITH_CUDA

namespace k = cuda_model;

uint16_t f2bf(float f) { return float_to_bf16(f).bits; }

struct Case {
  int64_t rows, hidden, heads, kv_heads, head_dim, block_size;
  bool qk_norm, interleaved, fp8, with_add;
  int64_t pad_cols = 0;  // ldy = n + pad_cols
  bool bad_slot = false;
  int64_t rotary = 0;  // rotated dims of a head (0: all; partial rotary embeddings)
};

std::string describe(const Case& c) {
  std::ostringstream os;
  os << "rows " << c.rows << " hidden " << c.hidden << " H " << c.heads << "/" << c.kv_heads
     << " D " << c.head_dim << " bs " << c.block_size << (c.qk_norm ? " qk_norm" : "")
     << (c.interleaved ? " interleaved" : "") << (c.fp8 ? " e4m3" : " bf16")
     << (c.with_add ? " +add" : "") << " ld+" << c.pad_cols << (c.bad_slot ? " bad slot" : "");
  if (c.rotary > 0) os << " rotary " << c.rotary;
  return os.str();
}

using test::upload;

// All of d.
template <typename T>
std::vector<T> download(const Tensor& d) {
  return test::download<T>(d, static_cast<size_t>(d.nbytes()) / sizeof(T));
}

// Host inputs of one case.
struct Inputs {
  int64_t n = 0, ldy = 0, num_blocks = 0;
  std::vector<uint16_t> x, add, norm_w, w, q_norm, k_norm, y_poison, x2_poison;
  std::vector<int32_t> pos, slots;
  std::vector<float> k_scale, v_scale;
  std::vector<uint8_t> cache;  // [num_blocks, 2 (K, V), block_size, kv_heads, head_dim]
};

Inputs make_inputs(const Case& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Inputs in;
  in.n = (c.heads + 2 * c.kv_heads) * c.head_dim;
  in.ldy = in.n + c.pad_cols;
  std::uniform_real_distribution<float> u(-2.0f, 2.0f), wd(-1.0f, 1.0f), nw(0.5f, 1.5f);
  auto fill = [&](std::vector<uint16_t>& v, size_t count, auto& dist) {
    v.resize(count);
    for (auto& e : v) e = f2bf(dist(rng));
  };
  fill(in.x, c.rows * c.hidden, u);
  if (c.with_add) fill(in.add, c.rows * c.hidden, wd);
  fill(in.norm_w, c.hidden, nw);
  fill(in.w, in.n * c.hidden, wd);
  if (c.qk_norm) {
    fill(in.q_norm, c.head_dim, nw);
    fill(in.k_norm, c.head_dim, nw);
  }
  in.y_poison.assign(c.rows * in.ldy, 0xffc1);  // NaN
  in.x2_poison.assign(c.rows * c.hidden, 0xffc1);
  std::uniform_int_distribution<int32_t> p(0, 40000);
  for (int64_t r = 0; r < c.rows; ++r) in.pos.push_back(p(rng));
  const int64_t need = 4 * c.rows + c.block_size;
  in.num_blocks = (need + c.block_size - 1) / c.block_size;
  std::vector<int32_t> all(in.num_blocks * c.block_size);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  for (int64_t r = 0; r < c.rows; ++r) in.slots.push_back(r == 2 ? -1 : all[r]);  // row 2: pad
  if (c.bad_slot) in.slots[0] = static_cast<int32_t>(all.size() + 3);
  if (c.fp8) {
    std::uniform_real_distribution<float> sc(0.004f, 0.05f);
    for (auto* s : {&in.k_scale, &in.v_scale}) {
      s->resize(c.kv_heads);
      for (auto& e : *s) e = sc(rng);
    }
  }
  const int64_t elem = c.fp8 ? 1 : 2;
  in.cache.resize(in.num_blocks * 2 * c.block_size * c.kv_heads * c.head_dim * elem);
  for (size_t i = 0; i < in.cache.size(); ++i) in.cache[i] = static_cast<uint8_t>(0x5A ^ (i * 37));
  return in;
}

// One path's device state.
struct PathState {
  Tensor x, add, norm_w, w, q_norm, k_norm, y, x2, pos, slots, k_scale, v_scale, cache;
  k::Gemv::NormInput nin;
  k::QkNormRope rope;
  k::KVWrite kv;
};

PathState stage(const Case& c, const Inputs& in) {
  PathState r;
  r.x = upload(in.x, DType::kBF16);
  if (c.with_add) r.add = upload(in.add, DType::kBF16);
  r.norm_w = upload(in.norm_w, DType::kBF16);
  r.w = upload(in.w, DType::kBF16);
  if (c.qk_norm) {
    r.q_norm = upload(in.q_norm, DType::kBF16);
    r.k_norm = upload(in.k_norm, DType::kBF16);
  }
  r.y = upload(in.y_poison, DType::kBF16);
  r.x2 = upload(in.x2_poison, DType::kBF16);
  r.pos = upload(in.pos, DType::kI32);
  r.slots = upload(in.slots, DType::kI32);
  if (c.fp8) {
    r.k_scale = upload(in.k_scale, DType::kF32);
    r.v_scale = upload(in.v_scale, DType::kF32);
  }
  r.cache = upload(in.cache, DType::kU8);

  r.nin.x = r.x.data();
  r.nin.add = c.with_add ? r.add.data() : nullptr;
  r.nin.weight = r.norm_w.data();
  r.nin.eps = 1e-6f;
  r.nin.x_out = c.with_add ? r.x2.data() : nullptr;

  r.rope = test::test_rope(r.y.data(), in.ldy, c.rows, c.heads, c.kv_heads, c.head_dim,
                           c.qk_norm ? r.q_norm.data() : nullptr,
                           c.qk_norm ? r.k_norm.data() : nullptr, r.pos.ptr<const int32_t>(),
                           c.interleaved, c.rotary);
  const test::PagedKV views =
      test::paged_kv_views(r.cache.data(), c.fp8 ? DType::kF8E4M3 : DType::kBF16,
                           c.fp8 ? 1 : 2, in.num_blocks, c.block_size, c.kv_heads, c.head_dim);
  r.kv.k_cache = views.k;
  r.kv.v_cache = views.v;
  if (c.fp8) {
    r.kv.k_scale = r.k_scale.view();
    r.kv.v_scale = r.v_scale.view();
  }
  r.kv.slot_mapping = r.slots.view();
  return r;
}

enum class How { kPlain, kPdl, kGraph };
// Which epilogue: run_rmsnorm_rope_kv (clusters) or run_rmsnorm_rope_pairs.
enum class Form { kClusters, kPairs };

bool call_fused(const k::Gemv& gemv, const Case& c, const Inputs& in, PathState& r, Form form,
                k::Launch on) {
  return form == Form::kPairs
             ? gemv.run_rmsnorm_rope_pairs(r.nin, c.rows, c.hidden, r.w.data(), in.n, r.y.data(),
                                           in.ldy, r.rope, r.kv, on)
             : gemv.run_rmsnorm_rope_kv(r.nin, c.rows, c.hidden, r.w.data(), in.n, r.y.data(),
                                        in.ldy, r.rope, r.kv, on);
}

// Runs the fused entry as `how` says; returns what it returned.
bool run_fused(const k::Gemv& gemv, const Case& c, const Inputs& in, PathState& r, How how,
               Form form = Form::kClusters) {
  if (how == How::kGraph) {
    cudaStream_t s = nullptr;
    EXPECT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    cudaGraph_t g = nullptr;
    cudaGraphExec_t e = nullptr;
    EXPECT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    const bool ran = call_fused(gemv, c, in, r, form, k::Launch(s, true));
    EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
    EXPECT_EQ(cudaGraphInstantiate(&e, g, 0), cudaSuccess);
    for (int i = 0; i < 2; ++i) EXPECT_EQ(cudaGraphLaunch(e, s), cudaSuccess);  // idempotent
    EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    cudaGraphExecDestroy(e);
    cudaGraphDestroy(g);
    cudaStreamDestroy(s);
    return ran;
  }
  return call_fused(gemv, c, in, r, form, k::Launch(nullptr, how == How::kPdl));
}

template <typename T>
int64_t count_diff(const std::vector<T>& a, const std::vector<T>& b) {
  int64_t d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d += a[i] != b[i];
  return d + static_cast<int64_t>(std::max(a.size(), b.size()) - std::min(a.size(), b.size()));
}

void run_case(const k::Gemv& gemv, const Case& c, uint64_t seed, How how,
              Form form = Form::kClusters) {
  SCOPED_TRACE(test::case_note(0, seed, describe(c) + (form == Form::kPairs ? " pairs" : "") +
                                            (how == How::kPdl     ? " pdl"
                                             : how == How::kGraph ? " graph"
                                                                  : "")));
  const Inputs in = make_inputs(c, seed);
  PathState a = stage(c, in), b = stage(c, in);
  ASSERT_EQ(read_device_faults(Device::cuda(0), true), 0u);

  gemv.run_rmsnorm(a.nin, c.rows, c.hidden, a.w.data(), in.n, a.y.data(), in.ldy, nullptr);
  k::qk_norm_rope_store_kv(a.rope, a.kv, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const uint32_t faults_a = read_device_faults(Device::cuda(0), true);

  ASSERT_TRUE(run_fused(gemv, c, in, b, how, form)) << "the epilogue declined a case it covers";
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const uint32_t faults_b = read_device_faults(Device::cuda(0), true);

  EXPECT_EQ(faults_a, c.bad_slot ? uint32_t{kFaultSlotOutOfRange} : 0u);
  EXPECT_EQ(faults_b, faults_a) << "the fault words differ";
  EXPECT_EQ(count_diff(download<uint16_t>(a.y), download<uint16_t>(b.y)), 0)
      << "qkv elements differ (padding columns included)";
  EXPECT_EQ(count_diff(download<uint16_t>(a.x2), download<uint16_t>(b.x2)), 0)
      << "the residual written back differs";
  const auto cache_a = download<uint8_t>(a.cache), cache_b = download<uint8_t>(b.cache);
  EXPECT_EQ(count_diff(cache_a, cache_b), 0) << "cache bytes differ";
  EXPECT_NE(count_diff(cache_b, in.cache), 0) << "nothing was stored";
}

class GemvRopeKv : public ::testing::TestWithParam<bool> {};  // the cache is e4m3

TEST_P(GemvRopeKv, EqualsRunRmsnormThenQkNormRopeStoreKv) {
  const bool fp8 = GetParam();
  k::Gemv gemv(0);
  std::vector<Case> cases;
  struct Shape {
    int64_t hidden, heads, kv_heads, head_dim;
  };
  const std::vector<Shape> shapes = {
      {1024, 16, 8, 128}, {576, 9, 3, 64}, {1024, 8, 8, 128}, {4096, 32, 8, 128}, {64, 4, 2, 32}};
  for (const Shape& s : shapes) {
    for (int64_t rows = 1; rows <= k::Gemv::kFusedPreferredRows; ++rows) {
      const bool odd = (rows + s.heads) % 2 == 1;
      cases.push_back(Case{rows, s.hidden, s.heads, s.kv_heads, s.head_dim, rows == 2 ? 1 : 16,
                           odd, rows == 3, fp8, rows > 1, rows == 4 ? 8 : 0});
    }
  }
  cases.push_back(Case{3, 1024, 16, 8, 128, 16, true, false, fp8, true, 0, true});
  // Partial rotary embeddings (half a head, as Phi-4-mini; a quarter, interleaved).
  cases.push_back(Case{2, 1024, 16, 8, 128, 16, false, false, fp8, true, 0, false, 64});
  cases.push_back(Case{3, 576, 9, 3, 64, 16, true, true, fp8, false, 0, false, 16});
  for (const Case& c : cases) {
    run_case(gemv, c, test::case_seed(), How::kPlain);
    if (::testing::Test::HasFailure()) return;
  }
  for (How how : {How::kPdl, How::kGraph}) {
    run_case(gemv, Case{1, 1024, 16, 8, 128, 16, true, false, fp8, true}, test::case_seed(), how);
    run_case(gemv, Case{4, 576, 9, 3, 64, 16, false, false, fp8, true}, test::case_seed(), how);
  }
}

INSTANTIATE_TEST_SUITE_P(Cache, GemvRopeKv, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "e4m3" : "bf16"; });

// The rotation-pair epilogue (run_rmsnorm_rope_pairs) on the heads it covers (no q/k norms,
// rotated whole): the same shapes (SmolLM2's 9/3 of 64 on the K-split work split; Qwen3 and
// Llama-8B widths; GQA 1; a tiny model), rows 1-4, both RoPE styles, pages 1 and 16, pad rows
// and padding columns, a slot past the cache, and plain, PDL and graph launches.
class GemvRopePairs : public ::testing::TestWithParam<bool> {};  // the cache is e4m3

TEST_P(GemvRopePairs, EqualsRunRmsnormThenQkNormRopeStoreKv) {
  const bool fp8 = GetParam();
  k::Gemv gemv(0);
  struct Shape {
    int64_t hidden, heads, kv_heads, head_dim;
  };
  const std::vector<Shape> shapes = {{576, 9, 3, 64},    {1024, 16, 8, 128}, {1024, 8, 8, 128},
                                     {4096, 32, 8, 128}, {64, 4, 2, 32},     {768, 6, 2, 96}};
  std::vector<Case> cases;
  for (const Shape& s : shapes) {
    for (int64_t rows = 1; rows <= k::Gemv::kFusedPreferredRows; ++rows) {
      cases.push_back(Case{rows, s.hidden, s.heads, s.kv_heads, s.head_dim, rows == 2 ? 1 : 16,
                           false, rows % 2 == 1, fp8, rows > 1, rows == 4 ? 8 : 0});
    }
  }
  cases.push_back(Case{3, 576, 9, 3, 64, 16, false, false, fp8, true, 0, true});
  for (const Case& c : cases) {
    run_case(gemv, c, test::case_seed(), How::kPlain, Form::kPairs);
    if (::testing::Test::HasFailure()) return;
  }
  for (How how : {How::kPdl, How::kGraph}) {
    run_case(gemv, Case{1, 576, 9, 3, 64, 16, false, false, fp8, true}, test::case_seed(), how,
             Form::kPairs);
    run_case(gemv, Case{4, 1024, 16, 8, 128, 16, false, true, fp8, true}, test::case_seed(), how,
             Form::kPairs);
  }
}

INSTANTIATE_TEST_SUITE_P(Cache, GemvRopePairs, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "e4m3" : "bf16"; });

// Cases outside the epilogue: false, nothing launched (y keeps its poison), no fault.
TEST(GemvRopeKvDeclines, LaunchesNothingWhereItDoesNotApply) {
  k::Gemv gemv(0);
  const std::vector<Case> declined = {
      Case{5, 1024, 16, 8, 128, 16, true, false, false, true},   // rows > kFusedPreferredRows
      Case{1, 1024, 8, 4, 256, 16, true, false, false, true},    // a head of 16 tiles
  };
  // The pairs: q/k norms, partial rotary, too many rows.
  const std::vector<Case> declined_pairs = {
      Case{1, 576, 9, 3, 64, 16, true, false, false, true},
      Case{2, 1024, 16, 8, 128, 16, false, false, false, true, 0, false, 64},
      Case{5, 576, 9, 3, 64, 16, false, false, false, true},
  };
  for (Form form : {Form::kClusters, Form::kPairs}) {
    for (const Case& c : form == Form::kPairs ? declined_pairs : declined) {
      SCOPED_TRACE(describe(c) + (form == Form::kPairs ? " pairs" : ""));
      const Inputs in = make_inputs(c, test::case_seed());
      PathState r = stage(c, in);
      EXPECT_FALSE(run_fused(gemv, c, in, r, How::kPlain, form));
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_EQ(count_diff(download<uint16_t>(r.y), in.y_poison), 0) << "y was written";
      EXPECT_EQ(count_diff(download<uint8_t>(r.cache), in.cache), 0) << "a cache was written";
      EXPECT_EQ(read_device_faults(Device::cuda(0), true), 0u);
    }
  }
}

TEST(GemvRopeKvArgs, BadArgumentsAreRefused) {
  k::Gemv gemv(0);
  const Case c{1, 1024, 16, 8, 128, 16, true, false, false, false};
  const Inputs in = make_inputs(c, 11);
  PathState r = stage(c, in);
  auto call = [&](const k::QkNormRope& rope, const k::KVWrite& kv, int64_t n) {
    return gemv.run_rmsnorm_rope_kv(r.nin, c.rows, c.hidden, r.w.data(), n, r.y.data(), in.ldy,
                                    rope, kv, nullptr);
  };
  k::QkNormRope rope = r.rope;
  rope.qkv = r.x2.data();  // not the GEMV's output
  EXPECT_THROW(call(rope, r.kv, in.n), Error);
  rope = r.rope;
  rope.tokens = 2;
  EXPECT_THROW(call(rope, r.kv, in.n), Error);
  EXPECT_THROW(call(r.rope, r.kv, in.n - 128), Error);  // n is not the heads' width
  k::KVWrite kv = r.kv;
  kv.slot_mapping = r.slots.view().slice0(0, 0);  // fewer slots than rows
  EXPECT_THROW(call(r.rope, kv, in.n), Error);
  rope = r.rope;
  rope.head_dim = 512;
  EXPECT_THROW(call(rope, r.kv, in.n), Error);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(count_diff(download<uint16_t>(r.y), in.y_poison), 0) << "a refused call wrote y";
  EXPECT_EQ(read_device_faults(Device::cuda(0), true), 0u);
}

#endif  // KVATTN_WITH_CUDA

}  // namespace
}  // namespace kvattn

KVATTN_GPU_TEST_MAIN()
