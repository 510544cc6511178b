// store_kv on the GPU against the byte-copy reference, bit-exact over whole allocations: the
// caches, the gaps between blocks (block stride > one block) and guard regions on both sides
// must end up byte-identical to the reference's result. float8_e4m3 caches: against the CPU
// backend's quantisation (the reference for fp8), also bit-exact, on inputs of random bits
// (NaN, Inf, huge and subnormal values included), with and without per-head scales. Out-of-range slots are skipped (the
// other tokens still land) and reported through the device fault word.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>
#include <string>

#include "kvattn/kernels/device_faults.h"
#include "kvattn/kernels/store_kv.h"
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

// Random bytes (eight per draw: the caches of the large cases are hundreds of MB).
void random_bytes(void* data, int64_t n, std::mt19937_64& rng) {
  auto* p = static_cast<uint8_t*>(data);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t x = rng();
    std::memcpy(p + i, &x, 8);
  }
  for (; i < n; ++i) p[i] = static_cast<uint8_t>(rng());
}

// The caches of one case inside one host allocation with guards, random bytes everywhere.
//  fused:    [guard | block0: K, V | block1: K, V | ... | guard], block stride 2*block + pad
//  separate: two regions, each [guard | blocks with stride block + pad | guard]
struct Caches {
  Tensor storage;  // bytes
  TensorView k, v;
  std::string layout;
};

Caches make_caches(std::mt19937_64& rng, DType dt, int64_t num_blocks, int64_t bs, int64_t hkv,
                   int64_t d, bool aligned) {
  const int64_t es = dtype_size(dt);
  const int64_t block = bs * hkv * d;
  const int64_t guard = aligned ? 64 : uniform_int(rng, 1, 64);
  const int64_t pad = aligned ? pick(rng, std::vector<int64_t>{0, 0, 8, 64})
                              : pick(rng, std::vector<int64_t>{0, 1, 7, d});
  const bool fused = uniform_int(rng, 0, 1) == 1;
  Caches c;
  char* base = nullptr;
  if (fused) {
    const int64_t stride = 2 * block + pad;
    c.storage = Tensor::empty({(2 * guard + num_blocks * stride) * es}, DType::kU8);
    base = static_cast<char*>(c.storage.data());
    c.k = TensorView(base + guard * es, dt, Device::cpu(), {num_blocks, bs, hkv, d},
                     {stride, hkv * d, d, 1});
    c.v = TensorView(base + (guard + block) * es, dt, Device::cpu(), {num_blocks, bs, hkv, d},
                     {stride, hkv * d, d, 1});
  } else {
    const int64_t stride = block + pad;
    const int64_t region = 2 * guard + num_blocks * stride;
    c.storage = Tensor::empty({2 * region * es}, DType::kU8);
    base = static_cast<char*>(c.storage.data());
    c.k = TensorView(base + guard * es, dt, Device::cpu(), {num_blocks, bs, hkv, d},
                     {stride, hkv * d, d, 1});
    c.v = TensorView(base + (region + guard) * es, dt, Device::cpu(), {num_blocks, bs, hkv, d},
                     {stride, hkv * d, d, 1});
  }
  random_bytes(c.storage.data(), c.storage.nbytes(), rng);
  std::ostringstream os;
  os << (fused ? "fused" : "separate") << " guard " << guard << " pad " << pad;
  c.layout = os.str();
  return c;
}

// key and value as views into one fused QKV buffer [tokens, (H + 2*Hkv)*D + extra].
struct Inputs {
  Tensor storage;
  TensorView key, value;
};

Inputs make_inputs(std::mt19937_64& rng, DType dt, int64_t tokens, int64_t heads, int64_t hkv,
                   int64_t d, int64_t extra) {
  const int64_t row = (heads + 2 * hkv) * d + extra;
  Inputs in;
  in.storage = Tensor::empty({std::max<int64_t>(tokens, 1) * row}, dt);
  // Any bit pattern, NaN payloads included: the copy must not convert.
  random_bytes(in.storage.data(), in.storage.nbytes(), rng);
  char* base = static_cast<char*>(in.storage.data());
  const int64_t es = dtype_size(dt);
  in.key = TensorView(base + heads * d * es, dt, Device::cpu(), {tokens, hkv, d}, {row, d, 1});
  in.value = TensorView(base + (heads + hkv) * d * es, dt, Device::cpu(), {tokens, hkv, d},
                        {row, d, 1});
  return in;
}

