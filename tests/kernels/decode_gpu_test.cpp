// decode_attention on the GPU against the float64 reference and the CPU backend, on random
// paged caches (non-identity block tables, NaN in every slot no sequence owns, block strides
// wider than a block), with poisoned outputs, across page sizes, GQA groups, head dims,
// dtypes, q_len > 1, empty sequences, split plans and non-contiguous q/out. Also: bad block
// ids and lengths are caught by the fault word without touching memory out of bounds, and a
// CUDA-graph capture of one decode replays to the same result.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "kvattn/core/fp8.h"
#include "kvattn/kernels/decode_attention.h"
#include "kvattn/kernels/device_faults.h"
#include "kernels/cuda/decode/decode_host.h"
#include "kernels/cuda/device_props.h"
#include "kernels/cuda/tuning.h"
#include "kernels/gpu_test_support.h"
#include "support/case_util.h"
#include "support/paged_case.h"
#include "support/reference.h"
#include "support/test_util.h"

namespace kvattn {
namespace {

using test::Mirror;
using test::pick;
using test::uniform_int;

const Device kGpu = Device::cuda(0);

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

struct DecodeCase {
  DType dt = DType::kBF16;
  int64_t d = 128, bs = 16, hkv = 2, group = 4, q_len = 1;
  std::vector<int64_t> lens;
  bool causal = true;
  // 0: library plan; 1: plan_decode for the capacity + own workspace; 2: forced splits;
  // 3: plan_decode for the batch's longest length (the small kernel's guess is right for it);
  // 4: plan_decode for half that (an understated bound: every guess wrong, still correct);
  // 5: plan_decode for the longest length with uniform_lengths (a promise that ragged lengths
  // break: still correct).
  int plan_mode = 0;
  int forced_splits = 1;
  bool aligned_cache = true;  // 16-byte aligned layout (fast path) or the generator's layout
  int64_t q_pad = 0, out_pad = 0;
  bool with_lse = true;
  float q_range = 1.0f;
  float scale = 0.0f;
  // float8_e4m3 caches: the 16-bit caches quantised with per-KV-head scales (0: none given,
  // i.e. 1.0; else random in [fp8_scale / 8, fp8_scale]).
  bool fp8 = false;
  float fp8_scale = 0.0f;
  // Issue 18's options (the extended kernels): window_size, softcap, ALiBi (0: none, 1:
  // [num_heads], 2: [num_seqs, num_heads]); poison_left >= 0: the block-table entries of the
  // pages entirely before key len - q_len - poison_left of each sequence hold bad ids on the
  // GPU (the CPU and the references see the good table).
  int64_t window_left = -1, window_right = -1;
  float softcap = 0.0f;
  int alibi = 0;
  int64_t poison_left = -1;
  // cache_leftpad (empty: none): sequence b's keys start at cache position leftpad[b].
  // poison_pad: the block-table entries of the pages entirely before each pad hold bad ids on
  // the GPU. bad_pad >= 0: the GPU sees cache_leftpad[bad_pad] = len + 7 (out of range; the
  // kernel clamps it to len and records kFaultLeftpadOutOfRange), the CPU and the references
  // the clamped value.
  std::vector<int64_t> leftpad;
  bool poison_pad = false;
  int bad_pad = -1;

