// CUDA prefill_attention: builds the one PrefillParams block and dispatches, in one place, on
// architecture (the Hopper kernel in hopper/ where prefill_sm90_eligible, else the sm_80 one)
// x dtype (bf16, fp16) x head_dim (64, 128; the Hopper kernel also 256) x causal x paged. The
// sm_80 kernels live in prefill_kernel.cuh, instantiated by prefill_inst_*.cu; the Hopper ones
// in hopper/prefill_sm90_*.
// Calls with a window, softcap or ALiBi take the Hopper kernel's kMods form
// (launch_prefill_sm90_mods, head_dim 64/128/256) where prefill_sm90_eligible, else the sm_80
// kernel's extended form (kExt, prefill_ext_inst_*.cu), which also runs head_dim 80/96, and 256
// where the Hopper kernel does not. Float8 caches with those options are refused.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/backend.h"
#include "kernels/cuda/device_faults.cuh"
#include "kernels/cuda/hopper/prefill_sm90_launch.h"
#include "kernels/cuda/prefill_launch.h"
#include "kernels/cuda/tuning.h"

namespace kvattn::cuda {
namespace {

constexpr const char* kFn = "prefill_attention";

// The kernels move rows in pieces of 8 elements (16 bytes; 8 bytes from a float8_e4m3 cache):
// every base pointer and token/block stride must be a multiple of that. Views cut from a fused
// QKV buffer satisfy this whenever head_dim does.
void check_aligned(const char* name, const TensorView& t, int token_dim) {
  const auto addr = reinterpret_cast<std::uintptr_t>(t.data);
  const std::uintptr_t align = 8 * static_cast<std::uintptr_t>(dtype_size(t.dtype));
  KVATTN_CHECK(addr % align == 0, kFn, ": ", name, " data must be ", align,
               "-byte aligned on the GPU but its address ends in ", addr % 16);
  for (int d = 0; d <= token_dim; ++d) {
    KVATTN_CHECK(t.stride(d) % 8 == 0, kFn, ": ", name, " stride(", d,
                 ") must be a multiple of 8 elements on the GPU but is ", t.stride(d));
  }
}

class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    check(cudaGetDevice(&previous_));
    if (previous_ != device) check(cudaSetDevice(device));
    device_ = device;
  }
  ~DeviceScope() {
    if (previous_ != device_) (void)cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  static void check(cudaError_t e) {
    KVATTN_CHECK(e == cudaSuccess, kFn, ": cudaGetDevice/cudaSetDevice failed: ",
                 cudaGetErrorString(e));
  }
  int previous_ = 0;
  int device_ = 0;
};

template <typename T>
struct TypeTag {
  using type = T;
};

template <typename F>
void dispatch_bool(bool v, F&& f) {
  if (v) {
    f(std::true_type{});
  } else {
    f(std::false_type{});
  }
}

}  // namespace