// Distinct random slots for `n` tokens, a share of them negative (skipped).
std::vector<int64_t> make_slots(std::mt19937_64& rng, int64_t n, int64_t capacity,
                                int negative_percent) {
  std::vector<int64_t> all(static_cast<size_t>(capacity));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  std::vector<int64_t> slots(static_cast<size_t>(n));
  std::vector<bool> used(static_cast<size_t>(capacity), false);
  for (int64_t i = 0; i < n; ++i) {
    if (uniform_int(rng, 0, 99) < negative_percent) {
      slots[i] = pick(rng, std::vector<int64_t>{-1, -1, -2, -1000, INT32_MIN});
    } else {
      const int64_t s = all[static_cast<size_t>(i % capacity)];
      slots[i] = used[s] ? -1 : s;
      used[s] = true;
    }
  }
  return slots;
}

size_t first_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (a[i] != b[i]) return i;
  }
  return a.size() == b.size() ? a.size() : std::min(a.size(), b.size());
}

struct StoreCase {
  DType dt;
  int64_t bs, hkv, heads, d, tokens, n;
  DType slot_dt;
  int negative_percent;
  bool aligned;
  int64_t extra;        // extra elements per fused-QKV row
  int64_t slot_stride;  // 1, or 2 for every other entry of a larger tensor
  int64_t num_blocks;
  bool fp8 = false;     // float8_e4m3 caches (dt: the keys' dtype)
  bool scales = false;  // fp8: random per-head k_scale / v_scale (else none: 1.0)
};

Tensor random_scales(std::mt19937_64& rng, int64_t n) {
  Tensor t = Tensor::empty({n}, DType::kF32);
  std::uniform_real_distribution<float> u(-8.0f, 4.0f);  // 2^-8 .. 2^4
  for (int64_t i = 0; i < n; ++i) t.ptr<float>()[i] = std::exp2(u(rng));
  return t;
}

