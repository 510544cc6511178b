// AVX-512 (F, BW, VL; VNNI where the CPU has it) kernels for the 32-element block types:
// two blocks per 512-bit vector, lanes 0..7 the even block and 8..15 the odd one, exactly
// the accumulator layout of qdot.h's fixed order. VNNI turns maddubs + madd into one
// vpdpbusd. The K types take the AVX2 kernels (null entries here), whose work is bound by
// unpacking the sub-block bits rather than by the multiply-adds.
#include <immintrin.h>

// GCC 12's AVX-512 headers build some results from _mm512_undefined_*(), which -O3 then
// reports as uninitialized (a known false positive of those headers).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "engine/model/qdot/qdot_impl.h"

namespace kvattn::qdot::detail {
namespace {

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")
namespace plain {
constexpr bool kVnni = false;
#include "engine/model/qdot/qdot_avx512.inc"
}  // namespace plain
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")
namespace vnni {
constexpr bool kVnni = true;
#include "engine/model/qdot/qdot_avx512.inc"
}  // namespace vnni
#pragma GCC pop_options

}  // namespace

const Table& avx512_table(bool use_vnni) {
  static const Table plain_table{
      {plain::run<kQ4_0>, plain::run<kQ4_1>, plain::run<kQ8_0>},
      {plain::rows32<kQ4_0>, plain::rows32<kQ4_1>, plain::rows32<kQ8_0>}};
  static const Table vnni_table{{vnni::run<kQ4_0>, vnni::run<kQ4_1>, vnni::run<kQ8_0>},
                                {vnni::rows32<kQ4_0>, vnni::rows32<kQ4_1>, vnni::rows32<kQ8_0>}};
  return use_vnni ? vnni_table : plain_table;
}

}  // namespace kvattn::qdot::detail