  std::string describe() const {
    std::ostringstream os;
    os << dt << " d " << d << " bs " << bs << " hkv " << hkv << " group " << group << " q_len "
       << q_len << (causal ? " causal" : " non-causal") << " plan " << plan_mode << "/"
       << forced_splits << (aligned_cache ? " aligned" : " unaligned") << " q_pad " << q_pad
       << " out_pad " << out_pad << " q_range " << q_range;
    if (fp8) os << " fp8 scale<=" << fp8_scale;
    if (window_left >= 0 || window_right >= 0) os << " window (" << window_left << ", " << window_right << ")";
    if (softcap > 0) os << " softcap " << softcap;
    if (alibi) os << (alibi == 1 ? " alibi [H]" : " alibi [B, H]");
    if (poison_left >= 0) os << " poison before " << poison_left;
    if (!leftpad.empty()) {
      os << " leftpad [";
      for (size_t i = 0; i < leftpad.size() && i < 12; ++i) os << (i ? " " : "") << leftpad[i];
      os << "]" << (poison_pad ? " poisoned" : "");
      if (bad_pad >= 0) os << " bad pad at " << bad_pad;
    }
    os << " lens [";
    for (size_t i = 0; i < lens.size() && i < 12; ++i) os << (i ? " " : "") << lens[i];
    if (lens.size() > 12) os << " ... (" << lens.size() << ")";
    os << "]";
    return os.str();
  }
};

// The generator's caches moved into a 16-byte aligned layout (same block ids and contents).
struct Relaid {
  Tensor storage;
  TensorView k, v;
};
Relaid relayout_aligned(std::mt19937_64& rng, const test::PagedKv& kv) {
  const TensorView& k = kv.k_cache;
  const int64_t es = dtype_size(k.dtype);
  const int64_t nb = k.size(0), block = k.size(1) * k.size(2) * k.size(3);
  const int64_t pad = pick(rng, std::vector<int64_t>{0, 0, 8, 64});
  const bool fused = uniform_int(rng, 0, 1) == 1;
  const int64_t guard = 64;
  const int64_t stride = (fused ? 2 * block : block) + pad;
  // Separate K and V storage may pad V's blocks differently: K and V block strides differ
  // (the kernels' copy issue has a form for each case).
  const int64_t v_stride = fused ? stride : block + pick(rng, std::vector<int64_t>{pad, pad, 24});
  const int64_t region = 2 * guard + nb * stride;
  const int64_t v_region = 2 * guard + nb * v_stride;
  Relaid r;
  r.storage = Tensor::empty({(fused ? region : region + v_region) * es}, DType::kU8);
  std::memset(r.storage.data(), 0xFF, static_cast<size_t>(r.storage.nbytes()));
  char* base = static_cast<char*>(r.storage.data());
  char* kb = base + guard * es;
  char* vb = fused ? kb + block * es : base + (region + guard) * es;
  for (int64_t b = 0; b < nb; ++b) {
    std::memcpy(kb + b * stride * es, static_cast<const char*>(k.data) + b * k.stride(0) * es,
                static_cast<size_t>(block * es));
    std::memcpy(vb + b * v_stride * es,
                static_cast<const char*>(kv.v_cache.data) + b * kv.v_cache.stride(0) * es,
                static_cast<size_t>(block * es));
  }
  const std::vector<int64_t> shape = {nb, k.size(1), k.size(2), k.size(3)};
  const std::vector<int64_t> strides = {stride, k.size(2) * k.size(3), k.size(3), 1};
  std::vector<int64_t> v_strides = strides;
  v_strides[0] = v_stride;
  r.k = TensorView(kb, k.dtype, Device::cpu(), shape, strides);
  r.v = TensorView(vb, k.dtype, Device::cpu(), shape, v_strides);
  return r;
}

// The float8_e4m3 form of a 16-bit paged case: the same blocks, quantised with a scale per KV
// head (store_kv's rule, core/fp8.h), in fresh storage laid out [num_blocks, block_size,
// Hkv, D] with `pad` bytes after each block (the block stride) and the caches starting
// `offset` bytes into it (1: not 16-byte aligned, the kernel's byte-load path); plus float32
// caches holding exactly what the kernel reads, e4m3(code) * scale.
struct Fp8Caches {
  Tensor storage, k_scale, v_scale;  // scales undefined when none are given
  TensorView k, v;
  Tensor k_ref, v_ref;  // float32, contiguous
};
Fp8Caches quantise_caches(std::mt19937_64& rng, const TensorView& k16, const TensorView& v16,
                          float max_scale, bool aligned) {
  const int64_t nb = k16.size(0), bs = k16.size(1), hkv = k16.size(2), d = k16.size(3);
  const int64_t block = bs * hkv * d;
  const int64_t pad = aligned ? pick(rng, std::vector<int64_t>{0, 16, 64}) : 3;
  const int64_t stride = block + pad, offset = aligned ? 0 : 1;
  Fp8Caches c;
  c.storage = Tensor::empty({offset + 2 * nb * stride}, DType::kU8);
  std::memset(c.storage.data(), 0x7f, static_cast<size_t>(c.storage.nbytes()));  // NaN codes
  uint8_t* base = c.storage.ptr<uint8_t>() + offset;
  const std::vector<int64_t> shape = {nb, bs, hkv, d};
  const std::vector<int64_t> strides = {stride, hkv * d, d, 1};
  c.k = TensorView(base, DType::kF8E4M3, Device::cpu(), shape, strides);
  c.v = TensorView(base + nb * stride, DType::kF8E4M3, Device::cpu(), shape, strides);
  std::vector<float> ks(static_cast<size_t>(hkv), 1.0f), vs(static_cast<size_t>(hkv), 1.0f);
  if (max_scale > 0) {
    std::uniform_real_distribution<float> u(max_scale / 8, max_scale);
    for (auto& x : ks) x = u(rng);
    for (auto& x : vs) x = u(rng);
    c.k_scale = Tensor::empty({hkv}, DType::kF32);
    c.v_scale = Tensor::empty({hkv}, DType::kF32);
    std::copy(ks.begin(), ks.end(), c.k_scale.ptr<float>());
    std::copy(vs.begin(), vs.end(), c.v_scale.ptr<float>());
  }
  c.k_ref = Tensor::empty(shape, DType::kF32);
  c.v_ref = Tensor::empty(shape, DType::kF32);
  const std::vector<double> k64 = test::to_doubles(k16), v64 = test::to_doubles(v16);
  for (int64_t i = 0; i < nb * block; ++i) {
    const int64_t b = i / block, h = (i / d) % hkv;
    const uint8_t kc = quantize_e4m3(static_cast<float>(k64[static_cast<size_t>(i)]), ks[h]);
    const uint8_t vc = quantize_e4m3(static_cast<float>(v64[static_cast<size_t>(i)]), vs[h]);
    base[b * stride + i % block] = kc;
    base[nb * stride + b * stride + i % block] = vc;
    c.k_ref.ptr<float>()[i] = e4m3_to_float(kc) * ks[h];
    c.v_ref.ptr<float>()[i] = e4m3_to_float(vc) * vs[h];
  }
  return c;
}

struct Outcome {
  test::ErrorStats vs_ref, vs_cpu;
  test::ErrorStats fp8_vs_16bit;  // fp8 cases: against the reference on the 16-bit caches
  test::LseStats lse;
  bool untouched = true;
  uint32_t faults = 0;
};

// Runs one case: the float64 reference, the CPU backend and the GPU on the same inputs.
Outcome run_case(const DecodeCase& dc, std::mt19937_64& rng) {
  Outcome res;
  const int64_t B = static_cast<int64_t>(dc.lens.size());
  const int64_t H = dc.hkv * dc.group;
  const int64_t rows = B * dc.q_len;
  test::PagedKv kv = test::make_paged_kv(rng, dc.dt, dc.hkv, dc.d, dc.bs, dc.lens,
                                         pick(rng, std::vector<float>{-1.0f, 0.5f}), 1.5f);
  Relaid relaid;
  TensorView k_host = kv.k_cache, v_host = kv.v_cache;
  const Tensor* cache_storage = &kv.storage;
  if (dc.aligned_cache) {
    relaid = relayout_aligned(rng, kv);
    k_host = relaid.k;
    v_host = relaid.v;
    cache_storage = &relaid.storage;
  }
  test::RowBuffer qb = test::make_rows(rows, H, dc.d, dc.dt, dc.q_pad, dc.q_pad ? 3 : 0);
  test::fill_uniform(qb.view, rng, -dc.q_range, dc.q_range);
  Tensor lens_t = test::int_tensor(dc.lens);
  const double scale = dc.scale > 0 ? dc.scale : 1.0 / std::sqrt(static_cast<double>(dc.d));
  test::RefMask mask;
  mask.window_left = dc.window_left;
  mask.window_right = dc.window_right;
  mask.softcap = dc.softcap;
  Tensor slopes;
  if (dc.alibi) {
    // Slopes of real models (2^-k) and larger ones, some zero; per sequence when alibi == 2.
    slopes = Tensor::empty(dc.alibi == 1 ? std::vector<int64_t>{H} : std::vector<int64_t>{B, H},
                           DType::kF32);
    for (int64_t x = 0; x < slopes.numel(); ++x) {
      const float v = pick(rng, std::vector<float>{0.0f, 0.0625f, 0.25f, 0.5f, 0.01f, 1.0f / 256});
      slopes.ptr<float>()[x] = v;
      mask.alibi.push_back(v);
    }
    mask.alibi_per_seq = dc.alibi == 2;
  }

  Fp8Caches f8;
  std::vector<double> ref16;
  if (dc.fp8) {
    f8 = quantise_caches(rng, k_host, v_host, dc.fp8_scale, dc.aligned_cache);
    ref16 = test::decode_reference(qb.view, k_host, v_host, kv.block_table, lens_t, dc.q_len,
                                   scale, dc.causal, mask, dc.leftpad).out;
    k_host = f8.k;
    v_host = f8.v;
    cache_storage = &f8.storage;
  }
  const test::RefAttention ref =
      dc.fp8 ? test::decode_reference(qb.view, f8.k_ref, f8.v_ref, kv.block_table, lens_t,
                                      dc.q_len, scale, dc.causal, mask, dc.leftpad)
             : test::decode_reference(qb.view, k_host, v_host, kv.block_table, lens_t, dc.q_len,
                                      scale, dc.causal, mask, dc.leftpad);
  Tensor pad_t;
  if (!dc.leftpad.empty()) pad_t = test::int_tensor(dc.leftpad);

  // The CPU backend on the same inputs.
  test::RowBuffer cpu_out = test::make_rows(rows, H, dc.d, dc.dt, 0);
  {
    DecodeArgs a;
    a.q = qb.view;
    a.k_cache = k_host;
    a.v_cache = v_host;
    a.block_table = kv.block_table;
    a.cache_seqlens = lens_t;
    a.q_len = dc.q_len;
    a.softmax_scale = dc.scale;
    a.causal = dc.causal;
    a.out = cpu_out.view;
    a.k_scale = f8.k_scale;
    a.v_scale = f8.v_scale;
    a.window_left = dc.window_left;
    a.window_right = dc.window_right;
    a.softcap = dc.softcap;
    a.alibi_slopes = slopes;
    a.cache_leftpad = pad_t;
    decode_attention(a);
  }
  if (dc.poison_left >= 0) {  // bad ids where no window row may look (GPU only)
    const TensorView& bt = kv.block_table;
    for (int64_t b = 0; b < B; ++b) {
      const int64_t first = std::max<int64_t>(0, dc.lens[b] - dc.q_len - dc.poison_left);
      int32_t* row = bt.ptr<int32_t>() + b * bt.stride(0);
      for (int64_t pg = 0; (pg + 1) * dc.bs <= first; ++pg) row[pg] = pg % 2 ? -3 : (1 << 28);
    }
  }
  if (dc.poison_pad) {  // bad ids in the pages before each pad (GPU only)
    const TensorView& bt = kv.block_table;
    for (int64_t b = 0; b < B; ++b) {
      int32_t* row = bt.ptr<int32_t>() + b * bt.stride(0);
      for (int64_t pg = 0; (pg + 1) * dc.bs <= dc.leftpad[b]; ++pg) row[pg] = pg % 2 ? -5 : (1 << 29);
    }
  }

  // The GPU run.
  const Mirror caches = Mirror::of(*cache_storage);
  const Mirror table = Mirror::of(kv.table_storage);
  const Mirror q = Mirror::of(qb.storage);
  test::RowBuffer ob = test::make_rows(rows, H, dc.d, dc.dt, dc.out_pad, dc.out_pad ? 1 : 0);
  const Mirror out = Mirror::of(ob.storage);
  Tensor lse_host = Tensor::empty({H, std::max<int64_t>(rows, 1)}, DType::kF32);
  std::memset(lse_host.data(), 0xFF, static_cast<size_t>(lse_host.nbytes()));
  const TensorView lse_view(lse_host.data(), DType::kF32, Device::cpu(), {H, rows});
  const Mirror lse = Mirror::of(lse_host);
  const Tensor lens_dev = lens_t.to(kGpu);
  Tensor k_scale_dev, v_scale_dev;
  if (f8.k_scale.defined()) {
    k_scale_dev = f8.k_scale.to(kGpu);
    v_scale_dev = f8.v_scale.to(kGpu);
  }

  DecodeArgs a;
  a.k_scale = k_scale_dev;
  a.v_scale = v_scale_dev;
  a.q = q.on_device(qb.view);
  a.k_cache = caches.on_device(k_host);
  a.v_cache = caches.on_device(v_host);
  a.block_table = table.on_device(kv.block_table);
  a.cache_seqlens = lens_dev;
  a.q_len = dc.q_len;
  a.softmax_scale = dc.scale;
  a.causal = dc.causal;
  a.out = out.on_device(ob.view);
  if (dc.with_lse) a.lse = lse.on_device(lse_view);
  a.window_left = dc.window_left;
  a.window_right = dc.window_right;
  a.softcap = dc.softcap;
  Tensor slopes_dev;
  if (dc.alibi) {
    slopes_dev = slopes.to(kGpu);
    a.alibi_slopes = slopes_dev;
  }
  Tensor pad_dev;
  if (pad_t.defined()) {
    Tensor gpu_pad = test::int_tensor(dc.leftpad);
    if (dc.bad_pad >= 0) gpu_pad.ptr<int32_t>()[dc.bad_pad] = static_cast<int32_t>(dc.lens[dc.bad_pad] + 7);
    pad_dev = gpu_pad.to(kGpu);
    a.cache_leftpad = pad_dev;
  }
  Tensor workspace;
  if (dc.plan_mode == 1 || dc.plan_mode == 3 || dc.plan_mode == 4 || dc.plan_mode == 5) {
    const int64_t longest = *std::max_element(dc.lens.begin(), dc.lens.end());
    const int64_t bound = dc.plan_mode == 1 ? kv.block_table.size(1) * dc.bs
                          : dc.plan_mode == 4 ? longest / 2 + 1
                                              : longest;
    a.plan = plan_decode(B, H, dc.hkv, dc.d, dc.q_len, bound, kGpu, dc.plan_mode == 5);
  } else if (dc.plan_mode == 2) {
    // DecodePlan's contract for a hand-made plan: rows of the kernels' tile dim.
    const int64_t tile_dim = dc.d == 80 || dc.d == 96 ? 128 : dc.d;
    const int64_t bytes = static_cast<int64_t>(dc.forced_splits) * B * H * dc.q_len * (tile_dim + 1) * 4;
    a.plan = DecodePlan{dc.forced_splits, dc.forced_splits > 1 ? bytes : 0};
  }
  if (a.plan.workspace_bytes > 0) {
    workspace = Tensor::empty({a.plan.workspace_bytes}, DType::kU8, kGpu);
    EXPECT_EQ(cudaMemset(workspace.data(), 0xFF, static_cast<size_t>(workspace.nbytes())),
              cudaSuccess);  // NaN: a merge that reads an unwritten split shows it
    a.workspace = workspace;
  }
  EXPECT_EQ(read_device_faults(kGpu), 0u) << "fault word not clean before the case";
  decode_attention(a);
  res.faults = read_device_faults(kGpu);

  const Tensor out_back = out.download();
  const TensorView got = out.in(out_back, ob.view);
  const auto got_d = test::to_doubles(got);
  res.vs_ref = test::compare(got_d, ref.out);
  res.vs_cpu = test::compare(got_d, test::to_doubles(cpu_out.view));
  if (dc.fp8) res.fp8_vs_16bit = test::compare(got_d, ref16);
  res.untouched = test::untouched_outside(out_back, got);
  if (dc.with_lse) {
    const Tensor lse_back = lse.download();
    res.lse = test::compare_lse(test::to_doubles(lse.in(lse_back, lse_view)), ref.lse);
  }
  return res;
}

void check(const DecodeCase& dc, const Outcome& r) {
  const double tol = 1e-2;
  EXPECT_FALSE(r.vs_ref.has_nan) << "NaN in the output (or in the reference)";
  EXPECT_LT(r.vs_ref.rel_l2, tol) << "vs float64 reference, max abs " << r.vs_ref.max_abs;
  EXPECT_LT(r.vs_cpu.rel_l2, tol) << "vs CPU backend, max abs " << r.vs_cpu.max_abs;
  EXPECT_TRUE(r.untouched) << "bytes of the out buffer outside the view changed";
  EXPECT_EQ(r.faults, dc.bad_pad >= 0 ? static_cast<uint32_t>(kFaultLeftpadOutOfRange) : 0u);
  if (dc.with_lse) {
    EXPECT_TRUE(r.lse.ok) << "LSE NaN or -inf mismatch";
    EXPECT_LT(r.lse.max_abs, 2e-3) << "LSE max abs error";
  }
  std::ostringstream key;
  key << "decode gpu " << dc.dt << (dc.fp8 ? " fp8 cache" : "") << " d" << dc.d;
  test::record_error(key.str(), r.vs_ref, dc.with_lse ? r.lse.max_abs : -1.0);
  if (dc.fp8) {  // what fp8 costs end to end (printed, not asserted: it depends on the data)
    test::record_error(key.str() + ", vs the 16-bit cache's reference", r.fp8_vs_16bit);
  }
}

std::vector<int64_t> random_lens(std::mt19937_64& rng, int64_t n, int64_t max_len, bool zeros) {
  std::vector<int64_t> lens(static_cast<size_t>(n));
  for (auto& l : lens) {
    l = pick(rng, std::vector<int64_t>{1, 54, 97, std::min<int64_t>(1000, max_len),
                                       uniform_int(rng, 1, max_len)});
    if (zeros && uniform_int(rng, 0, 9) == 0) l = 0;
    l = std::min(l, max_len);
  }
  return lens;
}

void sweep(int cases, bool fp8 = false) {
  const bool quick = test::quick_mode();
  // 12 and 48: block sizes that are not powers of two (page_of's division; 12 splits tiles).
  const std::vector<int64_t> pages = {1, 16, 32, 64, 128, 256, 12, 48};
  for (int c = 0; c < cases; ++c) {
    if (!test::case_selected(c)) continue;
    const uint64_t seed = test::case_seed();
    std::mt19937_64 rng(seed);
    DecodeCase dc;
    dc.dt = c % 2 ? DType::kBF16 : DType::kF16;
    dc.d = (c / 2) % 2 ? 128 : 64;
    // 256 (the swapped tile); 80 and 96 (padded 128 tiles; fp8 caches too since session 32).
    if ((c / 2) % 3 == 2) dc.d = std::vector<int64_t>{256, 80, 96}[(c / 6) % 3];
    dc.bs = pages[(c / 4) % pages.size()];
    dc.group = std::vector<int64_t>{1, 2, 4, 8}[(c / 24) % 4];
    dc.hkv = pick(rng, std::vector<int64_t>{1, 2, 3});
    const int64_t B = pick(rng, std::vector<int64_t>{1, 3, 17});
    dc.lens = random_lens(rng, B, quick ? 200 : 1300, true);
    if (c % 4 == 1) {
      dc.q_len = pick(rng, std::vector<int64_t>{2, 3, 5});
      dc.causal = uniform_int(rng, 0, 5) != 0;
    }
    dc.plan_mode = c % 5;
    dc.forced_splits = static_cast<int>(pick(rng, std::vector<int64_t>{1, 2, 3, 7}));
    dc.aligned_cache = c % 5 != 4;
    dc.q_pad = pick(rng, std::vector<int64_t>{0, 0, 8, 3});
    dc.out_pad = pick(rng, std::vector<int64_t>{0, 0, 5});
    dc.with_lse = uniform_int(rng, 0, 1) == 1;
    dc.q_range = pick(rng, std::vector<float>{1.0f, 1.0f, 8.0f});
    dc.scale = uniform_int(rng, 0, 4) == 0 ? 0.3f : 0.0f;
    dc.fp8 = fp8;
    dc.fp8_scale = pick(rng, std::vector<float>{0.0f, 0.01f, 0.2f});
    SCOPED_TRACE(test::case_note(c, seed, dc.describe()));
    check(dc, run_case(dc, rng));
  }
}

TEST(DecodeGpu, SweepAgainstReferenceAndCpu) { sweep(test::quick_mode() ? 12 : 96); }

// float8_e4m3 caches: the same sweep (page sizes, GQA, head dims, q_len > 1, plans, unaligned
// caches) over quantised caches, with and without scales.
TEST(DecodeGpu, Fp8CacheSweepAgainstReferenceOnStoredBytes) {
  sweep(test::quick_mode() ? 12 : 96, /*fp8=*/true);
}

// Every finite e4m3 code reads exactly (subnormals and +-448 included): one key per sequence,
// so the output is that key's V row (softmax of one score is 1), and a one-hot query on dim b
// makes sequence b's LSE the K code at dim b times the scale (1). 256 codes over the KV heads;
// the two NaN codes are replaced by zeros of the same sign. (head_dim 256: one KV head, the
// swapped tile.)
void fp8_codes_read_exactly() {
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (int64_t d : {64, 128, 256}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " d " + std::to_string(d));
      const int64_t hkv = 256 / d, B = d, bs = 16;
      Tensor caches = Tensor::empty({2 * bs * hkv * d}, DType::kU8);
      std::memset(caches.data(), 0x7f, static_cast<size_t>(caches.nbytes()));
      auto code = [&](int64_t h, int64_t e) {
        const auto c = static_cast<uint8_t>(h * d + e);
        return (c & 0x7f) == 0x7f ? static_cast<uint8_t>(c & 0x80) : c;
      };
      for (int64_t h = 0; h < hkv; ++h) {
        for (int64_t e = 0; e < d; ++e) {
          caches.ptr<uint8_t>()[h * d + e] = code(h, e);                            // K, slot 0
          caches.ptr<uint8_t>()[bs * hkv * d + h * d + e] = code(h, d - 1 - e);     // V, slot 0
        }
      }
      Tensor q = Tensor::empty({B, hkv, d}, dt);
      const uint16_t one = dt == DType::kBF16 ? 0x3f80 : 0x3c00;
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t h = 0; h < hkv; ++h) {
          for (int64_t e = 0; e < d; ++e) q.ptr<uint16_t>()[(b * hkv + h) * d + e] = e == b ? one : 0;
        }
      }
      const Tensor caches_dev = caches.to(kGpu), q_dev = q.to(kGpu);
      const std::vector<int64_t> shape = {1, bs, hkv, d};
      DecodeArgs a;
      a.q = q_dev;
      a.k_cache = TensorView(caches_dev.data(), DType::kF8E4M3, kGpu, shape);
      a.v_cache = TensorView(caches_dev.ptr<uint8_t>() + bs * hkv * d, DType::kF8E4M3, kGpu, shape);
      const Tensor table = test::int_tensor(std::vector<int64_t>(static_cast<size_t>(B), 0)).to(kGpu);
      const Tensor lens = test::int_tensor(std::vector<int64_t>(static_cast<size_t>(B), 1)).to(kGpu);
      a.block_table = TensorView(table.data(), DType::kI32, kGpu, {B, 1});
      a.cache_seqlens = lens;
      a.softmax_scale = 1.0f;
      Tensor out = Tensor::empty({B, hkv, d}, dt, kGpu);
      Tensor lse = Tensor::empty({hkv, B}, DType::kF32, kGpu);
      a.out = out;
      a.lse = lse;
      decode_attention(a);
      EXPECT_EQ(read_device_faults(kGpu), 0u);
      const std::vector<double> got = test::to_doubles(out.to(Device::cpu()).view());
      const std::vector<double> got_lse = test::to_doubles(lse.to(Device::cpu()).view());
      int wrong = 0, wrong_lse = 0;
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t h = 0; h < hkv; ++h) {
          for (int64_t e = 0; e < d; ++e) {
            const double want = e4m3_to_float(code(h, d - 1 - e));
            const double x = got[static_cast<size_t>((b * hkv + h) * d + e)];
            if (x != want && wrong++ < 5) ADD_FAILURE() << "V code " << int(code(h, d - 1 - e)) << " read as " << x << ", want " << want;
          }
          const double want = e4m3_to_float(code(h, b));
          const double x = got_lse[static_cast<size_t>(h * B + b)];
          if (!(std::abs(x - want) <= 1e-6 * std::abs(want)) && wrong_lse++ < 5) {
            ADD_FAILURE() << "K code " << int(code(h, b)) << ": LSE " << x << ", want " << want;
          }
        }
      }
      EXPECT_EQ(wrong, 0);
      EXPECT_EQ(wrong_lse, 0);
    }
  }
}

