// store_kv against the byte-copy reference, bit-exact over whole allocations: the caches,
// the gaps between blocks (block stride > one block) and guard regions on both sides must
// end up byte-identical to what the reference produces. Out-of-range slots throw, name
// slot_mapping and the value, and leave every byte as it was.
#include "kvattn/kernels/store_kv.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <sstream>

#include "support/case_util.h"
#include "support/reference.h"
#include "support/test_util.h"

namespace kvattn {
namespace {

using ::testing::HasSubstr;
using test::pick;
using test::uniform_int;

// The caches of one case inside one allocation with guards. Layouts:
//  fused:    [guard | block0: K tile, V tile | block1: K, V | ... | guard]; K and V views
//            share the allocation with block stride 2 * block (+ pad).
//  separate: two regions, each [guard | blocks with stride block + pad | guard].
struct Caches {
  Tensor storage;  // bytes
  TensorView k, v;
};

Caches make_caches(std::mt19937_64& rng, DType dt, int64_t num_blocks, int64_t bs, int64_t hkv,
                   int64_t d, std::string& layout) {
  const int64_t es = dtype_size(dt);
  const int64_t block = bs * hkv * d;
  const int64_t guard = uniform_int(rng, 1, 64);
  const int64_t pad = pick(rng, std::vector<int64_t>{0, 0, 1, 7, d});
  const bool fused = uniform_int(rng, 0, 1) == 1;
  Caches c;
  if (fused) {
    const int64_t stride = 2 * block + pad;
    const int64_t elems = guard + num_blocks * stride + guard;
    c.storage = Tensor::empty({elems * es}, DType::kU8);
    char* base = static_cast<char*>(c.storage.data()) + guard * es;
    c.k = TensorView(base, dt, Device::cpu(), {num_blocks, bs, hkv, d},
                     {stride, hkv * d, d, 1});
    c.v = TensorView(base + block * es, dt, Device::cpu(), {num_blocks, bs, hkv, d},
                     {stride, hkv * d, d, 1});
  } else {
    const int64_t stride = block + pad;
    const int64_t region = guard + num_blocks * stride + guard;
    c.storage = Tensor::empty({2 * region * es}, DType::kU8);
    char* base = static_cast<char*>(c.storage.data());
    c.k = TensorView(base + guard * es, dt, Device::cpu(), {num_blocks, bs, hkv, d},
                     {stride, hkv * d, d, 1});
    c.v = TensorView(base + (region + guard) * es, dt, Device::cpu(), {num_blocks, bs, hkv, d},
                     {stride, hkv * d, d, 1});
  }
  // Random bytes everywhere: caches, gaps and guards (not a fill pattern the op could mimic).
  auto* p = static_cast<uint8_t*>(c.storage.data());
  for (int64_t i = 0; i < c.storage.nbytes(); ++i) p[i] = static_cast<uint8_t>(rng());
  std::ostringstream os;
  os << (fused ? "fused" : "separate") << " guard " << guard << " pad " << pad;
  layout = os.str();
  return c;
}

// key and value as views into one fused QKV buffer [tokens, (H + 2*Hkv)*D + extra].
struct Inputs {
  Tensor storage;
  TensorView key, value;
};

Inputs make_inputs(std::mt19937_64& rng, DType dt, int64_t tokens, int64_t heads, int64_t hkv,
                   int64_t d, bool random_bits) {
  const int64_t extra = pick(rng, std::vector<int64_t>{0, 0, 3});
  const int64_t row = (heads + 2 * hkv) * d + extra;
  Inputs in;
  in.storage = Tensor::empty({std::max<int64_t>(tokens, 1) * row}, dt);
  if (random_bits) {  // any bit pattern, NaN payloads included: the copy must not convert
    auto* p = static_cast<uint8_t*>(in.storage.data());
    for (int64_t i = 0; i < in.storage.nbytes(); ++i) p[i] = static_cast<uint8_t>(rng());
  } else {
    test::fill_uniform(in.storage.view(), rng, -4.0f, 4.0f);
  }
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
  for (int64_t i = 0; i < n; ++i) {
    if (uniform_int(rng, 0, 99) < negative_percent) {
      slots[i] = pick(rng, std::vector<int64_t>{-1, -1, -2, -1000, INT32_MIN});
    } else {
      slots[i] = all[i % capacity];
    }
  }
  // Distinct non-negative slots: keep the first use of a slot, skip repeats.
  std::vector<bool> used(static_cast<size_t>(capacity), false);
  for (auto& s : slots) {
    if (s < 0) continue;
    if (used[s]) {
      s = -1;
    } else {
      used[s] = true;
    }
  }
  return slots;
}

TEST(StoreKv, BitExactAgainstReference) {
  const int cases = test::case_count(300, 120);
  int ran = 0;
  for (int c = 0; c < cases; ++c) {
    if (!test::case_selected(c)) continue;
    const uint64_t seed = test::case_seed();
    std::mt19937_64 rng(seed);
    const DType dt = c % 2 ? DType::kBF16 : DType::kF32;
    const int64_t bs = std::vector<int64_t>{1, 16, 256}[(c / 2) % 3];
    const int64_t hkv = pick(rng, std::vector<int64_t>{1, 2, 4, 8});
    const int64_t heads = hkv * pick(rng, std::vector<int64_t>{1, 2, 4});
    const int64_t d = pick(rng, std::vector<int64_t>{64, 128, 40, 96, 8, 3});
    const int64_t tokens = pick(rng, std::vector<int64_t>{0, 1, 3, 17, 54, 97,
                                                          uniform_int(rng, 1, 300)});
    const int64_t n = uniform_int(rng, 0, 3) == 0 ? uniform_int(rng, 0, tokens) : tokens;
    const int64_t min_blocks = (tokens + bs - 1) / bs;
    const int64_t num_blocks = std::max<int64_t>(1, min_blocks + uniform_int(rng, 0, 4));
    const DType slot_dt = (c / 6) % 2 ? DType::kI64 : DType::kI32;
    const bool random_bits = uniform_int(rng, 0, 3) == 0;
    std::string layout;
    Caches caches = make_caches(rng, dt, num_blocks, bs, hkv, d, layout);
    Inputs in = make_inputs(rng, dt, tokens, heads, hkv, d, random_bits);
    const int negative_percent = pick(rng, std::vector<int>{0, 10, 50, 100});
    Tensor slots = test::int_tensor(make_slots(rng, n, num_blocks * bs, negative_percent),
                                    slot_dt);

    std::ostringstream what;
    what << dt << " bs " << bs << " blocks " << num_blocks << " hkv " << hkv << " d " << d
         << " tokens " << tokens << " slots " << n << " " << slot_dt << " neg% "
         << negative_percent << " " << layout << (random_bits ? " random-bits" : "");
    SCOPED_TRACE(test::case_note(c, seed, what.str()));

    // Expected bytes: the reference on a copy of the whole allocation.
    Tensor expected = Tensor::empty({caches.storage.nbytes()}, DType::kU8);
    std::memcpy(expected.data(), caches.storage.data(), caches.storage.nbytes());
    const auto shift = [&](const TensorView& v) {
      TensorView w = v;
      w.data = static_cast<char*>(expected.data()) +
               (static_cast<char*>(v.data) - static_cast<char*>(caches.storage.data()));
      return w;
    };
    const std::vector<uint8_t> inputs_before = test::bytes_of(in.storage);
    test::store_kv_reference(in.key, in.value, shift(caches.k), shift(caches.v), slots);

    ASSERT_NO_THROW(store_kv(in.key, in.value, caches.k, caches.v, slots));
    const auto got = test::bytes_of(caches.storage);
    const auto want = test::bytes_of(expected);
    size_t first_diff = got.size();
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i] != want[i]) {
        first_diff = i;
        break;
      }
    }
    EXPECT_EQ(first_diff, got.size()) << "first differing byte of the cache allocation";
    EXPECT_TRUE(test::bytes_of(in.storage) == inputs_before) << "store_kv wrote to its inputs";
    ++ran;
  }
  std::printf("store_kv: %d bit-exact cases\n", ran);
}