PrefillParams make_prefill_params(const PrefillArgs& a, const AttentionShape& s) {
  const int D = static_cast<int>(s.head_dim);
  KVATTN_CHECK(D == 64 || D == 80 || D == 96 || D == 128 || D == 256, kFn,
               ": unsupported head_dim: ", D,
               " (the CUDA kernels support 64, 80, 96, 128 and 256)");
  check_aligned("q", a.q, 0);
  check_aligned("out", a.out, 0);
  check_aligned(s.paged ? "k_cache" : "k", a.k, s.paged ? 1 : 0);
  check_aligned(s.paged ? "v_cache" : "v", a.v, s.paged ? 1 : 0);
  KVATTN_CHECK(s.total_q <= INT32_MAX && a.max_seqlen_q <= INT32_MAX, kFn,
               ": total_q and max_seqlen_q must fit in int32");

  PrefillParams p;
  p.q = a.q.data;
  p.k = a.k.data;
  p.v = a.v.data;
  p.out = a.out.data;
  p.lse = a.lse.defined() ? a.lse.ptr<float>() : nullptr;
  p.cu_seqlens_q = a.cu_seqlens_q.ptr<const int32_t>();
  p.cu_seqlens_k = a.cu_seqlens_k.ptr<const int32_t>();
  p.fault_word = fault_word_ptr(a.q.device.index);
  p.q_stride = a.q.stride(0);
  p.o_stride = a.out.stride(0);
  p.lse_head_stride = a.lse.defined() ? a.lse.stride(0) : 0;
  p.num_seqs = static_cast<int>(s.num_seqs);
  p.num_heads = static_cast<int>(s.num_heads);
  p.group = static_cast<int>(s.num_heads / s.num_kv_heads);
  p.total_q = static_cast<int>(s.total_q);
  if (s.paged) {
    KVATTN_CHECK(s.num_blocks <= INT32_MAX && s.block_size <= INT32_MAX &&
                     s.max_blocks_per_seq <= INT32_MAX,
                 kFn, ": paged cache dimensions must fit in int32");
    p.block_table = a.block_table.ptr<const int32_t>();
    p.k_scale = a.k_scale.defined() ? a.k_scale.ptr<const float>() : nullptr;
    p.v_scale = a.v_scale.defined() ? a.v_scale.ptr<const float>() : nullptr;
    p.bt_stride = a.block_table.stride(0);
    p.k_stride = a.k.stride(1);
    p.v_stride = a.v.stride(1);
    p.k_block_stride = a.k.stride(0);
    p.v_block_stride = a.v.stride(0);
    p.num_blocks = static_cast<int>(s.num_blocks);
    p.block_size = static_cast<int>(s.block_size);
    p.block_shift = (s.block_size & (s.block_size - 1)) == 0
                        ? static_cast<int>(std::log2(static_cast<double>(s.block_size)))
                        : -1;
    p.max_blocks_per_seq = static_cast<int>(s.max_blocks_per_seq);
  } else {
    KVATTN_CHECK(a.k.size(0) <= INT32_MAX, kFn, ": k rows must fit in int32");
    p.k_stride = a.k.stride(0);
    p.v_stride = a.v.stride(0);
    p.total_k = static_cast<int>(a.k.size(0));
  }
  p.max_seqlen_q = static_cast<int>(a.max_seqlen_q);
  p.max_seqlen_k = static_cast<int>(std::clamp<int64_t>(a.max_seqlen_k, 0, INT32_MAX));
  p.scale = s.scale;
  p.scale_log2 = static_cast<float>(static_cast<double>(s.scale) * 1.4426950408889634);
  p.head_dim = D;
  // Resolved by the entry (causal => right 0); a bound past INT32_MAX is as good as none.
  auto clamp_window = [](int64_t w) { return static_cast<int>(std::min<int64_t>(w, INT32_MAX)); };
  p.window_left = clamp_window(s.window_left);
  p.window_right = clamp_window(s.window_right);
  if (s.softcap > 0.0f) {
    p.softcap_in = static_cast<float>(2.0 * 1.4426950408889634 * s.scale / s.softcap);
    p.softcap_out = s.softcap / s.scale;
  }
  if (a.alibi_slopes.defined()) {
    p.alibi_slopes = a.alibi_slopes.ptr<const float>();
    p.alibi_seq_stride = a.alibi_slopes.ndim == 2 ? a.alibi_slopes.stride(0) : 0;
  }
  return p;
}