// Runs one case on the GPU; `bad` adds out-of-range slots (expected: skipped + fault bit).
void run_case(int c, const StoreCase& sc, std::mt19937_64& rng, uint64_t seed, int bad) {
  Caches caches = make_caches(rng, sc.fp8 ? DType::kF8E4M3 : sc.dt, sc.num_blocks, sc.bs, sc.hkv,
                              sc.d, sc.aligned);
  Tensor k_scale, v_scale, k_scale_dev, v_scale_dev;
  if (sc.scales) {
    k_scale = random_scales(rng, sc.hkv);
    v_scale = random_scales(rng, sc.hkv);
    k_scale_dev = k_scale.to(kGpu);
    v_scale_dev = v_scale.to(kGpu);
  }
  Inputs in = make_inputs(rng, sc.dt, sc.tokens, sc.heads, sc.hkv, sc.d, sc.extra);
  const int64_t capacity = sc.num_blocks * sc.bs;
  std::vector<int64_t> slots = make_slots(rng, sc.n, capacity, sc.negative_percent);
  std::vector<int64_t> good = slots;
  for (int i = 0; i < bad && sc.n > 0; ++i) {
    const int64_t at = uniform_int(rng, 0, sc.n - 1);
    std::vector<int64_t> bad_values = {capacity, capacity + 1, capacity + sc.bs, 1 << 30};
    if (sc.slot_dt == DType::kI64) bad_values.push_back(int64_t{1} << 40);
    slots[at] = pick(rng, bad_values);
    good[at] = -1;
  }
  // The slot tensor: every slot_stride-th entry of a larger tensor; the others hold garbage.
  std::vector<int64_t> spread(static_cast<size_t>(std::max<int64_t>(sc.n * sc.slot_stride, 1)),
                              int64_t{1} << 29);
  std::vector<int64_t> good_spread = spread;
  for (int64_t i = 0; i < sc.n; ++i) {
    spread[i * sc.slot_stride] = slots[i];
    good_spread[i * sc.slot_stride] = good[i];
  }
  Tensor slot_t = test::int_tensor(spread, sc.slot_dt);
  Tensor good_t = test::int_tensor(good_spread, sc.slot_dt);
  const TensorView slot_view(slot_t.data(), sc.slot_dt, Device::cpu(), {sc.n}, {sc.slot_stride});
  const TensorView good_view(good_t.data(), sc.slot_dt, Device::cpu(), {sc.n}, {sc.slot_stride});

  std::ostringstream what;
  what << sc.dt << " bs " << sc.bs << " blocks " << sc.num_blocks << " hkv " << sc.hkv << " d "
       << sc.d << " tokens " << sc.tokens << " slots " << sc.n << " " << sc.slot_dt << " stride "
       << sc.slot_stride << " neg% " << sc.negative_percent << " bad " << bad << " extra "
       << sc.extra << " " << caches.layout << (sc.fp8 ? " fp8" : "")
       << (sc.scales ? " scales" : "");
  SCOPED_TRACE(test::case_note(c, seed, what.str()));

  // Expected bytes: the reference (valid slots only) on a copy of the whole allocation.
  Tensor expected = Tensor::empty({caches.storage.nbytes()}, DType::kU8);
  std::memcpy(expected.data(), caches.storage.data(), static_cast<size_t>(caches.storage.nbytes()));
  const auto shift = [&](const TensorView& v) {
    TensorView w = v;
    w.data = static_cast<char*>(expected.data()) +
             (static_cast<char*>(v.data) - static_cast<char*>(caches.storage.data()));
    return w;
  };
  if (sc.fp8) {  // the CPU backend quantises (fp8.h); it is the reference for fp8
    store_kv(in.key, in.value, shift(caches.k), shift(caches.v), good_view, k_scale, v_scale);
  } else {
    test::store_kv_reference(in.key, in.value, shift(caches.k), shift(caches.v), good_view);
  }

  const Mirror cache_dev = Mirror::of(caches.storage);
  const Mirror in_dev = Mirror::of(in.storage);
  const Tensor slots_dev = slot_t.to(kGpu);
  TensorView slot_dev_view = slot_view;
  slot_dev_view.data = slots_dev.data();
  slot_dev_view.device = kGpu;
  ASSERT_EQ(read_device_faults(kGpu), 0u) << "fault word not clean before the case";
  ASSERT_NO_THROW(store_kv(in_dev.on_device(in.key), in_dev.on_device(in.value),
                           cache_dev.on_device(caches.k), cache_dev.on_device(caches.v),
                           slot_dev_view, k_scale_dev, v_scale_dev));
  const uint32_t faults = read_device_faults(kGpu);
  const Tensor got = cache_dev.download();
  const auto got_bytes = test::bytes_of(got);
  const auto want_bytes = test::bytes_of(expected);
  EXPECT_EQ(first_difference(got_bytes, want_bytes), got_bytes.size())
      << "first differing byte of the cache allocation (guards included)";
  EXPECT_TRUE(test::bytes_of(in_dev.download()) == test::bytes_of(in.storage))
      << "store_kv wrote to its inputs";
  if (bad > 0 && sc.n > 0) {
    EXPECT_EQ(faults, static_cast<uint32_t>(kFaultSlotOutOfRange));
  } else {
    EXPECT_EQ(faults, 0u);
  }
}

void sweep(int cases, bool fp8 = false) {
  int ran = 0;
  for (int c = 0; c < cases; ++c) {
    if (!test::case_selected(c)) continue;
    const uint64_t seed = test::case_seed();
    std::mt19937_64 rng(seed);
    StoreCase sc{};
    sc.dt = std::vector<DType>{DType::kBF16, DType::kF16, DType::kF32}[c % 3];
    sc.bs = std::vector<int64_t>{1, 16, 256, 32, 64, 128}[(c / 3) % 6];
    sc.hkv = pick(rng, std::vector<int64_t>{1, 2, 4, 8});
    sc.heads = sc.hkv * pick(rng, std::vector<int64_t>{1, 2, 4});
    sc.d = pick(rng, std::vector<int64_t>{64, 128, 128, 40, 96, 8, 3});
    sc.tokens = pick(rng, std::vector<int64_t>{1, 3, 17, 54, 97, 256, uniform_int(rng, 1, 600)});
    sc.n = uniform_int(rng, 0, 3) == 0 ? uniform_int(rng, 0, sc.tokens) : sc.tokens;
    const int64_t min_blocks = (sc.tokens + sc.bs - 1) / sc.bs;
    sc.num_blocks = std::max<int64_t>(1, min_blocks + uniform_int(rng, 0, 4));
    sc.slot_dt = (c / 18) % 2 ? DType::kI64 : DType::kI32;
    sc.negative_percent = pick(rng, std::vector<int>{0, 0, 10, 50, 100});
    sc.aligned = c % 4 != 3;
    sc.extra = sc.aligned ? pick(rng, std::vector<int64_t>{0, 8}) : pick(rng, std::vector<int64_t>{1, 3});
    sc.slot_stride = uniform_int(rng, 0, 4) == 0 ? 2 : 1;
    if (fp8) {  // 16-bit keys only on CUDA
      sc.fp8 = true;
      if (sc.dt == DType::kF32) sc.dt = DType::kBF16;
      sc.scales = uniform_int(rng, 0, 2) != 0;
    }
    run_case(c, sc, rng, seed, /*bad=*/0);
    ++ran;
  }
  std::printf("store_kv gpu: %d bit-exact cases%s\n", ran, fp8 ? " (float8_e4m3 caches)" : "");
}