TEST(DecodeGpu, Fp8CodesReadExactly) { fp8_codes_read_exactly(); }

// The kernel variants of cuda_tuning() (heads per CTA, stages, small-batch kernel on/off and
// its warps per CTA, interleaved and forced chunk counts, the swapped tile on/off). swap 1
// also puts fp8 caches on the swapped fp8 tile (head_dim 64/128, units of <= 8 rows;
// decode_use_swap), which is not their default, so the fp8 sweeps below cover both fp8 tiles:
// "swap nosmall" and "swap h4 s2" the swapped one, "noswap nosmall" and the rest the 16-row
// one.
struct Variant {
  const char* name;
  int heads, stages;
  int small = 1, small_warps = 0;  // 0: the library's choice
  int evict_first = -1;            // K/V copies evict-first in L2 (-1: the library's default)
  int swap = -1;                   // the swapped tile (-1: the library's default)
  int interleave = -1;             // small kernel's interleaved chunks (-1: the default)
  int hw_cvt = -1;                 // fp8: the hardware e4m3 conversion (-1: the default)
  int q_f16 = -1;                  // fp8, bf16 queries: Q in f16, K by the hardware conversion
  int small_chunks = 0;            // the small kernel with this many chunks for every batch
  int min_tiles = -1;              // small kernel: chunks unused below this many tiles a warp
  int d64_max_mb = -1;             // small kernel at d64: K/V MiB bound (0: none; -1: default)
  int min_chunks = 0;              // small kernel: fewest chunks a unit (0: the default)
  int one_wave = -1;               // small kernel: one CTA a unit in one wave (-1: default)
  int lean_issue = -1;             // aligned caches: issue_tile_lean (-1: the default)
  int tma = -1;                    // the TMA copy issue where eligible (-1: the default)
  int tma_prefetch = -1;           // ... asking L2 for each next tile (-1: the default)
  int cta_sweep = -1;              // split kernel, fp8 d64: the CTA page sweep (-1: default)
  int stream_waves = 0;            // stream mode's waves of ranges (0: the default)
  int dynamic_split = -1;          // stream mode's dynamic split (-1: the default)
  int merge_pdl = -1;              // stream mode: the merge kernel launched by PDL (-1: default)
};
const Variant kVariants[] = {
    {.name = "s2", .heads = 8, .stages = 2},
    {.name = "h4", .heads = 4, .stages = 0},
    {.name = "h4 s2", .heads = 4, .stages = 2},
    {.name = "h2 s2", .heads = 2, .stages = 2},
    {.name = "nosmall", .heads = 8, .stages = 0, .small = 0},
    {.name = "small w4 s2", .heads = 8, .stages = 2, .small_warps = 4},
    {.name = "evict-first", .heads = 8, .stages = 0, .evict_first = 1},
    {.name = "evict-normal nosmall", .heads = 8, .stages = 0, .small = 0, .evict_first = 0},
    {.name = "swap nosmall", .heads = 8, .stages = 0, .small = 0, .swap = 1},
    {.name = "swap h4 s2", .heads = 4, .stages = 2, .swap = 1},
    {.name = "noswap nosmall", .heads = 8, .stages = 0, .small = 0, .swap = 0},
    {.name = "small interleaved", .heads = 8, .stages = 0, .interleave = 1},
    {.name = "small interleaved w4 s2", .heads = 8, .stages = 2, .small_warps = 4, .interleave = 1},
    {.name = "fp8 integer cvt", .heads = 8, .stages = 0, .hw_cvt = 0},
    {.name = "fp8 integer cvt swap nosmall", .heads = 8, .stages = 0, .small = 0, .swap = 1, .hw_cvt = 0},
    {.name = "fp8 integer cvt noswap nosmall", .heads = 8, .stages = 0, .small = 0, .swap = 0, .hw_cvt = 0},
    {.name = "fp8 q bf16", .heads = 8, .stages = 0, .q_f16 = 0},
    {.name = "fp8 q bf16 swap nosmall", .heads = 8, .stages = 0, .small = 0, .swap = 1, .q_f16 = 0},
    {.name = "fp8 q bf16 noswap nosmall", .heads = 8, .stages = 0, .small = 0, .swap = 0, .q_f16 = 0},
    {.name = "small c1", .heads = 8, .stages = 0, .small_chunks = 1},
    {.name = "small c2 w4 s2", .heads = 8, .stages = 2, .small_warps = 4, .small_chunks = 2},
    {.name = "small min tiles 0", .heads = 8, .stages = 0, .min_tiles = 0},
    {.name = "small min tiles 4 w4", .heads = 8, .stages = 0, .small_warps = 4, .min_tiles = 4},
    {.name = "small d64 bound 1 MiB", .heads = 8, .stages = 0, .d64_max_mb = 1},
    {.name = "small min chunks 1", .heads = 8, .stages = 0, .min_chunks = 1},
    {.name = "small one wave", .heads = 8, .stages = 0, .one_wave = 1},
    // (cta_sweep 0: at fp8 d64 the CTA page sweep, on by default, would take these launches.)
    {.name = "copy issue", .heads = 8, .stages = 0, .lean_issue = 0, .tma = 0, .cta_sweep = 0},
    {.name = "copy issue swap nosmall", .heads = 8, .stages = 0, .small = 0, .swap = 1,
     .lean_issue = 0, .tma = 0, .cta_sweep = 0},
    {.name = "lean issue", .heads = 8, .stages = 0, .lean_issue = 1, .tma = 0, .cta_sweep = 0},
    {.name = "lean issue swap nosmall", .heads = 8, .stages = 0, .small = 0, .swap = 1,
     .lean_issue = 1, .tma = 0, .cta_sweep = 0},
    {.name = "lean issue noswap nosmall h4 s2", .heads = 4, .stages = 2, .small = 0, .swap = 0,
     .lean_issue = 1, .tma = 0, .cta_sweep = 0},
    {.name = "tma", .heads = 8, .stages = 0, .tma = 1},
    {.name = "tma swap nosmall", .heads = 8, .stages = 0, .small = 0, .swap = 1, .tma = 1},
    {.name = "tma prefetch", .heads = 8, .stages = 0, .tma = 1, .tma_prefetch = 1},
    // 3 stages everywhere (fp8 defaults to 6 and 8; the "s2" row keeps 16-bit d64 at 2 stages).
    {.name = "s3", .heads = 8, .stages = 3},
    // The merge kernel by a plain launch (decode_merge_pdl 0): it starts after the split kernel
    // and derives the pieces' slots from the lengths then, not while the split kernel runs.
    {.name = "merge plain launch nosmall", .heads = 8, .stages = 0, .small = 0, .merge_pdl = 0},
    // The split kernel's CTA page sweep (fp8 caches at head_dim 64), on both tiles.
    {.name = "cta sweep nosmall", .heads = 8, .stages = 0, .small = 0, .cta_sweep = 1},
    {.name = "cta sweep noswap nosmall h4 s2", .heads = 4, .stages = 2, .small = 0, .swap = 0,
     .cta_sweep = 1},
};

