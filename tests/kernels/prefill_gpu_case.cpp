// The shared prefill GPU case (prefill_gpu_case.h): its paged and float8_e4m3 caches, its run
// on the GPU against the CPU backend or the float64 reference, and the random cases.
#include "kernels/prefill_gpu_case.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <numeric>
#include <sstream>

#include "kvattn/core/fp8.h"
#include "kvattn/kernels/device_faults.h"
#include "kvattn/kernels/prefill_attention.h"
#include "kernels/gpu_test_support.h"
#include "support/case_util.h"
#include "support/reference.h"
#include "support/test_util.h"

namespace kvattn::test::prefill_gpu {

std::string PrefillCase::describe() const {
  std::ostringstream os;
  os << dtype_name(dt) << " d=" << d << " heads=" << hkv * group << "/" << hkv
     << (causal ? " causal" : " non-causal");
  if (paged) os << " paged bs=" << bs << (fused_kv ? " fused-kv" : "");
  if (fp8) os << " fp8" << (fp8_scales ? " scales" : "");
  if (window_left >= 0 || window_right >= 0) {
    os << " window=(" << window_left << "," << window_right << ")";
  }
  if (softcap > 0.0f) os << " softcap=" << softcap;
  if (alibi != 0) os << (alibi == 1 ? " alibi[H]" : " alibi[B,H]");
  if (scale != 0.0f) os << " scale=" << scale;
  os << " q_pad=" << q_pad << " kv_pad=" << kv_pad << " lse=" << with_lse << " (Lq,Lk)=";
  for (size_t b = 0; b < lq.size() && b < 8; ++b) os << "(" << lq[b] << "," << lk[b] << ")";
  if (lq.size() > 8) os << "... x" << lq.size();
  return os.str();
}

namespace {

std::vector<int64_t> prefix_sums(const std::vector<int64_t>& v) {
  std::vector<int64_t> cu(v.size() + 1, 0);
  for (size_t i = 0; i < v.size(); ++i) cu[i + 1] = cu[i] + v[i];
  return cu;
}

// A float32 copy of a whole host allocation of `dt` elements; views map by element offset, so
// strides, gaps and NaN poison carry over.
struct Upcast {
  Tensor storage;
  const Tensor* source = nullptr;
  DType dt = DType::kBF16;

