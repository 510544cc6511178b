// prefill_attention on the GPU against the CPU backend, on the same bf16/fp16 values (the CPU
// runs in float32 on upcast copies, so the reference carries no rounding of its own output).
// Random cases sweep dtype x head_dim x causal x packed/paged with odd batches (1, 3, 17),
// lengths 0/1/54/97/1000, prefixes (Lq < Lk), fewer keys than queries (rows that see nothing),
// GQA groups 1..8, page sizes 1/16/256/odd, random block tables, padded token and block strides,
// K and V in one allocation, NaN in every cache byte no sequence owns, poisoned outputs and
// guard checks around them. Plus a 32k context (checked on row windows), a batch of 256, bad
// block ids / lengths / cu_seqlens caught by the fault word, and the unsupported head_dim error.
// The PrefillGpuFeatures tests (issue 18) add sliding windows, softcap and ALiBi ([num_heads]
// and [num_seqs, num_heads]) over head_dim 64/80/96/128/256, with the same case discipline.
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
#include "kernels/cuda/tuning.h"
#include "kernels/gpu_test_support.h"
#include "support/case_util.h"
#include "support/reference.h"
#include "support/test_util.h"

namespace kvattn {
namespace {

using test::Mirror;
using test::pick;
using test::uniform_int;

const Device kGpu = Device::cuda(0);

struct PrefillCase {
  DType dt = DType::kBF16;
  int64_t d = 128, hkv = 2, group = 4;
  bool causal = true;
  bool paged = false;
  int64_t bs = 16;
  std::vector<int64_t> lq, lk;
  int64_t q_pad = 0, kv_pad = 0;  // extra elements per token row (multiples of 8)
  bool fused_kv = false;          // paged: K and V blocks interleaved in one allocation
  bool with_lse = true;
  float scale = 0.0f;
  int64_t windows = 0;  // 0: check every row; else check 64-row windows (long contexts)
  bool fp8 = false;     // paged: the caches quantised to float8_e4m3
  bool fp8_scales = false;  // fp8: random per-KV-head k_scale / v_scale (else 1.0)
  int64_t window_left = -1, window_right = -1;  // flash-attn's window_size
  float softcap = 0.0f;
  int alibi = 0;  // 0: none; 1: slopes [num_heads]; 2: [num_seqs, num_heads]
  bool f64_reference = false;  // the float64 reference (support/reference.h), not the CPU backend