// The TMA copy issue (decode_tma.cuh) with the small kernel on and off: the edge tests of the
// extended kernels run them beside kVariants[0] and [4] (its first tile before a window's or
// pad's first key, its last tile past the length, over pages whose ids before them are bad).
const Variant kTmaSmallOn = {.name = "tma", .heads = 8, .stages = 0, .tma = 1};
const Variant kTmaSmallOff = {.name = "tma nosmall", .heads = 8, .stages = 0, .small = 0,
                              .tma = 1};

// Sets a variant for the scope, restores the previous tuning after.
class UseVariant {
 public:
  explicit UseVariant(const Variant& v) : saved_(cuda::cuda_tuning()) {
    cuda::CudaTuning& t = cuda::cuda_tuning();
    t.decode_heads_per_cta = v.heads;
    t.decode_stages = v.stages;
    t.decode_small = v.small;
    t.decode_small_warps = v.small_warps;
    if (v.evict_first >= 0) t.decode_kv_evict_first = v.evict_first;
    if (v.swap >= 0) t.decode_swap = v.swap;
    if (v.interleave >= 0) t.decode_small_interleave = v.interleave;
    if (v.hw_cvt >= 0) t.decode_fp8_hw_cvt = v.hw_cvt;
    if (v.q_f16 >= 0) t.decode_fp8_q_f16 = v.q_f16;
    t.decode_small_chunks = v.small_chunks;
    if (v.min_tiles >= 0) t.decode_small_min_tiles = v.min_tiles;
    if (v.d64_max_mb >= 0) t.decode_small_d64_max_mb = v.d64_max_mb;
    if (v.min_chunks > 0) t.decode_small_min_chunks = v.min_chunks;
    if (v.one_wave >= 0) t.decode_small_one_wave = v.one_wave;
    if (v.lean_issue >= 0) t.decode_lean_issue = v.lean_issue;
    if (v.tma >= 0) t.decode_tma = v.tma;
    if (v.tma_prefetch >= 0) t.decode_tma_prefetch = v.tma_prefetch;
    if (v.cta_sweep >= 0) t.decode_cta_sweep = v.cta_sweep;
    if (v.stream_waves > 0) t.decode_stream_waves = v.stream_waves;
    if (v.dynamic_split >= 0) t.decode_dynamic_split = v.dynamic_split;
    if (v.merge_pdl >= 0) t.decode_merge_pdl = v.merge_pdl;
  }
  ~UseVariant() { cuda::cuda_tuning() = saved_; }

 private:
  cuda::CudaTuning saved_;
};

// The 16-bit sweep (quick_cases in quick mode, else 16 cases) and the fp8 one (2, else 8) under
// each of `forms`.
template <size_t N>
void sweep_each(const Variant (&forms)[N], int quick_cases) {
  for (const Variant& v : forms) {
    SCOPED_TRACE(v.name);
    UseVariant use(v);
    sweep(test::quick_mode() ? quick_cases : 16);
    sweep(test::quick_mode() ? 2 : 8, /*fp8=*/true);
  }
}

// Every variant computes the same thing (the default is covered above).
TEST(DecodeGpuVariants, Sweep) { sweep_each(kVariants, 3); }

// Stream mode in waves of shorter ranges (decode_stream_waves): more ranges than resident CTAs,
// so more pieces a sequence for the merge kernel; on both tiles, two CTAs an SM, and with the
// engine's plan for the table's width (the sweep's plan modes).
TEST(DecodeGpu, StreamWaves) {
  const Variant forms[] = {
      {.name = "waves 3 nosmall", .heads = 8, .stages = 0, .small = 0, .stream_waves = 3},
      {.name = "waves 2 swap h4 s3 nosmall", .heads = 4, .stages = 3, .small = 0, .swap = 1,
       .stream_waves = 2},
      {.name = "waves 8 noswap nosmall h4 s2", .heads = 4, .stages = 2, .small = 0, .swap = 0,
       .stream_waves = 8}};
  sweep_each(forms, 4);
}

// The dynamic split (decode_dynamic_split, decode_stream_ranges.cuh): batches of enough tiles
// for its ranges (five a resident CTA of a slice, so a few thousand tiles), ragged, with empty,
// one-key and one-tile sequences, q_len > 1, plans for the table's width, the longest length
// and a workspace too small for the dynamic ranges (the static split then); each variant runs
// its cases over fresh workspaces of 0xFF bytes (the claim counters' garbage) and, as the
// cases follow each other, over the words the previous launch left.
void dynamic_cases(int cases, bool fp8) {
  const bool quick = test::quick_mode();
  for (int c = 0; c < cases; ++c) {
    if (!test::case_selected(c)) continue;
    const uint64_t seed = test::case_seed();
    std::mt19937_64 rng(seed);
    DecodeCase dc;
    dc.dt = c % 2 ? DType::kBF16 : DType::kF16;
    dc.d = std::vector<int64_t>{128, 64, 256, 96}[(c / 2) % 4];
    dc.bs = pick(rng, std::vector<int64_t>{16, 64, 12, 256});
    dc.hkv = pick(rng, std::vector<int64_t>{1, 2, 3, 8});
    dc.group = pick(rng, std::vector<int64_t>{1, 4, 8});
    const int64_t B = uniform_int(rng, quick ? 40 : 24, quick ? 90 : 260);
    dc.lens = random_lens(rng, B, quick ? 2600 : 6000, true);
    if (c % 4 == 1) {
      dc.q_len = pick(rng, std::vector<int64_t>{2, 3});
      dc.causal = uniform_int(rng, 0, 3) != 0;
    }
    dc.plan_mode = std::vector<int>{1, 3, 0, 2}[c % 4];
    dc.forced_splits = 3;  // plan_mode 2: fewer ranges than the dynamic split's
    dc.with_lse = c % 3 != 2;
    dc.fp8 = fp8;
    dc.fp8_scale = pick(rng, std::vector<float>{0.0f, 0.2f});
    SCOPED_TRACE(test::case_note(c, seed, dc.describe()));
    check(dc, run_case(dc, rng));
  }
}

// Launches that asked for the dynamic split since `before`: some where it is compiled in
// (KVATTN_DECODE_DYNAMIC_SPLIT_BUILD), none where it is not (the knob is then ignored, and the
// same cases must come out right on the static split).
void expect_dynamic_launches_since(int64_t before) {
  const int64_t launches = cuda::decode_host::dynamic_launches() - before;
  if (cuda::kDecodeDynamicSplitBuilt) {
    EXPECT_GT(launches, 0) << "no case took the dynamic split";
  } else {
    EXPECT_EQ(launches, 0) << "the dynamic split ran in a build without it";
  }
}

TEST(DecodeGpu, DynamicSplit) {
  const Variant forms[] = {
      {.name = "dynamic nosmall", .heads = 8, .stages = 0, .small = 0, .dynamic_split = 1},
      {.name = "dynamic swap h4 s3 nosmall", .heads = 4, .stages = 3, .small = 0, .swap = 1,
       .dynamic_split = 1},
      {.name = "dynamic noswap h4 s2 nosmall", .heads = 4, .stages = 2, .small = 0, .swap = 0,
       .dynamic_split = 1},
      {.name = "dynamic tma nosmall", .heads = 8, .stages = 0, .small = 0, .tma = 1,
       .dynamic_split = 1},
      {.name = "dynamic cta sweep nosmall", .heads = 8, .stages = 0, .small = 0, .cta_sweep = 1,
       .dynamic_split = 1}};
  const int64_t before = cuda::decode_host::dynamic_launches();
  for (const Variant& v : forms) {
    SCOPED_TRACE(v.name);
    UseVariant use(v);
    dynamic_cases(test::quick_mode() ? 4 : 8, false);
    dynamic_cases(test::quick_mode() ? 2 : 4, true);
  }
  expect_dynamic_launches_since(before);
}

// Moderate batches, where the planner's thresholds decide between the small and the stream
// kernel (units around one wave of the SMs; session 21's map): one CTA a unit in one wave
// (decode_small_one_wave, decode_small_min_chunks 1), the d64 bound on the small kernel, each
// against the references, over plans for the table's width (as an engine's graphs plan) and
// for the batch's longest length.
TEST(DecodeGpu, ModerateBatchesAcrossKernelChoices) {
  const bool quick = test::quick_mode();
  const Variant forms[] = {{.name = "rule", .heads = 8, .stages = 0},
                           {.name = "one wave", .heads = 8, .stages = 0, .one_wave = 1},
                           {.name = "min chunks 1", .heads = 8, .stages = 0, .min_chunks = 1},
                           {.name = "d64 bound 1 MiB", .heads = 8, .stages = 0, .d64_max_mb = 1}};
  for (const Variant& v : forms) {
    SCOPED_TRACE(v.name);
    UseVariant use(v);
    for (int c = 0; c < (quick ? 4 : 12); ++c) {
      if (!test::case_selected(c)) continue;
      const uint64_t seed = test::case_seed();
      std::mt19937_64 rng(seed);
      DecodeCase dc;
      dc.d = c % 2 ? 64 : 128;
      dc.dt = c % 3 ? DType::kBF16 : DType::kF16;
      dc.hkv = pick(rng, std::vector<int64_t>{3, 4, 8});
      dc.group = pick(rng, std::vector<int64_t>{1, 2, 3, 4});
      dc.bs = pick(rng, std::vector<int64_t>{16, 64});
      // 16 .. 48 sequences: 48 .. 384 units, around one wave at one chunk a unit
      const int64_t B = uniform_int(rng, 16, 48);
      dc.lens = random_lens(rng, B, quick ? 600 : 3000, true);
      dc.plan_mode = c % 4 < 2 ? 1 : 3;  // the table's width, or the longest length
      dc.with_lse = c % 3 != 2;
      SCOPED_TRACE(test::case_note(c, seed, dc.describe()));
      check(dc, run_case(dc, rng));
    }
  }
}

// The caller's promise of uniform lengths (DecodePlan::uniform_lengths): batches whose units fill
// a wave of 4-warp CTAs at >= 16 tiles a warp (decode_uniform_one_chunk) take one small-kernel
// CTA a (sequence, unit) without a merge; the promise kept (uniform lengths, around the tile
// and page edges) and broken (ragged lengths under the same plan), head_dim 128 where the rule
// applies and 64 where it must not, GQA 1-8, bf16 and fp16, against the references.
TEST(DecodeGpu, UniformLengthsPromise) {
  const bool quick = test::quick_mode();
  const int device = 0;
  for (int c = 0; c < (quick ? 6 : 16); ++c) {
    if (!test::case_selected(c)) continue;
    const uint64_t seed = test::case_seed();
    std::mt19937_64 rng(seed);
    DecodeCase dc;
    dc.d = c % 4 == 3 ? 64 : 128;
    dc.dt = c % 2 ? DType::kBF16 : DType::kF16;
    dc.hkv = pick(rng, std::vector<int64_t>{4, 8});
    dc.group = pick(rng, std::vector<int64_t>{1, 2, 3, 4, 8});
    dc.bs = pick(rng, std::vector<int64_t>{16, 64, 48});
    // Units past three 4-warp CTAs an SM (two fit at head_dim 128), >= 16 tiles a warp.
    const int64_t units = dc.hkv * ((dc.group + 15) / 16);
    const int64_t B = (int64_t{kvattn::cuda::sm_count(device)} * 3 + units - 1) / units +
                      uniform_int(rng, 0, 8);
    const int64_t L = pick(rng, std::vector<int64_t>{1024, 1025, 1039, 1040, 1500});
    dc.lens.assign(static_cast<size_t>(B), L);
    const bool broken = c % 3 == 2;
    if (broken) {  // ragged lengths under the uniform plan for L
      for (auto& l : dc.lens) l = uniform_int(rng, 0, L);
      dc.lens[0] = L;
    }
    dc.plan_mode = 5;
    dc.with_lse = c % 2 == 0;
    // The rule takes it where the tuning lets it (on by default; KVATTN_DECODE_UNIFORM_ONE_CHUNK=0
    // turns it off, and the cases then check the split kernel under the promise).
    if (!broken && dc.d == 128 && kvattn::cuda::cuda_tuning().decode_uniform_one_chunk != 0) {
      EXPECT_EQ(kvattn::cuda::decode_small_chunks(device, B, dc.hkv, dc.group, dc.d, L, true), 1)
          << "B " << B << " hkv " << dc.hkv << " group " << dc.group << " L " << L;
    }
    SCOPED_TRACE(test::case_note(c, seed, dc.describe()) + (broken ? " (promise broken)" : ""));
    check(dc, run_case(dc, rng));
  }
}