// Tokens past slot_mapping's length are never read: their slots could be anything.
TEST(StoreKv, ReadsOnlyTheFirstSlotMappingEntries) {
  const uint64_t seed = test::case_seed();
  SCOPED_TRACE(test::case_note(0, seed, "short slot_mapping"));
  std::mt19937_64 rng(seed);
  std::string layout;
  Caches caches = make_caches(rng, DType::kF32, 4, 16, 2, 64, layout);
  Inputs in = make_inputs(rng, DType::kF32, 40, 4, 2, 64, false);
  // The backing slot tensor holds 40 entries, the last ones out of range; the view has 10.
  std::vector<int64_t> values(40, 1 << 20);
  for (int i = 0; i < 10; ++i) values[i] = 3 * i;
  Tensor all = test::int_tensor(values);
  TensorView first10 = all.view().slice0(0, 10);
  Tensor expected = Tensor::empty({caches.storage.nbytes()}, DType::kU8);
  std::memcpy(expected.data(), caches.storage.data(), caches.storage.nbytes());
  TensorView ek = caches.k, ev = caches.v;
  ek.data = static_cast<char*>(expected.data()) +
            (static_cast<char*>(caches.k.data) - static_cast<char*>(caches.storage.data()));
  ev.data = static_cast<char*>(expected.data()) +
            (static_cast<char*>(caches.v.data) - static_cast<char*>(caches.storage.data()));
  test::store_kv_reference(in.key, in.value, ek, ev, first10);
  ASSERT_NO_THROW(store_kv(in.key, in.value, caches.k, caches.v, first10));
  EXPECT_TRUE(test::bytes_of(caches.storage) == test::bytes_of(expected));
  // A strided slot_mapping (every other entry of a larger tensor) works too.
  std::vector<int64_t> interleaved(20, 1 << 20);
  for (int i = 0; i < 10; ++i) interleaved[2 * i] = 3 * i + 1;
  Tensor inter = test::int_tensor(interleaved, DType::kI64);
  TensorView every_other(inter.data(), DType::kI64, Device::cpu(), {10}, {2});
  std::memcpy(expected.data(), caches.storage.data(), caches.storage.nbytes());
  test::store_kv_reference(in.key, in.value, ek, ev, every_other);
  ASSERT_NO_THROW(store_kv(in.key, in.value, caches.k, caches.v, every_other));
  EXPECT_TRUE(test::bytes_of(caches.storage) == test::bytes_of(expected));
}