TEST(StoreKvGpu, BitExactAgainstReference) { sweep(test::quick_mode() ? 24 : 240); }
TEST(StoreKvGpu, Fp8BitExactAgainstCpuQuantisation) { sweep(test::quick_mode() ? 24 : 120, true); }

// The benchmark's shape, smaller cache: 8 KV heads x 128 bf16, random slots, many tokens.
void large_batch() {
  const uint64_t seed = test::case_seed();
  std::mt19937_64 rng(seed);
  StoreCase sc{DType::kBF16, 256, 8, 32, 128, 0, 0, DType::kI32, 5, true, 0, 1, 0};
  sc.tokens = sc.n = test::quick_mode() ? 1024 : 16384;
  sc.num_blocks = 2 * sc.tokens / sc.bs;
  run_case(1000, sc, rng, seed, 0);
  sc.slot_dt = DType::kI64;
  sc.bs = 16;
  sc.num_blocks = 2 * sc.tokens / sc.bs;
  run_case(1001, sc, rng, seed, 0);
}
TEST(StoreKvGpu, LargeBatch) { large_batch(); }

void out_of_range_slots(int cases) {
  for (int c = 0; c < cases; ++c) {
    if (!test::case_selected(c)) continue;
    const uint64_t seed = test::case_seed();
    std::mt19937_64 rng(seed);
    StoreCase sc{};
    sc.dt = c % 2 ? DType::kBF16 : DType::kF32;
    sc.slot_dt = (c / 2) % 2 ? DType::kI64 : DType::kI32;
    sc.bs = std::vector<int64_t>{1, 16, 256}[(c / 4) % 3];
    sc.hkv = pick(rng, std::vector<int64_t>{1, 2, 8});
    sc.heads = sc.hkv;
    sc.d = pick(rng, std::vector<int64_t>{64, 128, 40});
    sc.num_blocks = uniform_int(rng, 1, 5);
    sc.tokens = uniform_int(rng, 1, std::min<int64_t>(sc.num_blocks * sc.bs, 80));
    sc.n = sc.tokens;
    sc.negative_percent = 10;
    sc.aligned = c % 3 != 0;
    sc.extra = sc.aligned ? 0 : 1;
    sc.slot_stride = 1;
    run_case(c, sc, rng, seed, /*bad=*/static_cast<int>(uniform_int(rng, 1, 3)));
  }
}
TEST(StoreKvGpu, OutOfRangeSlotsAreSkippedAndRecorded) { out_of_range_slots(test::quick_mode() ? 6 : 36); }

// Every launch variant of cuda_tuning().store_kv_variant (CTAs of 256 or 128 threads) is
// bit-exact and catches bad slots, whichever is the default.
TEST(StoreKvGpu, EveryLaunchVariant) {
  const cuda::CudaTuning saved = cuda::cuda_tuning();
  for (int variant : {1, 2}) {
    SCOPED_TRACE("store_kv_variant " + std::to_string(variant));
    cuda::cuda_tuning().store_kv_variant = variant;
    sweep(test::quick_mode() ? 12 : 60);
    large_batch();
    out_of_range_slots(test::quick_mode() ? 3 : 12);
  }
  cuda::cuda_tuning() = saved;
}

TEST(StoreKvGpu, EmptySlotMappingWritesNothing) {
  const uint64_t seed = test::case_seed();
  std::mt19937_64 rng(seed);
  StoreCase sc{DType::kBF16, 16, 2, 2, 64, 5, 0, DType::kI32, 0, true, 0, 1, 2};
  run_case(0, sc, rng, seed, 0);
}

}  // namespace
}  // namespace kvattn

KVATTN_GPU_TEST_MAIN()