// The split kernel's CTA page sweep (decode_cta_sweep.cuh) over fp8 caches at head_dim 64, the
// form it exists for: KV head counts whose CTAs hold every head, some of them, or leave warps
// without a unit (5 heads at 4 a CTA: the launcher keeps the per-warp issue there), row chunks
// shared by several warps (group 8 x q_len 3 on the swapped tile's 8-row units), pages that
// split tiles (12, 48) and page 1, empty and short sequences, stream and whole-sequence modes,
// K and V block strides that differ; on both tiles, against the float64 reference on the
// stored bytes.
TEST(DecodeGpu, Fp8CtaSweep) {
  const Variant forms[] = {
      {.name = "cta sweep nosmall", .heads = 8, .stages = 0, .small = 0, .cta_sweep = 1},
      {.name = "cta sweep noswap nosmall", .heads = 8, .stages = 0, .small = 0, .swap = 0,
       .cta_sweep = 1},
      {.name = "cta sweep h4 s4 nosmall", .heads = 4, .stages = 4, .small = 0, .cta_sweep = 1}};
  const bool quick = test::quick_mode();
  const std::vector<int64_t> pages = {16, 1, 12, 48, 256, 32};
  const int64_t before = cuda::decode_host::cta_sweep_launches();
  for (const Variant& v : forms) {
    SCOPED_TRACE(v.name);
    UseVariant use(v);
    for (int c = 0; c < (quick ? 6 : 24); ++c) {
      if (!test::case_selected(c)) continue;
      const uint64_t seed = test::case_seed();
      std::mt19937_64 rng(seed);
      DecodeCase dc;
      dc.d = 64;
      dc.fp8 = true;
      dc.fp8_scale = pick(rng, std::vector<float>{0.0f, 0.01f, 0.2f});
      dc.dt = c % 2 ? DType::kBF16 : DType::kF16;
      dc.bs = pages[static_cast<size_t>(c) % pages.size()];
      dc.hkv = std::vector<int64_t>{3, 8, 1, 5, 6, 2}[static_cast<size_t>(c / 2) % 6];
      dc.group = pick(rng, std::vector<int64_t>{1, 3, 4, 8});
      if (c % 3 == 1) {
        dc.q_len = pick(rng, std::vector<int64_t>{2, 3});
        dc.causal = uniform_int(rng, 0, 3) != 0;
      }
      const int64_t B = pick(rng, std::vector<int64_t>{1, 5, 40});
      dc.lens = random_lens(rng, B, quick ? 300 : 1500, true);
      dc.plan_mode = static_cast<int>(pick(rng, std::vector<int64_t>{0, 1, 2, 3}));
      dc.forced_splits = static_cast<int>(pick(rng, std::vector<int64_t>{1, 3, 7}));
      dc.with_lse = uniform_int(rng, 0, 1) == 1;
      SCOPED_TRACE(test::case_note(c, seed, dc.describe()));
      check(dc, run_case(dc, rng));
    }
  }
  // The split kernel served some of them by the sweep (the small kernel is off; forced splits
  // of 1 and plans for few sequences may still take the whole-sequence mode, which has it too).
  if (std::getenv("KVATTN_TEST_CASE") == nullptr) {
    EXPECT_GT(cuda::decode_host::cta_sweep_launches(), before) << "no case took the CTA sweep";
  }
}

// Every code, and every output dim in its place (fp8_swap_o_dim), on the swapped fp8 tile.
TEST(DecodeGpu, Fp8CodesReadExactlySwappedTile) {
  UseVariant use(Variant{.name = "swap nosmall", .heads = 8, .stages = 0, .small = 0, .swap = 1});
  fp8_codes_read_exactly();
}

// The integer e4m3 conversion (KVATTN_DECODE_FP8_HW_CVT=0: P V in the query type; the default
// is the hardware conversion, which every other fp8 test runs) on both fp8 tiles and the small
// kernel: every code exact, every output dim in its place, and the fp8 sweep against the
// float64 reference on the stored bytes.
TEST(DecodeGpu, Fp8IntegerConversion) {
  const Variant forms[] = {
      {.name = "fp8 integer cvt", .heads = 8, .stages = 0, .hw_cvt = 0},
      {.name = "fp8 integer cvt swap nosmall", .heads = 8, .stages = 0, .small = 0, .swap = 1,
       .hw_cvt = 0},
      {.name = "fp8 integer cvt noswap nosmall", .heads = 8, .stages = 0, .small = 0, .swap = 0,
       .hw_cvt = 0}};
  for (const Variant& v : forms) {
    SCOPED_TRACE(v.name);
    UseVariant use(v);
    fp8_codes_read_exactly();
    sweep(test::quick_mode() ? 8 : 48, /*fp8=*/true);
  }
}

// bf16 queries kept in bf16 (KVATTN_DECODE_FP8_Q_F16=0; the default rewrites them in f16 per
// warp, a power-of-two prescale folded into the softmax scale, so that K takes the hardware
// conversion too) on both fp8 tiles and the small kernel: the one-hot queries of the codes test
// (every K code through the LSE) and the fp8 sweep against the float64 reference on the
// stored bytes.
TEST(DecodeGpu, Fp8QueriesInBf16) {
  const Variant forms[] = {
      {.name = "fp8 q bf16", .heads = 8, .stages = 0, .q_f16 = 0},
      {.name = "fp8 q bf16 swap nosmall", .heads = 8, .stages = 0, .small = 0, .swap = 1,
       .q_f16 = 0},
      {.name = "fp8 q bf16 noswap nosmall", .heads = 8, .stages = 0, .small = 0, .swap = 0,
       .q_f16 = 0}};
  for (const Variant& v : forms) {
    SCOPED_TRACE(v.name);
    UseVariant use(v);
    fp8_codes_read_exactly();
    sweep(test::quick_mode() ? 8 : 48, /*fp8=*/true);
  }
}

// The fp8 sweep again on the swapped fp8 tile (decode_swap 1; small mode off, so the stream and
// whole-sequence kernels take every batch; units of more than 8 rows keep the 16-row tile).
TEST(DecodeGpu, Fp8CacheSweepSwappedTile) {
  UseVariant use(Variant{.name = "swap nosmall", .heads = 8, .stages = 0, .small = 0, .swap = 1});
  sweep(test::quick_mode() ? 12 : 96, /*fp8=*/true);
}

// Long contexts, a batch of 256, many query rows (GQA 8 x q_len 3: two row tiles), q_len
// longer than some sequences, and all-empty batches.
void shapes_at_the_edges() {
  const bool quick = test::quick_mode();
  std::vector<DecodeCase> list;
  DecodeCase base;
  {
    DecodeCase dc = base;  // one 32k sequence, page 16 and 256
    dc.lens = {quick ? 3000 : 32768};
    list.push_back(dc);
    dc.bs = 256;
    dc.dt = DType::kF16;
    list.push_back(dc);
    dc.plan_mode = 2;  // no split: one CTA per KV head streams all of it
    dc.forced_splits = 1;
    list.push_back(dc);
  }
  {
    DecodeCase dc = base;  // 256 sequences, some empty
    dc.group = 2;
    dc.hkv = 2;
    dc.lens.resize(quick ? 20 : 256);
    list.push_back(dc);
    dc.plan_mode = 1;
    dc.bs = 32;
    dc.d = 64;
    list.push_back(dc);
  }
  {
    DecodeCase dc = base;  // 24 rows per KV head
    dc.group = 8;
    dc.q_len = 3;
    dc.hkv = 1;
    dc.lens = {1, 2, 3, 700, 64};
    list.push_back(dc);
    dc.plan_mode = 2;
    dc.forced_splits = 3;
    dc.causal = false;
    list.push_back(dc);
  }
  {
    DecodeCase dc = base;  // lone and uniform sequences planned for their own length (the
    dc.group = 4;          // small kernel's guessed split is right), then for half of it
    dc.hkv = 8;
    dc.lens = {quick ? 2000 : 8192};
    dc.plan_mode = 3;
    list.push_back(dc);
    dc.bs = 256;
    dc.with_lse = true;
    list.push_back(dc);
    dc.lens = std::vector<int64_t>(4, quick ? 1500 : 8192);
    list.push_back(dc);
    dc.plan_mode = 4;
    list.push_back(dc);
    dc.lens = {quick ? 999 : 5000};
    dc.bs = 16;
    list.push_back(dc);
  }
  {
    DecodeCase dc = base;  // nothing to attend to at all
    dc.lens = {0, 0, 0};
    list.push_back(dc);
    dc.plan_mode = 2;
    dc.forced_splits = 4;
    list.push_back(dc);
  }
  for (size_t c = 0, n = list.size(); c < n; ++c) {  // each again over a float8_e4m3 cache
    DecodeCase dc = list[c];
    dc.fp8 = true;
    dc.fp8_scale = 0.05f;
    list.push_back(dc);
  }
  for (size_t c = 0; c < list.size(); ++c) {
    if (!test::case_selected(static_cast<int>(c))) continue;
    const uint64_t seed = test::case_seed();
    std::mt19937_64 rng(seed);
    DecodeCase dc = list[c];
    if (dc.lens.size() >= 20) dc.lens = random_lens(rng, static_cast<int64_t>(dc.lens.size()), 1000, true);
    SCOPED_TRACE(test::case_note(static_cast<int>(c), seed, dc.describe()));
    check(dc, run_case(dc, rng));
  }
}

TEST(DecodeGpu, ShapesAtTheEdges) { shapes_at_the_edges(); }

// The same edges with the swapped tile on and off (whichever the default is), small mode off so
// that the stream and whole-sequence kernels take every batch.
TEST(DecodeGpu, ShapesAtTheEdgesBothTiles) {
  for (const int swap : {0, 1}) {
    SCOPED_TRACE(swap ? "swapped tile" : "16-row tile");
    UseVariant use(Variant{.name = "", .heads = 8, .stages = 0, .small = 0, .swap = swap});
    shapes_at_the_edges();
  }
}