void prefill_attention(const PrefillArgs& a, const AttentionShape& s) {
  if (s.num_seqs == 0 || s.total_q == 0 || a.max_seqlen_q == 0) return;
  const PrefillParams p = make_prefill_params(a, s);
  DeviceScope scope(a.q.device.index);
  const auto stream = static_cast<cudaStream_t>(a.stream.handle);
  const bool bf16 = a.q.dtype == DType::kBF16;
  KVATTN_CHECK(bf16 || a.q.dtype == DType::kF16, kFn, ": unsupported dtype on the GPU: ",
               a.q.dtype);
  // float8_e4m3 caches (paged only): the sm_80 kernel's register-staged fp8 copy.
  const bool fp8 = s.paged && a.k.dtype == DType::kF8E4M3;
  // Window, softcap, ALiBi: the Hopper kernel's kMods form where eligible (head_dim 64, 128,
  // 256), else the extended sm_80 kernels, which also run head_dim 80/96 and, off Hopper, 256.
  const bool features = s.window_left >= 0 || (s.window_right >= 0 && !a.causal) ||
                        s.softcap > 0.0f || a.alibi_slopes.defined();
  const bool ext = features || (s.head_dim != 64 && s.head_dim != 128);
  // fp8 with window / softcap / ALiBi / head_dim 80, 96, 256: the extended sm_80 kernel over
  // fp8 codes (session 30; on by default since session 31), refused where
  // CudaTuning::fp8_extended_forms turns it off (tuning.h).
  KVATTN_CHECK(!(ext && fp8) || cuda_tuning().fp8_extended_forms != 0, kFn,
               ": float8_e4m3 caches together with window_size, softcap, alibi_slopes or "
               "head_dim ", s.head_dim, " are turned off (KVATTN_FP8_EXTENDED_FORMS=0)");
  const bool sm90 = !fp8 && prefill_sm90_eligible(p, s.paged, a.q.device.index, features);
  auto with_dtype = [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (sm90 && features) {  // window / softcap / ALiBi on the Hopper kernel
      dispatch_bool(s.paged, [&](auto paged) {
        if (s.head_dim == 64) {
          launch_prefill_sm90_mods<T, 64, paged.value>(p, stream);
        } else if (s.head_dim == 256) {
          launch_prefill_sm90_mods<T, 256, paged.value>(p, stream);
        } else {
          launch_prefill_sm90_mods<T, 128, paged.value>(p, stream);
        }
      });
      return;
    }
    if (sm90 && s.head_dim == 256) {  // plain head_dim 256 on the Hopper kernel
      dispatch_bool(a.causal, [&](auto causal) {
        dispatch_bool(s.paged, [&](auto paged) {
          launch_prefill_sm90<T, 256, causal.value, paged.value>(p, stream);
        });
      });
      return;
    }
    if (ext && fp8) {  // paged only
      if (s.head_dim == 64) {
        launch_prefill_ext<T, 64, true, true>(p, stream);
      } else if (s.head_dim == 256) {
        launch_prefill_ext<T, 256, true, true>(p, stream);
      } else {  // 80, 96, 128
        launch_prefill_ext<T, 128, true, true>(p, stream);
      }
      return;
    }
    if (ext) {
      dispatch_bool(s.paged, [&](auto paged) {
        if (s.head_dim == 64) {
          launch_prefill_ext<T, 64, paged.value>(p, stream);
        } else if (s.head_dim == 256) {
          launch_prefill_ext<T, 256, paged.value>(p, stream);
        } else {  // 80, 96, 128 (zero-padded to the 128-wide tile)
          launch_prefill_ext<T, 128, paged.value>(p, stream);
        }
      });
      return;
    }
    dispatch_bool(a.causal, [&](auto causal) {
      if (fp8) {
        if (s.head_dim == 64) {
          launch_prefill<T, 64, causal.value, true, true>(p, stream);
        } else {
          launch_prefill<T, 128, causal.value, true, true>(p, stream);
        }
        return;
      }
      dispatch_bool(s.paged, [&](auto paged) {
        if (sm90) {
          if (s.head_dim == 64) {
            launch_prefill_sm90<T, 64, causal.value, paged.value>(p, stream);
          } else {
            launch_prefill_sm90<T, 128, causal.value, paged.value>(p, stream);
          }
        } else if (s.head_dim == 64) {
          launch_prefill<T, 64, causal.value, paged.value>(p, stream);
        } else {
          launch_prefill<T, 128, causal.value, paged.value>(p, stream);
        }
      });
    });
  };
  if (bf16) {
    with_dtype(TypeTag<__nv_bfloat16>{});
  } else {
    with_dtype(TypeTag<__half>{});
  }
}

}  // namespace kvattn::cuda