  static Upcast of(const Tensor& src, DType dt) {
    Upcast u;
    u.source = &src;
    u.dt = dt;
    const int64_t n = src.nbytes() / dtype_size(dt);
    u.storage = Tensor::empty({n}, DType::kF32);
    const auto* in = static_cast<const uint16_t*>(src.data());
    float* out = u.storage.ptr<float>();
    for (int64_t i = 0; i < n; ++i) {
      out[i] = dt == DType::kBF16 ? bf16_to_float(bf16_t{in[i]}) : f16_to_float(f16_t{in[i]});
    }
    return u;
  }
  TensorView view(const TensorView& v) const {
    TensorView f = v;
    const int64_t elem = (static_cast<const char*>(v.data) -
                          static_cast<const char*>(source->data())) / dtype_size(dt);
    f.data = storage.ptr<float>() + elem;
    f.dtype = DType::kF32;
    return f;
  }
};

// The float8_e4m3 form of paged caches: each K and V element quantised with the scale of its
// KV head (store_kv's rule, core/fp8.h; NaN stays NaN), one byte per element at the same
// element offsets (so the views keep their strides); every other byte a NaN code.
struct Fp8Paged {
  Tensor storage, k_scale, v_scale;  // scales undefined: none given
  TensorView k, v;
};
Fp8Paged quantise_paged(std::mt19937_64& rng, const PrefillCase& c, const Paged& p) {
  Fp8Paged f;
  const int64_t es = dtype_size(c.dt);
  f.storage = Tensor::empty({p.storage.nbytes() / es}, DType::kU8);
  std::memset(f.storage.data(), 0x7f, static_cast<size_t>(f.storage.nbytes()));
  std::vector<float> ks(static_cast<size_t>(c.hkv), 1.0f), vs = ks;
  if (c.fp8_scales) {
    std::uniform_real_distribution<float> u(0.002f, 0.05f);
    for (auto& x : ks) x = u(rng);
    for (auto& x : vs) x = u(rng);
    f.k_scale = Tensor::empty({c.hkv}, DType::kF32);
    f.v_scale = Tensor::empty({c.hkv}, DType::kF32);
    std::copy(ks.begin(), ks.end(), f.k_scale.ptr<float>());
    std::copy(vs.begin(), vs.end(), f.v_scale.ptr<float>());
  }
  auto quantise = [&](const TensorView& src, const std::vector<float>& scale) {
    const int64_t offset = (static_cast<const char*>(src.data) -
                            static_cast<const char*>(p.storage.data())) / es;
    TensorView dst = src;
    dst.data = f.storage.ptr<uint8_t>() + offset;
    dst.dtype = DType::kF8E4M3;
    const std::vector<double> x = test::to_doubles(src);  // row-major over the view
    size_t i = 0;
    for (int64_t b = 0; b < src.size(0); ++b) {
      for (int64_t t = 0; t < src.size(1); ++t) {
        for (int64_t h = 0; h < src.size(2); ++h) {
          for (int64_t e = 0; e < src.size(3); ++e, ++i) {
            static_cast<uint8_t*>(dst.data)[b * src.stride(0) + t * src.stride(1) + h * src.stride(2) + e] =
                quantize_e4m3(static_cast<float>(x[i]), scale[static_cast<size_t>(h)]);
          }
        }
      }
    }
    return dst;
  };
  f.k = quantise(p.k, ks);
  f.v = quantise(p.v, vs);
  return f;
}

}  // namespace

Paged make_paged(std::mt19937_64& rng, const PrefillCase& c) {
  const auto n = static_cast<int64_t>(c.lk.size());
  std::vector<int64_t> need(c.lk.size());
  int64_t total = 0, width = 1;
  for (size_t b = 0; b < c.lk.size(); ++b) {
    need[b] = (c.lk[b] + c.bs - 1) / c.bs;
    total += need[b];
    width = std::max(width, need[b]);
  }
  width += pick(rng, std::vector<int64_t>{0, 0, 1, 3});
  Paged p;
  p.num_blocks = std::max<int64_t>(1, total + uniform_int(rng, 0, 3));
  const int64_t block = c.bs * c.hkv * c.d;
  const int64_t stride = (c.fused_kv ? 2 * block : block) + c.kv_pad;
  const int64_t guard = 64;
  const int64_t region = guard + p.num_blocks * stride + guard;
  p.storage = Tensor::empty({c.fused_kv ? region : 2 * region}, c.dt);
  std::memset(p.storage.data(), 0xFF, static_cast<size_t>(p.storage.nbytes()));
  auto* base = static_cast<char*>(p.storage.data());
  const int64_t es = dtype_size(c.dt);
  char* kb = base + guard * es;
  char* vb = c.fused_kv ? kb + block * es : base + (region + guard) * es;
  const std::vector<int64_t> shape{p.num_blocks, c.bs, c.hkv, c.d};
  const std::vector<int64_t> strides{stride, c.hkv * c.d, c.d, 1};
  p.k = TensorView(kb, c.dt, Device::cpu(), shape, strides);
  p.v = TensorView(vb, c.dt, Device::cpu(), shape, strides);

  std::vector<int64_t> ids(static_cast<size_t>(p.num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<int64_t> table(static_cast<size_t>(std::max<int64_t>(n, 1) * width), -1);
  size_t next = 0;
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t i = 0; i < need[b]; ++i) {
      const int64_t blk = ids[next++];
      table[static_cast<size_t>(b * width + i)] = blk;
      // Fill only the slots this sequence owns.
      const int64_t used = std::min(c.bs, c.lk[b] - i * c.bs);
      for (const TensorView* cache : {&p.k, &p.v}) {
        TensorView slots(static_cast<char*>(cache->data) + blk * stride * es, c.dt, Device::cpu(),
                         {used, c.hkv, c.d}, {c.hkv * c.d, c.d, 1});
        test::fill_random(slots, rng);
      }
    }
  }
  p.table = test::int_tensor_2d(table, std::max<int64_t>(n, 1), width);
  return p;
}

uint32_t clear_faults() { return read_device_faults(kGpu, true); }

void run_case(const PrefillCase& c, std::mt19937_64& rng, const std::string& key) {
  const int64_t hq = c.hkv * c.group;
  const auto n = static_cast<int64_t>(c.lq.size());
  const std::vector<int64_t> cu_q = prefix_sums(c.lq), cu_k = prefix_sums(c.lk);
  const int64_t total_q = cu_q.back(), total_k = cu_k.back();

  // Host inputs: q (and packed k/v) with padded token strides, NaN in the gaps.
  test::RowBuffer q = test::make_rows(total_q, hq, c.d, c.dt, c.q_pad, 8);
  test::fill_random(q.view, rng);
  test::RowBuffer k, v;
  Paged pk;
  Fp8Paged pk8;
  if (c.paged) {
    pk = make_paged(rng, c);
    if (c.fp8) pk8 = quantise_paged(rng, c, pk);
  } else {
    k = test::make_rows(total_k, c.hkv, c.d, c.dt, c.kv_pad, 8);
    v = test::make_rows(total_k, c.hkv, c.d, c.dt, c.kv_pad, 16);
    test::fill_random(k.view, rng);
    test::fill_random(v.view, rng);
  }
  test::RowBuffer out = test::make_rows(total_q, hq, c.d, c.dt, c.q_pad, 24);  // poisoned
  Tensor lse_host = Tensor::empty({hq, total_q}, DType::kF32);
  std::memset(lse_host.data(), 0xFF, static_cast<size_t>(lse_host.nbytes()));
  // ALiBi slopes, positive, in the range of the usual 2^(-8 i / H) sequence.
  Tensor slopes;
  if (c.alibi != 0) {
    slopes = c.alibi == 1 ? Tensor::empty({hq}, DType::kF32)
                          : Tensor::empty({std::max<int64_t>(n, 1), hq}, DType::kF32);
    std::uniform_real_distribution<float> u(0.004f, 0.5f);
    for (int64_t i = 0; i < slopes.numel(); ++i) slopes.ptr<float>()[i] = u(rng);
  }
  // The reference of rows [a, a + rows) of a window case keeps its alignment only when keys
  // past the diagonal are invisible (causal): row windows are for causal cases.
  ASSERT_TRUE(c.windows == 0 || c.causal ||
              (c.window_left < 0 && c.window_right < 0 && c.alibi == 0))
      << "row-window checking needs a causal case";

  // GPU run.
  const Mirror mq = Mirror::of(q.storage), mo = Mirror::of(out.storage);
  Mirror mk, mv, mkv, mt;
  PrefillArgs g;
  g.q = mq.on_device(q.view);
  Tensor k_scale_dev, v_scale_dev;
  if (c.paged && c.fp8) {
    mkv = Mirror::of(pk8.storage);
    mt = Mirror::of(pk.table);
    g.k = mkv.on_device(pk8.k);
    g.v = mkv.on_device(pk8.v);
    g.block_table = mt.on_device(pk.table.view());
    if (c.fp8_scales) {
      k_scale_dev = pk8.k_scale.to(kGpu);
      v_scale_dev = pk8.v_scale.to(kGpu);
      g.k_scale = k_scale_dev;
      g.v_scale = v_scale_dev;
    }
  } else if (c.paged) {
    mkv = Mirror::of(pk.storage);
    mt = Mirror::of(pk.table);
    g.k = mkv.on_device(pk.k);
    g.v = mkv.on_device(pk.v);
    g.block_table = mt.on_device(pk.table.view());
  } else {
    mk = Mirror::of(k.storage);
    mv = Mirror::of(v.storage);
    g.k = mk.on_device(k.view);
    g.v = mv.on_device(v.view);
  }
  const Tensor cuq_d = test::int_tensor(cu_q).to(kGpu), cuk_d = test::int_tensor(cu_k).to(kGpu);
  g.cu_seqlens_q = cuq_d.view();
  g.cu_seqlens_k = cuk_d.view();
  g.max_seqlen_q = *std::max_element(c.lq.begin(), c.lq.end());
  g.max_seqlen_k = *std::max_element(c.lk.begin(), c.lk.end());
  g.softmax_scale = c.scale;
  g.causal = c.causal;
  g.window_left = c.window_left;
  g.window_right = c.window_right;
  g.softcap = c.softcap;
  const Tensor slopes_dev = c.alibi != 0 ? slopes.to(kGpu) : Tensor();
  if (c.alibi != 0) g.alibi_slopes = slopes_dev.view();
  g.out = mo.on_device(out.view);
  const Mirror ml = Mirror::of(lse_host);
  if (c.with_lse) g.lse = ml.on_device(lse_host.view());
  ASSERT_EQ(clear_faults(), 0u) << "a fault was left over from an earlier test";
  prefill_attention(g);
  ASSERT_EQ(clear_faults(), 0u) << "valid inputs raised a device fault";  // synchronizes
  const Tensor out_dl = mo.download();
  const Tensor lse_dl = ml.download();
  const TensorView got = mo.in(out_dl, out.view);
  EXPECT_TRUE(test::untouched_outside(out_dl, got)) << "bytes outside out's rows changed";

  // CPU reference, float32 on the same values.
  const Upcast q32 = Upcast::of(q.storage, c.dt);
  const Upcast kv32 = Upcast::of(c.paged ? pk.storage : k.storage, c.dt);
  const Upcast v32 = c.paged ? Upcast{} : Upcast::of(v.storage, c.dt);
  auto reference = [&](int64_t b, int64_t a, int64_t rows, test::RefAttention& ref) {
    // Rows [a, a + rows) of sequence b see exactly the keys of a sequence with those queries
    // and the first lk' keys, bottom-right aligned (lk' = a + rows + Lk - Lq when causal).
    const int64_t lkb = c.lk[b];
    const int64_t lk_sub =
        c.causal ? std::clamp<int64_t>(a + rows + lkb - c.lq[b], 0, lkb) : lkb;
    if (c.f64_reference && !c.fp8) {  // float64, on the same 16-bit values
      test::RefMask m;
      m.window_left = c.window_left;
      m.window_right = c.window_right;
      m.softcap = c.softcap;
      if (c.alibi != 0) {
        const float* sl = slopes.ptr<float>() + (c.alibi == 2 ? b * hq : 0);
        m.alibi.assign(sl, sl + hq);
      }
      const double scale = c.scale != 0.0f ? static_cast<double>(c.scale)
                                           : 1.0 / std::sqrt(static_cast<double>(c.d));
      const TensorView qv = q.view.slice0(cu_q[b] + a, cu_q[b] + a + rows);
      if (c.paged) {
        ref = test::paged_prefill_reference(qv, pk.k, pk.v, pk.table.view().slice0(b, b + 1),
                                            {0, rows}, {0, lk_sub}, scale, c.causal, m);
      } else {
        ref = test::prefill_reference(qv, k.view.slice0(cu_k[b], cu_k[b] + lk_sub),
                                      v.view.slice0(cu_k[b], cu_k[b] + lk_sub), {0, rows},
                                      {0, lk_sub}, scale, c.causal, m);
      }
      return;
    }
    PrefillArgs r;
    r.q = q32.view(q.view).slice0(cu_q[b] + a, cu_q[b] + a + rows);
    if (c.paged && c.fp8) {  // the CPU backend reads the same codes (the fp8 reference)
      r.k = pk8.k;
      r.v = pk8.v;
      r.k_scale = pk8.k_scale;
      r.v_scale = pk8.v_scale;
      r.block_table = pk.table.view().slice0(b, b + 1);
    } else if (c.paged) {
      r.k = kv32.view(pk.k);
      r.v = kv32.view(pk.v);
      r.block_table = pk.table.view().slice0(b, b + 1);
    } else {
      r.k = kv32.view(k.view).slice0(cu_k[b], cu_k[b] + lk_sub);
      r.v = v32.view(v.view).slice0(cu_k[b], cu_k[b] + lk_sub);
    }
    const Tensor cq = test::int_tensor({0, rows}), ck = test::int_tensor({0, lk_sub});
    r.cu_seqlens_q = cq.view();
    r.cu_seqlens_k = ck.view();
    r.softmax_scale = c.scale;
    r.causal = c.causal;
    r.window_left = c.window_left;
    r.window_right = c.window_right;
    r.softcap = c.softcap;
    if (c.alibi == 1) r.alibi_slopes = slopes.view();
    if (c.alibi == 2) r.alibi_slopes = slopes.view().slice0(b, b + 1);  // [1, num_heads]
    Tensor o = Tensor::empty({rows, hq, c.d}, DType::kF32);
    Tensor l = Tensor::empty({hq, rows}, DType::kF32);
    r.out = o.view();
    r.lse = l.view();
    prefill_attention(r);
    ref.out = test::to_doubles(o.view());
    ref.lse = test::to_doubles(l.view());
  };
  const TensorView got_lse_all = ml.in(lse_dl, lse_host.view());
  auto check_rows = [&](int64_t b, int64_t a, int64_t rows) {
    if (rows <= 0) return;
    test::RefAttention ref;
    reference(b, a, rows, ref);
    const int64_t row0 = cu_q[b] + a;
    TensorView lse_rows;  // undefined without lse: then only the output (and zero rows) count
    if (c.with_lse) {
      lse_rows = TensorView(got_lse_all.ptr<float>() + row0, DType::kF32, Device::cpu(),
                            {hq, rows}, {total_q, 1});
    }
    std::ostringstream label;
    label << "seq " << b << " rows [" << a << ", " << a + rows << ")";
    SCOPED_TRACE(label.str());
    test::expect_attention_close(ref, got.slice0(row0, row0 + rows), lse_rows, key,
                                 label.str());
  };
  if (c.windows == 0) {
    // One reference call per sequence keeps the CPU work equal to the GPU's.
    for (int64_t b = 0; b < n; ++b) check_rows(b, 0, c.lq[b]);
  } else {
    for (int64_t b = 0; b < n; ++b) {
      const int64_t L = c.lq[b], w = std::min<int64_t>(64, L);
      check_rows(b, 0, w);
      if (L > 2 * w) check_rows(b, L / 2 - w / 2, w);
      if (L > w) check_rows(b, L - w, w);
    }
    // Every row was written (no poison left) and is finite.
    const std::vector<double> all = test::to_doubles(got);
    const auto bad = std::count_if(all.begin(), all.end(), [](double x) { return !std::isfinite(x); });
    EXPECT_EQ(bad, 0) << "non-finite (unwritten) outputs";
  }
}

PrefillCase random_case(std::mt19937_64& rng, DType dt, int64_t d, bool causal, bool paged,
                        bool quick) {
  PrefillCase c;
  c.dt = dt;
  c.d = d;
  c.causal = causal;
  c.paged = paged;
  c.group = pick(rng, std::vector<int64_t>{1, 2, 4, 8});
  c.hkv = pick(rng, std::vector<int64_t>{1, 2});
  const int64_t batch = quick ? pick(rng, std::vector<int64_t>{1, 3})
                              : pick(rng, std::vector<int64_t>{1, 3, 17});
  const int64_t max_len = quick ? 130 : (batch == 17 ? 300 : 1000);
  for (int64_t b = 0; b < batch; ++b) {
    int64_t lq = pick(rng, std::vector<int64_t>{0, 1, 54, 97, 1000, uniform_int(rng, 1, 300)});
    lq = std::min(lq, max_len);
    int64_t lk = lq;
    switch (uniform_int(rng, 0, 3)) {
      case 0: break;                                                    // Lq == Lk
      case 1: lk = lq + pick(rng, std::vector<int64_t>{1, 54, 97, uniform_int(rng, 1, 600)});
              break;                                                    // prefix hit
      case 2: lk = uniform_int(rng, 0, lq); break;                      // fewer keys
      default: lk = pick(rng, std::vector<int64_t>{1, 54, 97, uniform_int(rng, 1, 400)});
    }
    c.lq.push_back(lq);
    c.lk.push_back(std::min<int64_t>(lk, quick ? 200 : 1600));
  }
  if (std::all_of(c.lq.begin(), c.lq.end(), [](int64_t x) { return x == 0; })) c.lq[0] = 1;
  c.bs = pick(rng, std::vector<int64_t>{1, 16, 256, uniform_int(rng, 2, 255)});
  c.q_pad = pick(rng, std::vector<int64_t>{0, 0, 8, 64});
  c.kv_pad = pick(rng, std::vector<int64_t>{0, 0, 8, 128});
  c.fused_kv = uniform_int(rng, 0, 1) == 1;
  c.with_lse = uniform_int(rng, 0, 3) != 0;
  if (uniform_int(rng, 0, 3) == 0) c.scale = static_cast<float>(0.02 + 0.2 * (rng() % 1000) / 1000.0);
  return c;
}

void add_random_features(std::mt19937_64& rng, PrefillCase& c) {
  const int64_t w = pick(rng, std::vector<int64_t>{0, 1, 15, 64, 97, uniform_int(rng, 2, 400)});
  switch (uniform_int(rng, 0, 5)) {
    case 0: c.window_left = w; break;
    case 1: c.window_left = w; c.window_right = pick(rng, std::vector<int64_t>{0, 1, 33, w}); break;
    case 2: c.window_right = w; break;
    case 3: c.window_left = 0; c.window_right = 0; break;
    case 4: c.window_left = 5000; c.window_right = 5000; break;
    default: break;
  }
  if (uniform_int(rng, 0, 2) == 0) {
    c.softcap = pick(rng, std::vector<float>{5.0f, 20.0f, 50.0f});
    if (uniform_int(rng, 0, 1) == 0) c.scale = 1.0f;
  }
  c.alibi = static_cast<int>(uniform_int(rng, 0, 2));
}

}  // namespace kvattn::test::prefill_gpu