// Bad block ids and lengths: the kernel never touches memory outside the cache (memcheck
// proves it), records the fault bits, and the healthy sequences still come out right.
// fp8_d64: over an fp8 cache at head_dim 64 with 3 KV heads (the CTA sweep's case), the
// reference on the stored bytes.
void bad_indices(bool fp8_d64 = false) {
  const uint64_t seed = test::case_seed();
  std::mt19937_64 rng(seed);
  SCOPED_TRACE(test::case_note(0, seed, std::string("bad block ids and cache_seqlens") +
                                            (fp8_d64 ? ", fp8 d64" : "")));
  const int64_t hkv = fp8_d64 ? 3 : 2, group = 4, d = fp8_d64 ? 64 : 128, bs = 16;
  const int64_t H = hkv * group;
  const std::vector<int64_t> lens = {100, 200, 50, 300};
  test::PagedKv kv = test::make_paged_kv(rng, DType::kBF16, hkv, d, bs, lens);
  Relaid r = relayout_aligned(rng, kv);
  Fp8Caches f8;
  if (fp8_d64) f8 = quantise_caches(rng, r.k, r.v, 0.0f, /*aligned=*/true);
  test::RowBuffer qb = test::make_rows(4, H, d, DType::kBF16, 0);
  test::fill_uniform(qb.view, rng);
  Tensor lens_t = test::int_tensor(lens);
  const double scale = 1 / std::sqrt(static_cast<double>(d));
  const test::RefAttention ref =
      fp8_d64 ? test::decode_reference(qb.view, f8.k_ref, f8.v_ref, kv.block_table, lens_t, 1,
                                       scale, true)
              : test::decode_reference(qb.view, r.k, r.v, kv.block_table, lens_t, 1, scale, true);

  for (int mode = 0; mode < 2; ++mode) {
    // Corrupt sequence 1's table (mode 0) or sequence 1's and 3's lengths (mode 1).
    Tensor table = Tensor::empty({kv.table_storage.nbytes()}, DType::kU8);
    std::memcpy(table.data(), kv.table_storage.data(), static_cast<size_t>(table.nbytes()));
    TensorView table_view = kv.block_table;
    table_view.data = table.data();
    std::vector<int64_t> bad_lens = lens;
    const int64_t row = kv.block_table.stride(0);
    if (mode == 0) {
      table.ptr<int32_t>()[row * 1 + 3] = static_cast<int32_t>(kv.k_cache.size(0) + 7);
      table.ptr<int32_t>()[row * 1 + 5] = -3;
    } else {
      bad_lens[1] = kv.block_table.size(1) * bs + 50;  // past the table's capacity
      bad_lens[3] = -5;
    }
    Tensor bad_lens_t = test::int_tensor(bad_lens);
    const Mirror caches = Mirror::of(fp8_d64 ? f8.storage : r.storage);
    const Mirror tbl = Mirror::of(table);
    const Tensor q = qb.storage.to(kGpu);
    test::RowBuffer ob = test::make_rows(4, H, d, DType::kBF16, 0);
    const Mirror out = Mirror::of(ob.storage);
    const Tensor lens_dev = bad_lens_t.to(kGpu);
    for (int splits : {1, 5}) {
      DecodeArgs a;
      a.q = TensorView(q.data(), DType::kBF16, kGpu, {4, H, d});
      a.k_cache = caches.on_device(fp8_d64 ? f8.k : r.k);
      a.v_cache = caches.on_device(fp8_d64 ? f8.v : r.v);
      a.block_table = tbl.on_device(table_view);
      a.cache_seqlens = lens_dev;
      a.out = out.on_device(ob.view);
      Tensor ws;
      if (splits > 1) {
        const int64_t bytes = splits * 4 * H * (d + 1) * 4;
        ws = Tensor::empty({bytes}, DType::kU8, kGpu);
        a.plan = DecodePlan{splits, bytes};
        a.workspace = ws;
      }
      ASSERT_EQ(read_device_faults(kGpu), 0u);
      ASSERT_NO_THROW(decode_attention(a));
      const uint32_t faults = read_device_faults(kGpu);
      if (mode == 0) {
        EXPECT_TRUE(faults & kFaultBlockOutOfRange) << "faults " << faults << " splits " << splits;
      } else {
        EXPECT_TRUE(faults & kFaultSeqlenOutOfRange) << "faults " << faults << " splits " << splits;
      }
      const Tensor back = out.download();
      const auto got = test::to_doubles(out.in(back, ob.view));
      const size_t n = static_cast<size_t>(H * d);
      for (int64_t b : {int64_t{0}, int64_t{2}}) {  // untouched sequences
        std::vector<double> g(got.begin() + b * n, got.begin() + (b + 1) * n);
        std::vector<double> w(ref.out.begin() + b * n, ref.out.begin() + (b + 1) * n);
        const auto e = test::compare(g, w);
        EXPECT_FALSE(e.has_nan) << "sequence " << b << " mode " << mode << " splits " << splits;
        EXPECT_LT(e.rel_l2, 1e-2) << "sequence " << b << " mode " << mode << " splits " << splits;
      }
      if (mode == 0) {
        // Bad block ids read as zero rows: sequence 1 stays finite (its other keys are real).
        for (size_t i = n; i < 2 * n; ++i) {
          ASSERT_TRUE(std::isfinite(got[i])) << "sequence 1, splits " << splits;
        }
      } else {
        // A negative length is clamped to 0: zeros. (Sequence 1, clamped to the table's
        // capacity, reads in-bounds slots no key was written to: garbage, not checked.)
        for (size_t i = 3 * n; i < 4 * n; ++i) {
          ASSERT_EQ(got[i], 0.0) << "sequence 3 (cache_seqlens -5), splits " << splits;
        }
      }
    }
  }
}

TEST(DecodeGpu, BadIndicesAreCaughtByTheFaultWord) {
  // Every form of the copy issue checks the block ids (the case's pages of 16 at head_dim 128
  // are the TMA form's where the device has it), and the default's pick among them.
  const Variant forms[] = {{.name = "default issue", .heads = 8, .stages = 0},
                           {.name = "copy issue", .heads = 8, .stages = 0, .lean_issue = 0,
                            .tma = 0},
                           {.name = "lean issue", .heads = 8, .stages = 0, .lean_issue = 1,
                            .tma = 0},
                           {.name = "tma issue", .heads = 8, .stages = 0, .tma = 1},
                           {.name = "tma issue swap nosmall", .heads = 8, .stages = 0,
                            .small = 0, .swap = 1, .tma = 1}};
  for (const Variant& v : forms) {
    SCOPED_TRACE(v.name);
    UseVariant use(v);
    bad_indices();
  }
  // The split kernel's CTA sweep (fp8 d64) and the lean issue it stands beside there.
  const Variant fp8_forms[] = {{.name = "lean issue fp8 d64", .heads = 8, .stages = 0,
                                .small = 0, .lean_issue = 1, .cta_sweep = 0},
                               {.name = "cta sweep fp8 d64", .heads = 8, .stages = 0,
                                .small = 0, .cta_sweep = 1}};
  for (const Variant& v : fp8_forms) {
    SCOPED_TRACE(v.name);
    UseVariant use(v);
    bad_indices(/*fp8_d64=*/true);
  }
}

// The TMA copy issue (decode_tma.cuh) on the cases it takes: pages of whole 16-key tiles
// (16, 32, 48, 64, 256), head_dim 64, 128 and 256 over 16-bit caches and 128 over fp8 ones
// (every third case: the reference on the stored bytes), GQA groups 1-8 (3 and 6 included), q_len
// 1-5 (several row chunks), the small, 16-row and swapped kernels, lengths ending mid-tile
// over poisoned (NaN) page tails, against the float64 reference and the CPU backend; pages it
// does not take (1, 12) fall back to the cp.async forms. On an sm_90a device the eligible
// cases must have launched it.
TEST(DecodeGpu, TmaCopyIssue) {
  const bool quick = test::quick_mode();
  const Variant forms[] = {
      {.name = "tma", .heads = 8, .stages = 0, .tma = 1},
      {.name = "tma swap nosmall", .heads = 8, .stages = 0, .small = 0, .swap = 1, .tma = 1},
      {.name = "tma noswap nosmall h4 s2", .heads = 4, .stages = 2, .small = 0, .swap = 0,
       .tma = 1},
      {.name = "tma prefetch", .heads = 8, .stages = 0, .tma = 1, .tma_prefetch = 1}};
  const std::vector<int64_t> pages = {16, 32, 48, 64, 256, 16, 1, 12};
  const int64_t before = cuda::decode_host::tma_launches();
  int eligible = 0;
  for (const Variant& v : forms) {
    SCOPED_TRACE(v.name);
    UseVariant use(v);
    for (int c = 0; c < (quick ? 8 : 24); ++c) {
      if (!test::case_selected(c)) continue;
      const uint64_t seed = test::case_seed();
      std::mt19937_64 rng(seed);
      DecodeCase dc;
      dc.dt = c % 2 ? DType::kBF16 : DType::kF16;
      dc.d = c % 7 == 6 ? 256 : (c / 2) % 2 ? 128 : 64;
      dc.bs = pages[(c / 3) % pages.size()];
      dc.group = pick(rng, std::vector<int64_t>{1, 2, 3, 4, 6, 8});
      dc.hkv = pick(rng, std::vector<int64_t>{1, 2, 3});
      const int64_t B = pick(rng, std::vector<int64_t>{1, 3, 17, 33});
      dc.lens = random_lens(rng, B, quick ? 300 : 1300, true);
      if (c % 3 == 1) {
        dc.q_len = pick(rng, std::vector<int64_t>{2, 3, 5});
        dc.causal = uniform_int(rng, 0, 5) != 0;
      }
      dc.plan_mode = c % 5;
      dc.forced_splits = static_cast<int>(pick(rng, std::vector<int64_t>{1, 2, 3, 7}));
      dc.aligned_cache = true;
      dc.with_lse = c % 2 == 0;
      dc.q_pad = pick(rng, std::vector<int64_t>{0, 8, 3});
      dc.fp8 = c % 3 == 2;
      if (dc.fp8) {
        dc.d = 128;
        dc.fp8_scale = pick(rng, std::vector<float>{0.0f, 0.01f, 0.2f});
      }
      if (dc.bs % 16 == 0) ++eligible;
      SCOPED_TRACE(test::case_note(c, seed, dc.describe()));
      check(dc, run_case(dc, rng));
    }
  }
  if (eligible > 0 && cuda::decode_host::tma_built() && cuda::compute_capability(0) == 90) {
    EXPECT_GT(cuda::decode_host::tma_launches(), before)
        << "no case took the TMA form on an sm_90a device; tensor maps refused "
        << cuda::decode_host::tma_refusals() << " times, last CUresult "
        << cuda::decode_host::last_tma_refusal();
  }
  if (cuda::decode_host::tma_refusals() > 0) {
    ADD_FAILURE() << "the driver refused the TMA form's tensor maps "
                  << cuda::decode_host::tma_refusals() << " times (last CUresult "
                  << cuda::decode_host::last_tma_refusal() << ") on cases meant for it";
  }
}

