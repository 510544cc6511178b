// The shared decode GPU case (decode_gpu_case.h): its run through the float64 reference, the
// CPU backend and the GPU, its check, the caches' layouts, the sweep and the tuning variants.
#include "kernels/decode_gpu_case.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "kvattn/core/fp8.h"
#include "kvattn/kernels/decode_attention.h"
#include "kvattn/kernels/device_faults.h"
#include "kernels/gpu_test_support.h"
#include "support/case_util.h"
#include "support/paged_case.h"
#include "support/reference.h"
#include "support/test_util.h"

namespace kvattn::test::decode_gpu {

std::string DecodeCase::describe() const {
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

void sweep(int cases, bool fp8) {
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

UseVariant::UseVariant(const Variant& v) : saved_(cuda::cuda_tuning()) {
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

}  // namespace kvattn::test::decode_gpu