TEST(StoreKv, EmptySlotMappingWritesNothing) {
  std::mt19937_64 rng(test::case_seed());
  std::string layout;
  Caches caches = make_caches(rng, DType::kBF16, 2, 16, 1, 64, layout);
  const auto before = test::bytes_of(caches.storage);
  Inputs in = make_inputs(rng, DType::kBF16, 0, 1, 1, 64, false);
  Tensor slots = test::int_tensor({});
  ASSERT_NO_THROW(store_kv(in.key, in.value, caches.k, caches.v, slots));
  EXPECT_TRUE(test::bytes_of(caches.storage) == before);
}

// An out-of-range slot anywhere in the mapping: Error naming slot_mapping and the value, and
// not a single byte written (valid slots before it included).
TEST(StoreKv, OutOfRangeSlotThrowsAndWritesNothing) {
  const int cases = test::case_count(60, 20);
  for (int c = 0; c < cases; ++c) {
    if (!test::case_selected(c)) continue;
    const uint64_t seed = test::case_seed();
    std::mt19937_64 rng(seed);
    const DType dt = c % 2 ? DType::kBF16 : DType::kF32;
    const DType slot_dt = (c / 2) % 2 ? DType::kI64 : DType::kI32;
    const int64_t bs = std::vector<int64_t>{1, 16, 256}[(c / 4) % 3];
    const int64_t hkv = pick(rng, std::vector<int64_t>{1, 2, 8});
    const int64_t d = pick(rng, std::vector<int64_t>{64, 128, 40});
    const int64_t num_blocks = uniform_int(rng, 1, 5);
    const int64_t capacity = num_blocks * bs;
    const int64_t tokens = uniform_int(rng, 1, std::min<int64_t>(capacity, 80));
    std::string layout;
    Caches caches = make_caches(rng, dt, num_blocks, bs, hkv, d, layout);
    Inputs in = make_inputs(rng, dt, tokens, hkv, hkv, d, false);
    std::vector<int64_t> slots = make_slots(rng, tokens, capacity, 10);
    const int64_t bad_at = uniform_int(rng, 0, tokens - 1);
    std::vector<int64_t> bad_values = {capacity, capacity + 1, capacity + bs, 1 << 30};
    if (slot_dt == DType::kI64) bad_values.push_back(int64_t{1} << 40);
    const int64_t bad = pick(rng, bad_values);
    slots[bad_at] = bad;
    Tensor slot_t = test::int_tensor(slots, slot_dt);
    std::ostringstream what;
    what << dt << " " << slot_dt << " bs " << bs << " blocks " << num_blocks << " tokens "
         << tokens << " slot_mapping[" << bad_at << "] = " << bad << " " << layout;
    SCOPED_TRACE(test::case_note(c, seed, what.str()));
    const auto before = test::bytes_of(caches.storage);
    try {
      store_kv(in.key, in.value, caches.k, caches.v, slot_t);
      ADD_FAILURE() << "no kvattn::Error for an out-of-range slot";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("slot_mapping"));
      EXPECT_THAT(e.what(), HasSubstr(std::to_string(bad)));
    }
    EXPECT_TRUE(test::bytes_of(caches.storage) == before) << "the cache changed";
  }
}

}  // namespace
}  // namespace kvattn