// A decode captured in a CUDA graph with its plan and workspace replays to the same result,
// a replay after new queries are written reads the new queries, and replays after the lengths
// change (each at most its first value; the stream kernel's ranges move) read the new
// lengths. `plan_bound` 0: the plan is made for the table's capacity.
void graph_capture_and_replay(std::vector<int64_t> lens = {3000, 17, 0, 1200, 640},
                              int64_t plan_bound = 0, int64_t window_left = -1,
                              float softcap = 0.0f) {
  const uint64_t seed = test::case_seed();
  std::mt19937_64 rng(seed);
  SCOPED_TRACE(test::case_note(0, seed, "graph capture"));
  const int64_t hkv = 2, group = 4, d = 128, bs = 16, H = hkv * group;
  const auto B = static_cast<int64_t>(lens.size());
  test::PagedKv kv = test::make_paged_kv(rng, DType::kBF16, hkv, d, bs, lens);
  Relaid r = relayout_aligned(rng, kv);
  test::RowBuffer qb = test::make_rows(B, H, d, DType::kBF16, 0);
  test::fill_uniform(qb.view, rng);
  Tensor lens_t = test::int_tensor(lens);

  const Mirror caches = Mirror::of(r.storage);
  const Mirror tbl = Mirror::of(kv.table_storage);
  const Mirror q = Mirror::of(qb.storage);
  const Tensor out = Tensor::empty({B, H, d}, DType::kBF16, kGpu);
  const Tensor lse = Tensor::empty({H, B}, DType::kF32, kGpu);
  const Tensor lens_dev = lens_t.to(kGpu);

  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  DecodeArgs a;
  a.q = q.on_device(qb.view);
  a.k_cache = caches.on_device(r.k);
  a.v_cache = caches.on_device(r.v);
  a.block_table = tbl.on_device(kv.block_table);
  a.cache_seqlens = lens_dev;
  a.out = out;
  a.lse = lse;
  a.stream = Stream{stream};
  a.window_left = window_left;
  a.softcap = softcap;
  test::RefMask mask;
  mask.window_left = window_left;
  mask.softcap = softcap;
  a.plan = plan_decode(B, H, hkv, d, 1, plan_bound > 0 ? plan_bound : kv.block_table.size(1) * bs,
                       kGpu);
  EXPECT_GT(a.plan.num_splits, 1) << "the case should exercise split + merge";
  const Tensor ws = Tensor::empty({std::max<int64_t>(a.plan.workspace_bytes, 16)}, DType::kU8, kGpu);
  a.workspace = ws;
  decode_attention(a);  // warm-up outside the capture (first-use setup)
  CUDA_OK(cudaStreamSynchronize(stream));

  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  decode_attention(a);
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));

  const std::vector<int64_t> full = lens;
  for (int round = 0; round < 4; ++round) {
    if (round == 1) {  // new queries, same graph
      test::fill_uniform(qb.view, rng, -4.0f, 4.0f);
      copy_bytes(q.device.view(), qb.storage.view());
    }
    if (round >= 2) {  // other (shorter) lengths, same graph
      for (size_t i = 0; i < lens.size(); ++i) {
        lens[i] = round == 2 ? full[i] * 2 / 3 : (i % 2 == 1 ? full[i] : full[i] / 3);
      }
      lens_t = test::int_tensor(lens);
      copy_bytes(lens_dev.view(), lens_t.view());
    }
    const test::RefAttention ref = test::decode_reference(qb.view, r.k, r.v, kv.block_table,
                                                          lens_t, 1, 1 / std::sqrt(128.0), true,
                                                          mask);
    CUDA_OK(cudaMemsetAsync(out.data(), 0xFF, static_cast<size_t>(out.nbytes()), stream));
    CUDA_OK(cudaMemsetAsync(lse.data(), 0xFF, static_cast<size_t>(lse.nbytes()), stream));
    CUDA_OK(cudaGraphLaunch(exec, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    const auto e = test::compare(test::to_doubles(out.to(Device::cpu())), ref.out);
    EXPECT_FALSE(e.has_nan) << "round " << round;
    EXPECT_LT(e.rel_l2, 1e-2) << "round " << round << " max abs " << e.max_abs;
    const auto le = test::compare_lse(test::to_doubles(lse.to(Device::cpu())), ref.lse);
    EXPECT_TRUE(le.ok) << "round " << round;
    EXPECT_LT(le.max_abs, 2e-3) << "round " << round;
  }
  EXPECT_EQ(read_device_faults(kGpu), 0u);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST(DecodeGpu, CudaGraphCaptureAndReplay) {
  graph_capture_and_replay();  // the small-batch kernel (its LL tags chain from replay to replay)
  {
    SCOPED_TRACE("a lone sequence, planned for its length: the guessed split, then a wrong guess");
    graph_capture_and_replay({2500}, 2500);
  }
  {
    SCOPED_TRACE("interleaved chunks (KVATTN_DECODE_SMALL_INTERLEAVE): the same replays");
    UseVariant inter(Variant{.name = "small interleaved", .heads = 8, .stages = 0, .interleave = 1});
    graph_capture_and_replay();
    graph_capture_and_replay({2500}, 2500);
  }
  {
    SCOPED_TRACE("nosmall: stream kernel + merge kernel");
    UseVariant use(kVariants[4]);
    graph_capture_and_replay();
    graph_capture_and_replay({700, 2900, 31, 0, 1500, 900, 2200, 64, 1800, 333});
  }
}

// The dynamic split's claim counters restart in every replay (their tags chain): ~3,400 tiles,
// enough for its ranges in the first replays, fewer than that in the last ones (the static
// split, inside the same graph). (Its own test: the sanitizer runs take it alone.)
TEST(DecodeGpu, DynamicSplitGraphReplay) {
  UseVariant dyn(Variant{.name = "dynamic nosmall", .heads = 8, .stages = 0, .small = 0,
                         .dynamic_split = 1});
  const int64_t before = cuda::decode_host::dynamic_launches();
  graph_capture_and_replay({8000, 17, 0, 12000, 6400, 9000, 31, 15000, 64, 3000});
  expect_dynamic_launches_since(before);
}

// DecodeArgs::pdl: a decode launched with programmatic dependent launch right after a kernel
// that writes its queries (another decode, whose output is this one's q, sharing its
// workspace) reads them only after that kernel completed: eagerly and in a captured graph with
// new queries each replay, on the small kernel, the stream kernel + merge and the
// whole-sequence form (sm_90: the attribute is ignored elsewhere, and the test still checks
// the plain behaviour).
void pdl_after_writer(const std::vector<int64_t>& lens, int64_t plan_bound, bool whole) {
  const uint64_t seed = test::case_seed();
  std::mt19937_64 rng(seed);
  SCOPED_TRACE(test::case_note(0, seed, "pdl after a writer"));
  const int64_t hkv = 2, group = 4, d = 128, bs = 16, H = hkv * group;
  const auto B = static_cast<int64_t>(lens.size());
  test::PagedKv kv = test::make_paged_kv(rng, DType::kBF16, hkv, d, bs, lens);
  Relaid r = relayout_aligned(rng, kv);
  test::RowBuffer qb = test::make_rows(B, H, d, DType::kBF16, 0);
  const Mirror caches = Mirror::of(r.storage);
  const Mirror tbl = Mirror::of(kv.table_storage);
  const Mirror q = Mirror::of(qb.storage);
  const Tensor mid = Tensor::empty({B, H, d}, DType::kBF16, kGpu);  // writer's out, reader's q
  const Tensor out = Tensor::empty({B, H, d}, DType::kBF16, kGpu);
  const Tensor lens_dev = test::int_tensor(lens).to(kGpu);

  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  DecodeArgs w;  // the writer: a plain launch
  w.k_cache = caches.on_device(r.k);
  w.v_cache = caches.on_device(r.v);
  w.block_table = tbl.on_device(kv.block_table);
  w.cache_seqlens = lens_dev;
  w.stream = Stream{stream};
  w.plan = whole ? DecodePlan{1, 0, 0}
                 : plan_decode(B, H, hkv, d, 1, plan_bound > 0 ? plan_bound
                                                               : kv.block_table.size(1) * bs,
                               kGpu);
  const Tensor ws =
      Tensor::empty({std::max<int64_t>(w.plan.workspace_bytes, 16)}, DType::kU8, kGpu);
  w.workspace = ws;
  w.q = q.on_device(qb.view);
  w.out = mid;
  DecodeArgs rd = w;  // the reader: q = the writer's output, launched with PDL
  rd.q = mid;
  rd.out = out;
  rd.pdl = true;
  auto run_pair = [&] {
    CUDA_OK(cudaMemsetAsync(mid.data(), 0xFF, static_cast<size_t>(mid.nbytes()), stream));
    CUDA_OK(cudaMemsetAsync(out.data(), 0xFF, static_cast<size_t>(out.nbytes()), stream));
    decode_attention(w);
    decode_attention(rd);
  };
  auto check = [&](const char* what, int round) {
    CUDA_OK(cudaStreamSynchronize(stream));
    const Tensor mid_host = mid.to(Device::cpu());
    const test::RefAttention ref = test::decode_reference(
        mid_host.view(), r.k, r.v, kv.block_table, test::int_tensor(lens), 1,
        1 / std::sqrt(128.0), true, test::RefMask{});
    const auto e = test::compare(test::to_doubles(out.to(Device::cpu())), ref.out);
    EXPECT_FALSE(e.has_nan) << what << " round " << round;
    EXPECT_LT(e.rel_l2, 1e-2) << what << " round " << round << " max abs " << e.max_abs;
  };
  for (int round = 0; round < 3; ++round) {
    test::fill_uniform(qb.view, rng, -2.0f, 2.0f);
    copy_bytes(q.device.view(), qb.storage.view());
    run_pair();
    check("eager", round);
  }
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  run_pair();
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int round = 0; round < 3; ++round) {
    test::fill_uniform(qb.view, rng, -2.0f, 2.0f);
    copy_bytes(q.device.view(), qb.storage.view());
    CUDA_OK(cudaGraphLaunch(exec, stream));
    check("graph", round);
  }
  EXPECT_EQ(read_device_faults(kGpu), 0u);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST(DecodeGpu, ProgrammaticLaunchAfterAWriter) {
  {
    SCOPED_TRACE("small kernel");
    pdl_after_writer({3000, 17, 0, 1200, 640}, 0, false);
    pdl_after_writer({130}, 4096, false);
  }
  {
    SCOPED_TRACE("whole-sequence form (one split)");
    pdl_after_writer({700, 2900, 31, 0, 1500}, 0, true);
  }
  SCOPED_TRACE("nosmall: stream kernel + merge kernel");
  UseVariant use(kVariants[4]);
  pdl_after_writer({700, 2900, 31, 0, 1500, 900, 2200, 64, 1800, 333}, 0, false);
}

// ---- issue 18: window, softcap, ALiBi (the extended kernels) ----

// A random case of the extended kernels: window kind x causal x GQA 1-8 (3 and 6 included) x
// pages 1/16/256 x q_len 1 and > 1 x plan (whole, stream, small, forced splits), with softcap
// and ALiBi ([H] or [B, H]) on some cases; c picks dtype, page size, group and q_len in turn.
DecodeCase feature_case(int c, std::mt19937_64& rng, bool fp8) {
  const bool quick = test::quick_mode();
  DecodeCase dc;
  dc.dt = c % 2 ? DType::kBF16 : DType::kF16;
  dc.d = (c / 2) % 2 ? 128 : 64;
  // 256 (the swapped tile); 80 and 96 (padded 128 tiles; fp8 caches too since session 32).
  if ((c / 2) % 3 == 2) dc.d = std::vector<int64_t>{256, 80, 96}[(c / 6) % 3];
  dc.bs = std::vector<int64_t>{1, 16, 256}[(c / 4) % 3];
  dc.group = std::vector<int64_t>{1, 2, 3, 4, 6, 8}[(c / 12) % 6];
  dc.hkv = pick(rng, std::vector<int64_t>{1, 2, 3});
  const int64_t B = pick(rng, std::vector<int64_t>{1, 3, 17});
  dc.lens = random_lens(rng, B, quick ? 300 : 1300, true);
  if (c % 3 != 0) dc.q_len = pick(rng, std::vector<int64_t>{2, 3, 5});
  dc.causal = uniform_int(rng, 0, 3) != 0;
  // Windows at and around the 16-key tile edges, shorter and longer than the sequences.
  dc.window_left = pick(rng, std::vector<int64_t>{-1, 0, 1, 15, 16, 17, 31, 100, 255, 1000,
                                                  uniform_int(rng, 0, 1500)});
  if (!dc.causal) dc.window_right = pick(rng, std::vector<int64_t>{-1, -1, 0, 1, 2, 40});
  if (uniform_int(rng, 0, 2) == 0) dc.softcap = pick(rng, std::vector<float>{1.0f, 5.0f, 30.0f});
  dc.alibi = static_cast<int>(uniform_int(rng, 0, 2));
  if (dc.window_left < 0 && dc.window_right < 0 && dc.softcap == 0 && dc.alibi == 0) {
    dc.window_left = 7;  // every case runs the extended kernels
  }
  dc.plan_mode = c % 5;
  dc.forced_splits = static_cast<int>(pick(rng, std::vector<int64_t>{1, 2, 3, 7}));
  dc.aligned_cache = c % 7 != 6;
  dc.q_pad = pick(rng, std::vector<int64_t>{0, 0, 8});
  dc.with_lse = uniform_int(rng, 0, 1) == 1;
  dc.q_range = pick(rng, std::vector<float>{1.0f, 4.0f, 8.0f});  // large scores to cap
  dc.scale = uniform_int(rng, 0, 3) == 0 ? 1.0f : 0.0f;
  dc.fp8 = fp8;
  dc.fp8_scale = pick(rng, std::vector<float>{0.0f, 0.01f, 0.2f});
  if (uniform_int(rng, 0, 2) == 0) {  // cache_leftpad on a third, pages before it poisoned
    for (int64_t len : dc.lens) {
      dc.leftpad.push_back(std::clamp<int64_t>(
          pick(rng, std::vector<int64_t>{0, 1, 15, 16, 17, len - 1, len, uniform_int(rng, 0, len)}),
          0, len));
    }
    dc.poison_pad = true;
  }
  return dc;
}

void feature_sweep(int cases, bool fp8) {
  for (int c = 0; c < cases; ++c) {
    if (!test::case_selected(c)) continue;
    const uint64_t seed = test::case_seed();
    std::mt19937_64 rng(seed);
    const DecodeCase dc = feature_case(c, rng, fp8);
    SCOPED_TRACE(test::case_note(c, seed, dc.describe()));
    check(dc, run_case(dc, rng));
  }
}

TEST(DecodeGpuFeatures, RandomSweep) { feature_sweep(test::quick_mode() ? 24 : 144, false); }

TEST(DecodeGpuFeatures, Fp8CacheRandomSweep) { feature_sweep(test::quick_mode() ? 12 : 72, true); }

// The same on the swapped fp8 tile's extended form (window, softcap, ALiBi, leftpad through
// DecodeMods::apply_swap): decode_swap 1, small mode off.
TEST(DecodeGpuFeatures, Fp8CacheRandomSweepSwappedTile) {
  UseVariant use(Variant{.name = "swap nosmall", .heads = 8, .stages = 0, .small = 0, .swap = 1});
  feature_sweep(test::quick_mode() ? 12 : 72, true);
}

// The stream kernel and the small kernel's variants compute the same.
TEST(DecodeGpuFeatures, Variants) {
  for (const Variant& v : kVariants) {
    SCOPED_TRACE(v.name);
    UseVariant use(v);
    feature_sweep(test::quick_mode() ? 3 : 12, false);
    feature_sweep(test::quick_mode() ? 2 : 6, true);
  }
}

// Windows at the tile edges (0, 1, 15, 16, 17, 31, 32, 33, 1000) over lengths at the tile
// edges, q_len 1 and 4, causal or not, GQA 3 and 8, every plan; softcap and ALiBi alone.
TEST(DecodeGpuFeatures, WindowTileEdges) {
  const uint64_t seed = test::case_seed();
  std::mt19937_64 rng(seed);
  int c = 0;
  for (int64_t left : {0, 1, 15, 16, 17, 31, 32, 33, 1000}) {
    for (int64_t q_len : {1, 4}) {
      DecodeCase dc;
      dc.window_left = left;
      dc.q_len = q_len;
      dc.causal = (left + q_len) % 3 != 0;
      dc.group = left % 2 ? 3 : 8;
      dc.hkv = 2;
      dc.bs = std::vector<int64_t>{1, 16, 256}[c % 3];
      dc.lens = {1, 15, 16, 17, 31, 32, 33, 48, 63, 64, 65, 200};
      dc.plan_mode = c % 5;
      dc.forced_splits = 3;
      dc.dt = c % 2 ? DType::kBF16 : DType::kF16;
      SCOPED_TRACE(test::case_note(c, seed, dc.describe()));
      check(dc, run_case(dc, rng));
      ++c;
    }
  }
  for (int alibi : {1, 2}) {
    DecodeCase dc;
    dc.alibi = alibi;
    dc.q_len = 3;
    dc.lens = {1, 100, 1000};
    SCOPED_TRACE(test::case_note(c++, seed, dc.describe()));
    check(dc, run_case(dc, rng));
  }
  for (float cap : {0.5f, 50.0f}) {
    DecodeCase dc;
    dc.softcap = cap;
    dc.scale = 1.0f;
    dc.q_range = 8.0f;
    dc.lens = {1, 100, 1000};
    SCOPED_TRACE(test::case_note(c++, seed, dc.describe()));
    check(dc, run_case(dc, rng));
  }
}

// A 4096-key window over a 32k context (3000 / 1000 in quick mode), pages 16 and 256, GQA 4
// and 8, q_len 1 and 2, small and stream kernels, with softcap and ALiBi on some.
TEST(DecodeGpuFeatures, LongWindow32k) {
  const bool quick = test::quick_mode();
  const uint64_t seed = test::case_seed();
  std::mt19937_64 rng(seed);
  int c = 0;
  for (const int small : {1, 0}) {
    Variant v = kVariants[0];
    v.stages = 0;
    v.small = small;
    UseVariant use(v);
    for (int64_t bs : {16, 256}) {
      DecodeCase dc;
      dc.lens = {quick ? 3000 : 32768};
      if (c % 2) dc.lens.push_back(quick ? 2000 : 20000);
      dc.window_left = quick ? 999 : 4095;
      dc.bs = bs;
      dc.group = c % 2 ? 8 : 4;
      dc.q_len = c % 2 ? 2 : 1;
      dc.softcap = c == 2 ? 30.0f : 0.0f;
      dc.alibi = c == 3 ? 2 : 0;
      dc.poison_left = dc.window_left;
      SCOPED_TRACE(test::case_note(c, seed, std::string(small ? "small " : "stream ") + dc.describe()));
      check(dc, run_case(dc, rng));
      ++c;
    }
  }
}

// The pages entirely before a window are never read: bad ids there raise no fault and change
// nothing (the references read the good table), in every kernel and plan, by copy and by TMA,
// pages 1/16/256, q_len 1 and 3; without the window the same table is read and reported.
TEST(DecodeGpuFeatures, WindowSkipsBlocksBeforeIt) {
  const uint64_t seed = test::case_seed();
  std::mt19937_64 rng(seed);
  int c = 0;
  // small on / off, by copy and by TMA
  for (const Variant& v : {kVariants[0], kVariants[4], kTmaSmallOn, kTmaSmallOff}) {
    UseVariant use(v);
    for (int64_t bs : {1, 16, 256}) {
      for (int64_t q_len : {1, 3}) {
        DecodeCase dc;
        dc.bs = bs;
        dc.q_len = q_len;
        dc.lens = {600, 1000, 97, 0, 700};
        dc.window_left = bs == 256 ? 40 : 100;
        dc.poison_left = dc.window_left;
        dc.group = 6;
        dc.hkv = 1;
        dc.softcap = 20.0f;
        dc.plan_mode = c % 5;
        dc.forced_splits = 7;
        SCOPED_TRACE(test::case_note(c, seed, std::string(v.name) + " " + dc.describe()));
        check(dc, run_case(dc, rng));
        DecodeCase control = dc;  // no window: the bad ids are read and reported
        control.window_left = -1;
        control.softcap = 0.0f;
        const Outcome r = run_case(control, rng);
        EXPECT_EQ(r.faults & kFaultBlockOutOfRange, static_cast<uint32_t>(kFaultBlockOutOfRange))
            << "control without the window: faults " << r.faults;
        ++c;
      }
    }
  }
}

// A windowed decode with softcap captured in a graph: replays with new queries and new
// lengths (the window's first tile moves on the device) read them, in both kernels.
TEST(DecodeGpuFeatures, CudaGraphCaptureAndReplay) {
  graph_capture_and_replay({3000, 17, 0, 1200, 640}, 0, 300, 20.0f);
  SCOPED_TRACE("nosmall: stream kernel + merge kernel");
  UseVariant use(kVariants[4]);
  graph_capture_and_replay({700, 2900, 31, 0, 1500, 900, 2200, 64, 1800, 333}, 0, 500, 0.0f);
}

// A window wider than every context runs the extended kernels with nothing cut.
TEST(DecodeGpuFeatures, WindowWiderThanTheContext) {
  const uint64_t seed = test::case_seed();
  std::mt19937_64 rng(seed);
  DecodeCase dc;
  dc.lens = {5, 300, 1200};
  dc.q_len = 2;
  dc.window_left = 1 << 20;
  SCOPED_TRACE(test::case_note(0, seed, dc.describe()));
  check(dc, run_case(dc, rng));
}

// cache_leftpad at the tile edges (pads 0, 1, 15, 16, 17, len - 1, len over lengths at the
// edges), alone and with a window, q_len 1 and 3, GQA 3 and 8, head_dim 64/128/256/96, every
// plan, both kernels, both copy issues; the pages before each pad hold bad ids on the GPU
// (never read: no fault).
// Last, a pad past its sequence's length: clamped to the length (no key) and reported.
TEST(DecodeGpuFeatures, LeftpadTileEdges) {
  const uint64_t seed = test::case_seed();
  std::mt19937_64 rng(seed);
  int c = 0;
  // small on / off, by copy and by TMA
  for (const Variant& v : {kVariants[0], kVariants[4], kTmaSmallOn, kTmaSmallOff}) {
    UseVariant use(v);
    for (int64_t q_len : {1, 3}) {
      for (int64_t left : {-1, 20}) {
        DecodeCase dc;
        dc.q_len = q_len;
        dc.window_left = left;
        dc.group = c % 2 ? 3 : 8;
        dc.hkv = 2;
        dc.d = std::vector<int64_t>{128, 64, 256, 96}[c % 4];
        dc.bs = std::vector<int64_t>{1, 16, 256}[c % 3];
        dc.lens = {1, 15, 16, 17, 31, 32, 33, 64, 65, 200, 1000, 1000, 1000, 1000, 0};
        dc.leftpad = {0, 15, 1, 16, 17, 16, 32, 63, 64, 199, 0, 1, 500, 1000, 0};
        dc.poison_pad = true;
        dc.plan_mode = c % 5;
        dc.forced_splits = 3;
        dc.dt = c % 2 ? DType::kBF16 : DType::kF16;
        SCOPED_TRACE(test::case_note(c, seed, std::string(v.name) + " " + dc.describe()));
        check(dc, run_case(dc, rng));
        ++c;
      }
    }
  }
  DecodeCase dc;
  dc.lens = {300, 40, 1000};
  dc.leftpad = {10, 40, 0};  // the GPU sees 47 for sequence 1
  dc.bad_pad = 1;
  dc.q_len = 2;
  SCOPED_TRACE(test::case_note(c, seed, dc.describe()));
  check(dc, run_case(dc, rng));
}

// A one-key decode over a bf16 query and a cache of `cache_dtype` at head_dim d must throw an
// Error whose message holds `expected`, before any launch.
void expect_decode_refused(DType cache_dtype, int64_t d, const std::string& expected) {
  std::mt19937_64 rng(test::case_seed());
  const std::vector<int64_t> lens = {10};
  test::PagedKv kv = test::make_paged_kv(rng, cache_dtype, 1, d, 16, lens);
  const Mirror caches = Mirror::of(kv.storage);
  const Mirror tbl = Mirror::of(kv.table_storage);
  const Tensor q = Tensor::zeros({1, 1, d}, DType::kBF16, kGpu);
  const Tensor out = Tensor::empty({1, 1, d}, DType::kBF16, kGpu);
  const Tensor lens_dev = test::int_tensor(lens).to(kGpu);
  DecodeArgs a;
  a.q = q;
  a.k_cache = caches.on_device(kv.k_cache);
  a.v_cache = caches.on_device(kv.v_cache);
  a.block_table = tbl.on_device(kv.block_table);
  a.cache_seqlens = lens_dev;
  a.out = out;
  a.plan = DecodePlan{1, 0};
  try {
    decode_attention(a);
    ADD_FAILURE() << "no error; expected one holding: " << expected;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

// fp8 at head_dim 256 is refused by name while CudaTuning::fp8_extended_forms is off (this
// binary turns it on for everything else).
TEST(DecodeGpu, Fp8HeadDim256IsAReadableErrorWhenOff) {
  UseVariant off(Variant{.name = "default", .heads = 8, .stages = 0});
  cuda::cuda_tuning().fp8_extended_forms = 0;  // restored with the rest by `off`
  expect_decode_refused(DType::kF8E4M3, 256, "head_dim 256 over a float8_e4m3 cache");
}

TEST(DecodeGpu, UnsupportedHeadDimIsAReadableError) {
  expect_decode_refused(DType::kBF16, 72, "unsupported head_dim: 72");
}

}  // namespace
}  // namespace kvattn

KVATTN_GPU_TEST_MAIN()