  std::string describe() const {
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
};

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

// Paged caches with 16-byte aligned strides: [guard | blocks | guard], optionally K and V
// interleaved per block; every byte no sequence owns stays NaN. Random permuted block ids,
// -1 past each sequence's last block, sometimes extra table columns.
struct Paged {
  Tensor storage;  // dt elements
  TensorView k, v;
  Tensor table;  // int32 [num_seqs, width]
  int64_t num_blocks = 0;
};

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

uint32_t clear_faults() { return read_device_faults(kGpu, true); }

// Runs one case on the GPU and checks it against the CPU backend.
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

// Random structured case: `combo` picks dtype/head_dim/causal/paged, the rng the rest.
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

TEST(PrefillGpu, RandomSweep) {
  const bool quick = test::quick_mode();
  const int per_combo = quick ? 1 : 3;
  int index = 0;
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (int64_t d : {64, 128}) {
      for (bool causal : {true, false}) {
        for (bool paged : {false, true}) {
          for (int i = 0; i < per_combo; ++i, ++index) {
            if (!test::case_selected(index)) continue;
            const uint64_t seed = test::case_seed();
            std::mt19937_64 rng(seed);
            const PrefillCase c = random_case(rng, dt, d, causal, paged, quick);
            SCOPED_TRACE(test::case_note(index, seed, c.describe()));
            run_case(c, rng, std::string("prefill ") + (paged ? "paged " : "packed ") +
                                 std::string(dtype_name(dt)));
            if (HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

// Restores every CUDA tuning switch a test sets when it ends.
class TuningRestore {
 public:
  TuningRestore() = default;
  ~TuningRestore() { cuda::cuda_tuning() = saved_; }
  TuningRestore(const TuningRestore&) = delete;
  TuningRestore& operator=(const TuningRestore&) = delete;

 private:
  cuda::CudaTuning saved_ = cuda::cuda_tuning();
};

// The Hopper schedule's L2 sections (prefill_sm90_sections.h) cut small: a 1 MB budget gives
// most of these cases several sections, some ending mid-sequence or narrower than the rest
// (the order of the tiles changes, the results must not).
TEST(PrefillGpu, SmallL2Sections) {
  const TuningRestore restore;
  cuda::cuda_tuning().prefill_sm90_l2_mb = 1;
  const bool quick = test::quick_mode();
  int index = 0;
  for (int64_t d : {64, 128}) {
    for (bool causal : {true, false}) {
      for (bool paged : {false, true}) {
        for (int i = 0; i < (quick ? 1 : 2); ++i, ++index) {
          if (!test::case_selected(index)) continue;
          const uint64_t seed = test::case_seed();
          std::mt19937_64 rng(seed);
          PrefillCase c = random_case(rng, DType::kBF16, d, causal, paged, false);
          c.hkv = 2;
          c.group = pick(rng, std::vector<int64_t>{3, 4, 8});
          SCOPED_TRACE(test::case_note(index, seed, c.describe()));
          run_case(c, rng, "prefill small L2 sections");
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

// The consumers' tile decode in both forms (KVATTN_PREFILL_SM90_NARROW_DECODE: 32-bit, the
// default, and 64-bit), on schedules of one and of several L2 sections (1 MB budget), every
// head_dim, causal or not, packed or paged: the producer keeps the 64-bit decode, so a tile
// named differently would hang or corrupt.
TEST(PrefillGpu, NarrowAndWideTileDecode) {
  const TuningRestore restore;
  const bool quick = test::quick_mode();
  int index = 0;
  for (int l2_mb : {32, 1}) {
    cuda::cuda_tuning().prefill_sm90_l2_mb = l2_mb;
    cuda::cuda_tuning().prefill_sm90_narrow_decode = l2_mb == 32 ? 0 : 1;
    for (int64_t d : {64, 128, 256}) {
      for (bool causal : {true, false}) {
        for (int i = 0; i < (quick ? 1 : 2); ++i, ++index) {
          if (!test::case_selected(index)) continue;
          const uint64_t seed = test::case_seed();
          std::mt19937_64 rng(seed);
          PrefillCase c = random_case(rng, DType::kBF16, d, causal, index % 2 == 1, quick);
          c.f64_reference = true;
          SCOPED_TRACE(test::case_note(
              index, seed,
              "l2 " + std::to_string(l2_mb) + " MB narrow " +
                  std::to_string(cuda::cuda_tuning().prefill_sm90_narrow_decode) + " " +
                  c.describe()));
          run_case(c, rng, "prefill narrow tile decode");
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

void add_random_features(std::mt19937_64& rng, PrefillCase& c);  // below (issue 18)

// Random cases (head_dim 64, 128 and 256, causal or not, packed or paged, bf16 and fp16;
// float64 reference, random features where `features`) with the tuning field `mode` set to
// each of `modes` in turn.
void run_handover_modes(int cuda::CudaTuning::*mode, std::initializer_list<int> modes,
                        bool features, const std::string& label) {
  const bool quick = test::quick_mode();
  int index = 0;
  for (int m : modes) {
    cuda::cuda_tuning().*mode = m;
    for (int64_t d : {64, 128, 256}) {
      for (bool causal : {true, false}) {
        for (int i = 0; i < (quick ? 1 : 2); ++i, ++index) {
          if (!test::case_selected(index)) continue;
          const uint64_t seed = test::case_seed();
          std::mt19937_64 rng(seed);
          const DType dt = index % 3 == 2 ? DType::kF16 : DType::kBF16;
          PrefillCase c = random_case(rng, dt, d, causal, /*paged=*/index % 2 == 1, quick);
          if (features) add_random_features(rng, c);
          c.f64_reference = true;
          SCOPED_TRACE(test::case_note(index, seed,
                                       label + " " + std::to_string(m) + " " + c.describe()));
          run_case(c, rng, "prefill " + label);
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
}

// The plain kernels with the tile handover (CudaTuning::prefill_sm90_handover) never, always
// and where key loops are short (the default). (Run under racecheck and memcheck: the handed
// tiles come by the async proxy into slots written once, prefill_sm90_tile_handover.cuh.)
TEST(PrefillGpu, TileHandoverOnAndOff) {
  const TuningRestore restore;
  run_handover_modes(&cuda::CudaTuning::prefill_sm90_handover, {0, 1, 2}, false,
                     "tile handover");
}

// The dynamic tile schedule (CudaTuning::prefill_sm90_dynamic 1 and 2: the producer claims
// tiles from a counter, for_each_claimed_tile): batches of 8-32 heads over 4-12 sequences of
// nearly one length (most row blocks full), so that the tiles outnumber a persistent grid of
// 132 CTAs several times over; causal (64-row windows, every row written) and not (every
// row); packed and paged (pages of 128 and 256 keys take one producer warp and so the dynamic
// schedule; 16-key pages take four and stay static); head_dim 64, 128 and 256; random window /
// softcap / ALiBi on every other pair of cases. The cases run
// one after another on one stream, each claiming from the counter the one before reset.
TEST(PrefillGpu, DynamicTileSchedule) {
  const TuningRestore restore;
  const bool quick = test::quick_mode();
  int index = 0;
  // Every launch of more tiles than the grid claims (the default asks for 8 rounds of it).
  cuda::cuda_tuning().prefill_sm90_dynamic_min_rounds = 1;
  for (int mode : {1, 2}) {
    cuda::cuda_tuning().prefill_sm90_dynamic = mode;
    for (int64_t d : {64, 128, 256}) {
      for (bool causal : {true, false}) {
        for (int i = 0; i < (quick ? 1 : 2); ++i, ++index) {
          if (!test::case_selected(index)) continue;
          const uint64_t seed = test::case_seed();
          std::mt19937_64 rng(seed);
          PrefillCase c;
          c.dt = index % 3 == 2 ? DType::kF16 : DType::kBF16;
          c.d = d;
          c.causal = causal;
          c.paged = index % 2 == 1;
          c.bs = pick(rng, std::vector<int64_t>{128, 256, 16});
          c.hkv = pick(rng, std::vector<int64_t>{2, 4});
          c.group = pick(rng, std::vector<int64_t>{4, 3, 8});
          const int64_t batch = uniform_int(rng, 4, quick ? 6 : 12);
          const int64_t max_len = causal ? (quick ? 1100 : 2200) : 700;
          for (int64_t b = 0; b < batch; ++b) {
            const int64_t lq = uniform_int(rng, max_len * 3 / 4, max_len);
            c.lq.push_back(lq);
            c.lk.push_back(lq + pick(rng, std::vector<int64_t>{0, 0, uniform_int(rng, 1, 300)}));
          }
          if ((index / 2) % 2 == 1) add_random_features(rng, c);  // the kMods kernels
          if (causal) c.windows = 3;
          SCOPED_TRACE(test::case_note(index, seed,
                                       "dynamic " + std::to_string(mode) + " " + c.describe()));
          run_case(c, rng, "prefill dynamic schedule");
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

// Paged K/V with 1, 2 and 3 producer warps (the default, 4, runs in every other paged test)
// issuing a tile's page pieces
// (KVATTN_PREFILL_SM90_PRODUCER_WARPS; head_dim 128 takes it, 64 and 256 keep one warp): pages
// of 8, 16, 32, 48 and 64 keys (16, 8, 4, 8 and 2 pieces a tile), causal or not, with window /
// softcap / ALiBi on every other case; float64 reference.
TEST(PrefillGpu, PagedProducerWarps) {
  const TuningRestore restore;
  const bool quick = test::quick_mode();
  const std::vector<int64_t> pages = {8, 16, 32, 48, 64};
  int index = 0;
  for (int warps = 1; warps <= 3; ++warps) {
    cuda::cuda_tuning().prefill_sm90_producer_warps = warps;
    for (int64_t d : {128, 64, 256}) {
      for (bool causal : {true, false}) {
        for (int i = 0; i < (quick ? 1 : 2); ++i, ++index) {
          if (!test::case_selected(index)) continue;
          const uint64_t seed = test::case_seed();
          std::mt19937_64 rng(seed);
          PrefillCase c = random_case(rng, DType::kBF16, d, causal, /*paged=*/true, quick);
          c.f64_reference = true;
          c.bs = pages[static_cast<size_t>(index) % pages.size()];
          if (index % 2 == 1) {
            c.window_left = pick(rng, std::vector<int64_t>{15, 129, 1000});
            c.softcap = 30.0f;
            c.alibi = 1;
          }
          SCOPED_TRACE(test::case_note(index, seed, "producer warps " + std::to_string(warps) +
                                                        " " + c.describe()));
          run_case(c, rng, "prefill paged producer warps");
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

// Paged prefill over float8_e4m3 caches: dtype x head_dims x causal, `per` cases each, with and
// without scales, against the CPU backend on the same codes; with `features`, a random window /
// softcap / ALiBi on each (add_random_features).
void fp8_paged_sweep(const std::vector<int64_t>& head_dims, int per, bool features,
                     const std::string& what) {
  const bool quick = test::quick_mode();
  int index = 0;
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (int64_t d : head_dims) {
      for (bool causal : {true, false}) {
        for (int i = 0; i < per; ++i, ++index) {
          if (!test::case_selected(index)) continue;
          const uint64_t seed = test::case_seed();
          std::mt19937_64 rng(seed);
          PrefillCase c = random_case(rng, dt, d, causal, /*paged=*/true, quick);
          if (features) add_random_features(rng, c);
          c.fp8 = true;
          c.fp8_scales = index % 2 == 0;
          SCOPED_TRACE(test::case_note(index, seed, c.describe()));
          run_case(c, rng, what + " " + std::string(dtype_name(dt)));
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
}

// The prefix-hit and chunked-prefill path of an fp8 engine.
TEST(PrefillGpu, Fp8PagedSweep) {
  fp8_paged_sweep({64, 128}, test::quick_mode() ? 1 : 3, false, "prefill paged fp8 cache");
}

// Hand-picked edge cases: empty sequences, decode-like single queries, rows that see no key,
// no keys at all, page size 1 with a long prefix, every GQA group.
TEST(PrefillGpu, EdgeCases) {
  struct Spec {
    std::vector<int64_t> lq, lk;
    bool causal, paged;
    int64_t bs, group;
  };
  const std::vector<Spec> specs = {
      {{0, 54, 97}, {10, 54, 20}, true, false, 16, 4},    // Lq=0; Lk<Lq: rows see nothing
      {{0, 54, 97}, {10, 54, 20}, true, true, 1, 2},
      {{1, 1, 1}, {1, 1000, 97}, true, true, 16, 8},      // decode-like
      {{5, 3}, {0, 0}, false, false, 16, 1},              // no keys at all
      {{5, 3}, {0, 7}, true, true, 256, 4},
      {{97}, {1000}, true, true, 1, 8},                    // page 1, long prefix
      {{128, 129, 127}, {128, 129, 127}, true, false, 16, 2},  // tile edges
      {{48, 49, 47, 33}, {48, 49, 47, 31}, false, true, 48, 1},
  };
  int index = 0;
  for (const Spec& s : specs) {
    for (DType dt : {DType::kBF16, DType::kF16}) {
      for (int64_t d : {64, 128}) {
        const uint64_t seed = test::case_seed();
        std::mt19937_64 rng(seed);
        PrefillCase c;
        c.dt = dt;
        c.d = d;
        c.lq = s.lq;
        c.lk = s.lk;
        c.causal = s.causal;
        c.paged = s.paged;
        c.bs = s.bs;
        c.group = s.group;
        c.hkv = 2;
        SCOPED_TRACE(test::case_note(index++, seed, c.describe()));
        run_case(c, rng, "prefill edge");
        if (HasFatalFailure()) return;
      }
    }
  }
}

// One tile-edge case: every length of `lengths` as a sequence (Lk = Lq, or with a prefix of
// one of `prefixes` keys when layout == 2), packed (layout 0) or paged on pages[index % size];
// GQA group and KV heads cycle with the case index.
PrefillCase tile_edge_case(std::mt19937_64& rng, DType dt, int64_t d, bool causal, int layout,
                           int index, const std::vector<int64_t>& lengths,
                           const std::vector<int64_t>& pages,
                           const std::vector<int64_t>& prefixes) {
  PrefillCase c;
  c.dt = dt;
  c.d = d;
  c.causal = causal;
  c.paged = layout > 0;
  c.bs = pages[static_cast<size_t>(index) % pages.size()];
  c.group = 1 + index % 8;
  c.hkv = 1 + index % 2;
  c.lq = lengths;
  c.lk = lengths;
  if (layout == 2) {
    for (int64_t& lk : c.lk) lk += pick(rng, prefixes);
  }
  return c;
}

// The tile edges of the Hopper kernel (128 query rows x 128 keys; 64 rows per consumer
// warpgroup) and of the sm_80 one: lengths 1, 63, 64, 65, 127, 128, 129 in one batch, with
// Lk = Lq and with a prefix; every page size class of the TMA path (whole pages per tile: 8,
// 16; whole tiles per page: 128, 256; neither, boxes of gcd(page, 128) keys: 48) and of the
// fallback (1); GQA groups 1..8; both head_dims and dtypes, causal and not. Then 4097 rows
// over a 4097 + 300 key prefix, checked on row windows.
TEST(PrefillGpu, TileEdges) {
  const std::vector<int64_t> lengths = {1, 63, 64, 65, 127, 128, 129};
  const std::vector<int64_t> pages = {8, 16, 128, 256, 1, 48};
  int index = 0;
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (int64_t d : {64, 128}) {
      for (bool causal : {true, false}) {
        for (int layout = 0; layout < 3; ++layout) {  // packed, paged, paged with a prefix
          const uint64_t seed = test::case_seed();
          std::mt19937_64 rng(seed);
          const PrefillCase c = tile_edge_case(rng, dt, d, causal, layout, index, lengths, pages,
                                               {1, 64, 127, 129, 300});
          SCOPED_TRACE(test::case_note(index++, seed, c.describe()));
          run_case(c, rng, "prefill tile edges");
          if (HasFatalFailure()) return;
        }
      }
    }
  }
  for (int64_t bs : {16, 256, 48}) {
    const uint64_t seed = test::case_seed();
    std::mt19937_64 rng(seed);
    PrefillCase c;
    c.dt = DType::kBF16;
    c.d = 128;
    c.hkv = 1;
    c.group = 3;
    c.paged = true;
    c.bs = bs;
    c.lq = {4097, 129};
    c.lk = {4097 + 300, 129};
    c.windows = 3;
    SCOPED_TRACE(test::case_note(index++, seed, c.describe()));
    run_case(c, rng, "prefill tile edges long");
    if (HasFatalFailure()) return;
  }
}

// The same at head_dim 256, whose Hopper tile is 128 rows x 80 keys: lengths around both
// (79, 80, 81, 159, 160, 161 beside 1, 127, 128, 129), pages whose boxes are gcd(page, 80)
// keys (16, 256: 16; 80, 160: whole tiles; 24: 8; 48: 16) and the fallback (1, 12: gcd 4),
// GQA 1..8, both dtypes, causal and not, packed and paged, with and without a prefix.
TEST(PrefillGpu, TileEdgesHeadDim256) {
  const std::vector<int64_t> lengths = {1, 79, 80, 81, 127, 128, 129, 159, 160, 161};
  const std::vector<int64_t> pages = {16, 256, 80, 24, 48, 160, 1, 12};
  int index = 0;
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (bool causal : {true, false}) {
      for (int layout = 0; layout < 3; ++layout) {  // packed, paged, paged with a prefix
        for (int rep = 0; rep < (layout == 0 ? 1 : 2); ++rep) {
          const uint64_t seed = test::case_seed();
          std::mt19937_64 rng(seed);
          const PrefillCase c = tile_edge_case(rng, dt, 256, causal, layout, index, lengths,
                                               pages, {1, 79, 80, 81, 300});
          SCOPED_TRACE(test::case_note(index++, seed, c.describe()));
          run_case(c, rng, "prefill tile edges d256");
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

// A 32k-token causal prefill (paged, page 16) and a 4k-over-32k prefix hit (packed), checked
// on 64-row windows at the start, middle and end (every row must still be written).
TEST(PrefillGpu, LongContext32k) {
  if (test::quick_mode()) GTEST_SKIP() << "quick mode";
  for (bool paged : {true, false}) {
    const uint64_t seed = test::case_seed();
    std::mt19937_64 rng(seed);
    PrefillCase c;
    c.dt = DType::kBF16;
    c.d = 128;
    c.hkv = 1;
    c.group = 4;
    c.paged = paged;
    c.bs = 16;
    c.lq = {paged ? 32768 : 4096};
    c.lk = {32768};
    c.windows = 3;
    SCOPED_TRACE(test::case_note(0, seed, c.describe()));
    run_case(c, rng, "prefill long");
    if (HasFatalFailure()) return;
  }
}

TEST(PrefillGpu, Batch256) {
  const uint64_t seed = test::case_seed();
  std::mt19937_64 rng(seed);
  PrefillCase c;
  c.dt = DType::kBF16;
  c.d = 128;
  c.hkv = 2;
  c.group = 4;
  c.paged = true;
  c.bs = 16;
  const int64_t batch = test::quick_mode() ? 32 : 256;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t lq = uniform_int(rng, 0, 64);
    c.lq.push_back(lq);
    c.lk.push_back(lq + uniform_int(rng, 0, 96));
  }
  c.lq[0] = std::max<int64_t>(c.lq[0], 1);
  SCOPED_TRACE(test::case_note(0, seed, c.describe()));
  run_case(c, rng, "prefill batch256");
}

// ---- bad index values: skipped, reported, never out of bounds ----

struct FaultSetup {
  PrefillCase c;
  Paged pk;
  test::RowBuffer q, out;
  Mirror mq, mo, mkv, mt;
  Tensor cuq, cuk;
  PrefillArgs args;
};

void build_fault_setup(FaultSetup& f, std::mt19937_64& rng, const std::vector<int64_t>& table_edit,
                       std::vector<int64_t> cu_q, std::vector<int64_t> cu_k) {
  PrefillCase& c = f.c;
  c.paged = true;
  c.bs = 16;
  c.lq = {64, 64, 64};
  c.lk = {200, 200, 200};
  f.pk = make_paged(rng, c);
  auto* t = f.pk.table.ptr<int32_t>();
  const int64_t width = f.pk.table.size(1);
  for (size_t i = 0; i + 3 <= table_edit.size(); i += 3) {
    t[table_edit[i] * width + table_edit[i + 1]] = static_cast<int32_t>(table_edit[i + 2]);
  }
  const int64_t hq = c.hkv * c.group;
  f.q = test::make_rows(192, hq, c.d, c.dt, 0, 8);
  test::fill_random(f.q.view, rng);
  f.out = test::make_rows(192, hq, c.d, c.dt, 8, 64);
  f.mq = Mirror::of(f.q.storage);
  f.mo = Mirror::of(f.out.storage);
  f.mkv = Mirror::of(f.pk.storage);
  f.mt = Mirror::of(f.pk.table);
  f.cuq = test::int_tensor(cu_q).to(kGpu);
  f.cuk = test::int_tensor(cu_k).to(kGpu);
  f.args.q = f.mq.on_device(f.q.view);
  f.args.k = f.mkv.on_device(f.pk.k);
  f.args.v = f.mkv.on_device(f.pk.v);
  f.args.block_table = f.mt.on_device(f.pk.table.view());
  f.args.cu_seqlens_q = f.cuq.view();
  f.args.cu_seqlens_k = f.cuk.view();
  f.args.max_seqlen_q = 64;
  f.args.max_seqlen_k = 200;
  f.args.out = f.mo.on_device(f.out.view);
}

TEST(PrefillGpu, BadBlockIdsAreSkippedAndReported) {
  const uint64_t seed = test::case_seed();
  std::mt19937_64 rng(seed);
  SCOPED_TRACE(test::case_note(0, seed, "bad block ids"));
  FaultSetup f;
  // Sequence 1, block 2: far past the cache; sequence 2, block 0: negative.
  build_fault_setup(f, rng, {1, 2, (1 << 28), 2, 0, -5}, {0, 64, 128, 192}, {0, 200, 400, 600});
  ASSERT_EQ(clear_faults(), 0u);
  prefill_attention(f.args);
  EXPECT_EQ(clear_faults(), static_cast<uint32_t>(kFaultBlockOutOfRange));
  const Tensor dl = f.mo.download();
  const TensorView got = f.mo.in(dl, f.out.view);
  EXPECT_TRUE(test::untouched_outside(dl, got)) << "bytes outside out's rows changed";
  // Sequence 0 is intact and every row is finite (bad rows read as zeros, never as NaN guard
  // bytes or foreign memory).
  const std::vector<double> all = test::to_doubles(got);
  EXPECT_EQ(std::count_if(all.begin(), all.end(), [](double x) { return !std::isfinite(x); }), 0);
}

TEST(PrefillGpu, BadLengthsAreSkippedAndReported) {
  const uint64_t seed = test::case_seed();
  std::mt19937_64 rng(seed);
  SCOPED_TRACE(test::case_note(0, seed, "bad lengths"));
  {
    FaultSetup f;  // sequence 1 claims more keys than its table row holds
    build_fault_setup(f, rng, {}, {0, 64, 128, 192}, {0, 200, 200 + 100000, 100200 + 200});
    ASSERT_EQ(clear_faults(), 0u);
    prefill_attention(f.args);
    EXPECT_EQ(clear_faults(), static_cast<uint32_t>(kFaultSeqlenOutOfRange));
  }
  {
    FaultSetup f;  // cu_seqlens_q decreasing, then past total_q
    build_fault_setup(f, rng, {}, {0, 64, 32, 100000}, {0, 200, 400, 600});
    ASSERT_EQ(clear_faults(), 0u);
    prefill_attention(f.args);
    EXPECT_EQ(clear_faults(), static_cast<uint32_t>(kFaultBadCuSeqlens));
  }
  {
    // Packed keys: cu_seqlens_k runs past k's rows.
    FaultSetup f;
    build_fault_setup(f, rng, {}, {0, 64, 128, 192}, {0, 200, 400, 600});
    test::RowBuffer k = test::make_rows(300, f.c.hkv, f.c.d, f.c.dt, 0, 8);
    test::fill_random(k.view, rng);
    const Mirror mk = Mirror::of(k.storage);
    f.args.block_table = TensorView();
    f.args.k = mk.on_device(k.view);
    f.args.v = mk.on_device(k.view);
    ASSERT_EQ(clear_faults(), 0u);
    prefill_attention(f.args);
    EXPECT_EQ(clear_faults(), static_cast<uint32_t>(kFaultBadCuSeqlens));
  }
}

// head_dim 80/96/256 run since issue 18; 192 is still refused.
TEST(PrefillGpu, UnsupportedHeadDimIsAReadableError) {
  Tensor q = Tensor::zeros({4, 2, 192}, DType::kBF16, kGpu);
  Tensor k = Tensor::zeros({4, 2, 192}, DType::kBF16, kGpu);
  Tensor out = Tensor::zeros({4, 2, 192}, DType::kBF16, kGpu);
  const Tensor cu = test::int_tensor({0, 4}).to(kGpu);
  PrefillArgs a;
  a.q = q.view();
  a.k = k.view();
  a.v = k.view();
  a.cu_seqlens_q = cu.view();
  a.cu_seqlens_k = cu.view();
  a.max_seqlen_q = 4;
  a.max_seqlen_k = 4;
  a.out = out.view();
  try {
    prefill_attention(a);
    FAIL() << "head_dim 192 must be rejected on the GPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unsupported head_dim: 192"), std::string::npos)
        << e.what();
  }
}

// ---- issue 18: window, softcap, ALiBi, head_dim 80/96/256 (the extended kernels) ----

const std::vector<int64_t> kFeatureHeadDims = {64, 80, 96, 128, 256};

// A random window / softcap / ALiBi on top of a random_case: window kinds left only, both
// sides, right only, (0, 0), wider than every sequence, none; softcap sometimes with scale 1
// (large scores, so the cap bites); ALiBi off, [num_heads] or [num_seqs, num_heads].
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

TEST(PrefillGpuFeatures, RandomSweep) {
  const bool quick = test::quick_mode();
  const int per_combo = quick ? 1 : 2;
  int index = 0;
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (int64_t d : kFeatureHeadDims) {
      for (bool causal : {true, false}) {
        for (bool paged : {false, true}) {
          for (int i = 0; i < per_combo; ++i, ++index) {
            if (!test::case_selected(index)) continue;
            const uint64_t seed = test::case_seed();
            std::mt19937_64 rng(seed);
            PrefillCase c = random_case(rng, dt, d, causal, paged, quick);
            add_random_features(rng, c);
            SCOPED_TRACE(test::case_note(index, seed, c.describe()));
            run_case(c, rng, std::string("prefill features ") + (paged ? "paged " : "packed ") +
                                 std::string(dtype_name(dt)));
            if (HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

// The window / softcap / ALiBi kernels with the tile handover
// (CudaTuning::prefill_sm90_mods_handover; default 3, mode 2 at head_dim 128 only) always, where
// key loops are short, and by the default rule, on random features (run under racecheck and
// memcheck too).
TEST(PrefillGpuFeatures, TileHandover) {
  const TuningRestore restore;
  run_handover_modes(&cuda::CudaTuning::prefill_sm90_mods_handover, {1, 2, 3}, true,
                     "features tile handover");
}

// Windows around the tile sizes of the extended kernels (64 or 128 query rows, 32 or 64 keys)
// over lengths at the tile edges, packed and paged with pages 1/16/256, each head_dim, causal
// or not, GQA 1..8; every third case with softcap and ALiBi too.
TEST(PrefillGpuFeatures, WindowTileEdges) {
  const std::vector<int64_t> lengths = {1, 31, 32, 33, 63, 64, 65, 127, 128, 129, 300};
  const std::vector<int64_t> windows = {0, 1, 31, 32, 33, 63, 64, 65, 127, 128, 129, 1000};
  const std::vector<int64_t> pages = {1, 16, 256};
  const bool quick = test::quick_mode();
  int index = 0;
  for (int64_t d : kFeatureHeadDims) {
    for (bool causal : {true, false}) {
      for (int layout = 0; layout < 3; ++layout) {  // packed, paged, paged with a prefix
        for (int rep = 0; rep < (quick ? 1 : 2); ++rep, ++index) {
          if (!test::case_selected(index)) continue;
          const uint64_t seed = test::case_seed();
          std::mt19937_64 rng(seed);
          PrefillCase c;
          c.dt = index % 2 == 0 ? DType::kBF16 : DType::kF16;
          c.d = d;
          c.causal = causal;
          c.paged = layout > 0;
          c.bs = pages[static_cast<size_t>(index) % pages.size()];
          c.group = 1 + index % 8;
          c.hkv = 1 + index % 2;
          c.lq = lengths;
          c.lk = lengths;
          if (layout == 2) {
            for (int64_t& lk : c.lk) lk += pick(rng, std::vector<int64_t>{1, 32, 64, 129, 300});
          }
          c.window_left = pick(rng, windows);
          if (!causal) c.window_right = pick(rng, std::vector<int64_t>{-1, 0, 1, 32, 65});
          if (index % 3 == 0) {
            c.softcap = 30.0f;
            c.alibi = 1 + index % 2;
          }
          SCOPED_TRACE(test::case_note(index, seed, c.describe()));
          run_case(c, rng, "prefill features tile edges");
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

// ---- both kernels of a feature call: the Hopper kernel (kMods) and the sm_80 ext kernel ----

// Sets CudaTuning::prefill_sm90 for the scope (1: the Hopper kernel wherever
// prefill_sm90_eligible, 0: the sm_80 kernels everywhere), restoring the tuning after.
class UsePrefillPath {
 public:
  explicit UsePrefillPath(bool sm90) { cuda::cuda_tuning().prefill_sm90 = sm90 ? 1 : 0; }

 private:
  TuningRestore restore_;  // constructed (saving the switches) before the body sets one
};

// The features at the Hopper kernel's tile edges (128 or 192 query rows, 64 per consumer
// warpgroup; 128 keys, 80 at head_dim 256), once on each kernel (sm90: the Hopper kernel's
// kMods form on an H100/H200, the ext kernel elsewhere; sm80: the ext kernel), against the
// float64 reference: lengths 1, 63, 64, 65, 79, 80, 81, 127, 128, 129 in one batch with Lk = Lq, a prefix,
// or fewer keys (rows that see nothing); packed and pages 16 and 256; windows smaller and
// larger than a key tile, both sides when not causal; GQA 1..8; head_dim 64, 128 and 256;
// bf16 and fp16. Features by index: window; window + softcap (scale 1 every other time, so the
// cap bites); ALiBi [H] alone; window + softcap + ALiBi [B,H]; none (the plain kernels, head_dim
// 256 included).
TEST(PrefillGpuFeatures, BothPathsTileEdges) {
  const std::vector<int64_t> lengths = {1, 63, 64, 65, 79, 80, 81, 127, 128, 129};
  const std::vector<int64_t> windows = {0,   1,   15,  63,  64,  65,  79,  80, 81,
                                        127, 128, 129, 191, 192, 193, 300, 5000};
  const bool quick = test::quick_mode();
  int index = 0;
  for (bool sm90 : {true, false}) {
    const UsePrefillPath path(sm90);
    for (int64_t d : {64, 128, 256}) {
      for (bool causal : {true, false}) {
        // packed, page 16, page 256, page 16 + prefix, packed + prefix, page 256 + fewer keys
        for (int layout = 0; layout < 6; ++layout, ++index) {
          if (quick && layout != 1 && layout != 4 && layout != 5) continue;
          if (!test::case_selected(index)) continue;
          const uint64_t seed = test::case_seed();
          std::mt19937_64 rng(seed);
          PrefillCase c;
          c.f64_reference = true;
          c.dt = index % 2 == 0 ? DType::kBF16 : DType::kF16;
          c.d = d;
          c.causal = causal;
          c.paged = layout == 1 || layout == 2 || layout == 3 || layout == 5;
          c.bs = layout == 2 || layout == 5 ? 256 : 16;
          c.group = 1 + index % 8;
          c.hkv = c.group > 4 ? 1 : 1 + (index / 8) % 2;
          c.lq = lengths;
          c.lk = lengths;
          if (layout == 3 || layout == 4) {
            for (int64_t& lk : c.lk) lk += pick(rng, std::vector<int64_t>{1, 63, 128, 129, 300});
          }
          if (layout == 5) {
            for (int64_t& lk : c.lk) lk = std::max<int64_t>(0, lk - pick(rng, std::vector<int64_t>{1, 64, 65}));
          }
          const int kind = index % 5;
          if (kind < 2 || kind == 3) {
            c.window_left = pick(rng, windows);
            if (!causal) c.window_right = pick(rng, std::vector<int64_t>{-1, 0, 1, 65, 129, 300});
          }
          if (kind == 1 || kind == 3) {
            c.softcap = kind == 1 ? 5.0f : 30.0f;
            if (kind == 1 && (index / 4) % 2 == 0) c.scale = 1.0f;
          }
          if (kind == 2) c.alibi = 1;
          if (kind == 3) c.alibi = 2;
          SCOPED_TRACE(test::case_note(index, seed, std::string(sm90 ? "sm90 " : "sm80 ") +
                                                        c.describe()));
          run_case(c, rng, std::string("prefill features both paths ") +
                               (sm90 ? "sm90" : "sm80"));
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

// 4097 query rows (one past a multiple of the 128 and 192-row tiles) over 4097 or 4097 + 300
// keys, causal, with windows of 100, 1000 and 4096 keys, softcap and ALiBi, packed and pages 16
// and 256, head_dim 64, 128 and 256, bf16 or fp16, on each kernel; float64 reference on 64-row
// windows. Quick mode: paged only.
TEST(PrefillGpuFeatures, BothPathsLong) {
  const bool quick = test::quick_mode();
  int index = 0;
  for (bool sm90 : {true, false}) {
    const UsePrefillPath path(sm90);
    for (int layout = 0; layout < 3; ++layout) {  // packed, page 16, page 256
      for (int64_t d : {64, 128, 256}) {
        const int i = index++;
        if (quick && layout == 0) continue;
        if (!test::case_selected(i)) continue;
        const uint64_t seed = test::case_seed();
        std::mt19937_64 rng(seed);
        PrefillCase c;
        c.f64_reference = true;
        c.dt = i % 2 == 0 ? DType::kBF16 : DType::kF16;
        c.d = d;
        c.hkv = 1;
        c.group = 1 + i % 8;
        c.paged = layout > 0;
        c.bs = layout == 2 ? 256 : 16;
        c.lq = {4097, 129};
        c.lk = {4097 + (i % 4 < 2 ? 0 : 300), 129};
        const int mix = (i + i / 3) % 3;  // varies with head_dim and layout
        c.window_left = std::vector<int64_t>{100, 1000, 4096}[static_cast<size_t>(mix)];
        c.softcap = i % 2 == 0 ? 30.0f : 0.0f;
        c.alibi = mix == 1 ? 0 : 1 + i % 2;
        c.windows = 3;
        SCOPED_TRACE(test::case_note(i, seed, std::string(sm90 ? "sm90 " : "sm80 ") +
                                                  c.describe()));
        run_case(c, rng, std::string("prefill features both paths long ") +
                             (sm90 ? "sm90" : "sm80"));
        if (HasFatalFailure()) return;
      }
    }
  }
}

// Softcap and ALiBi alone and together, without a window, causal and not: both slope
// shapes, every head_dim, packed and paged, a batch of 3 and of 17.
TEST(PrefillGpuFeatures, SoftcapAndAlibi) {
  const bool quick = test::quick_mode();
  int index = 0;
  for (int64_t d : kFeatureHeadDims) {
    for (int kind = 0; kind < 4; ++kind) {  // softcap, alibi [H], alibi [B,H], both
      if (quick && kind % 2 == 1) continue;
      if (!test::case_selected(index)) {
        ++index;
        continue;
      }
      const uint64_t seed = test::case_seed();
      std::mt19937_64 rng(seed);
      PrefillCase c = random_case(rng, kind % 2 == 0 ? DType::kBF16 : DType::kF16, d,
                                  /*causal=*/kind != 1, /*paged=*/kind >= 2, quick);
      c.softcap = kind == 0 || kind == 3 ? 10.0f : 0.0f;
      if (kind == 0) c.scale = 1.0f;  // raw scores in the tens: the cap matters
      c.alibi = kind == 0 ? 0 : (kind == 1 ? 1 : 2);
      if (kind == 3) c.alibi = 1 + static_cast<int>(index % 2);
      SCOPED_TRACE(test::case_note(index++, seed, c.describe()));
      run_case(c, rng, "prefill softcap alibi");
      if (HasFatalFailure()) return;
    }
  }
}

// Issue 18's shape: a 4096-key window over a 32k causal prefill (paged, page 16, and a 4k
// prefix-hit chunk over 32k packed keys), head_dim 128 and 256, checked on 64-row windows.
// Quick mode: the packed head_dim 128 case only (a 4k chunk; the 32k-row ones are slow).
TEST(PrefillGpuFeatures, LongWindow32k) {
  const bool quick = test::quick_mode();
  int index = 0;
  for (int64_t d : {128, 256}) {
    for (bool paged : {true, false}) {
      if (quick && (d != 128 || paged)) continue;
      const uint64_t seed = test::case_seed();
      std::mt19937_64 rng(seed);
      PrefillCase c;
      c.dt = DType::kBF16;
      c.d = d;
      c.hkv = 1;
      c.group = 4;
      c.paged = paged;
      c.bs = 16;
      c.lq = {paged ? 32768 : 4096};
      c.lk = {32768};
      c.window_left = 4095;
      c.softcap = d == 256 ? 50.0f : 0.0f;
      c.windows = 3;
      SCOPED_TRACE(test::case_note(index++, seed, c.describe()));
      run_case(c, rng, "prefill long window");
      if (HasFatalFailure()) return;
    }
  }
}

// Key tiles entirely left of every row's window are never read: their block-table entries
// are bad ids, which would raise kFaultBlockOutOfRange if they were looked up.
TEST(PrefillGpuFeatures, WindowSkipsTilesBeforeIt) {
  const uint64_t seed = test::case_seed();
  std::mt19937_64 rng(seed);
  SCOPED_TRACE(test::case_note(0, seed, "window skips tiles"));
  for (int64_t d : {128, 256}) {
    FaultSetup f;
    f.c.d = d;
    // Every sequence: 64 queries over 200 keys, so rows see keys >= 136 - 40 = 96 at most
    // 40 back; blocks 0..4 (keys 0..79) hold bad ids.
    std::vector<int64_t> edits;
    for (int64_t b = 0; b < 3; ++b) {
      for (int64_t blk = 0; blk < 5; ++blk) edits.insert(edits.end(), {b, blk, blk % 2 ? -3 : (1 << 28)});
    }
    build_fault_setup(f, rng, edits, {0, 64, 128, 192}, {0, 200, 400, 600});
    f.args.window_left = 40;
    f.args.softcap = 30.0f;
    ASSERT_EQ(clear_faults(), 0u);
    prefill_attention(f.args);
    EXPECT_EQ(clear_faults(), 0u) << "a key tile left of the window was read";
    const Tensor dl = f.mo.download();
    const TensorView got = f.mo.in(dl, f.out.view);
    EXPECT_TRUE(test::untouched_outside(dl, got)) << "bytes outside out's rows changed";
    const std::vector<double> all = test::to_doubles(got);
    EXPECT_EQ(std::count_if(all.begin(), all.end(), [](double x) { return !std::isfinite(x); }), 0);
    // Without the window the same table is read and reported.
    f.args.window_left = -1;
    prefill_attention(f.args);
    EXPECT_EQ(clear_faults(), static_cast<uint32_t>(kFaultBlockOutOfRange));
  }
}

// Paged float8_e4m3 caches with window / softcap / ALiBi and head_dim 64-256 (the extended
// kernel over fp8 codes; CudaTuning::fp8_extended_forms), with and without scales (k_scale
// folds into the modifiers' units: ScoreMods::fold_key_scale), against the CPU backend on the
// same codes.
TEST(PrefillGpuFeatures, Fp8PagedSweep) {
  const TuningRestore restore;
  cuda::cuda_tuning().fp8_extended_forms = 1;
  fp8_paged_sweep(kFeatureHeadDims, test::quick_mode() ? 1 : 2, true,
                  "prefill features paged fp8");
}

// Until CudaTuning::fp8_extended_forms is on, float8_e4m3 caches with a window (or softcap,
// ALiBi, head_dim 80/96/256) are refused, by name, before any launch.
TEST(PrefillGpuFeatures, Fp8WithFeaturesIsAReadableErrorWhenOff) {
  const TuningRestore restore;
  cuda::cuda_tuning().fp8_extended_forms = 0;
  const uint64_t seed = test::case_seed();
  std::mt19937_64 rng(seed);
  FaultSetup f;
  build_fault_setup(f, rng, {}, {0, 64, 128, 192}, {0, 200, 400, 600});
  Tensor cache8 = Tensor::zeros({f.pk.storage.nbytes() / 2}, DType::kU8, kGpu);
  TensorView k8 = f.args.k, v8 = f.args.v;
  for (TensorView* t : {&k8, &v8}) {
    const int64_t off = static_cast<const char*>(t->data) - static_cast<const char*>(f.mkv.device.data());
    t->data = static_cast<char*>(cache8.data()) + off / 2;
    t->dtype = DType::kF8E4M3;
  }
  f.args.k = k8;
  f.args.v = v8;
  f.args.window_left = 16;
  try {
    prefill_attention(f.args);
    FAIL() << "fp8 caches with a window must be refused on the GPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("float8_e4m3 caches together with window_size"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(clear_faults(), 0u);
}

}  // namespace
}  // namespace kvattn

KVATTN_GPU_TEST_MAIN()
