// merge_attention_states entry: validates once, then dispatches on the device.
#include "kvattn/kernels/merge_attention.h"

#include <utility>

#include "merge_attention_backend.h"
#include "validate.h"

namespace kvattn {
namespace {

constexpr std::string_view kFn = "merge_attention_states";
constexpr int64_t kMaxHeadDim = 512;

// [tokens, num_heads, head_dim] like out_a (shape and dtype), on out_a's device.
void check_rows_like(std::string_view name, const TensorView& t, const TensorView& out_a) {
  using namespace detail;
  check_token_major(kFn, name, t);
  KVATTN_CHECK(t.size(0) == out_a.size(0) && t.size(1) == out_a.size(1) &&
                   t.size(2) == out_a.size(2),
               kFn, ": ", name, " shape must equal out_a shape ", out_a.shape_str(), " but is ",
               t.shape_str());
  check_dtype(kFn, name, t, out_a.dtype);
  check_device(kFn, name, t, out_a.device);
}

// float32 [num_heads, tokens] on `device`, tokens contiguous, heads at a stride >= tokens
// (a column range of a wider [num_heads, T] array is fine).
void check_lse(std::string_view name, const TensorView& t, int64_t heads, int64_t tokens,
               Device device) {
  using namespace detail;
  check_rank(kFn, name, t, 2);
  KVATTN_CHECK(t.size(0) == heads && t.size(1) == tokens, kFn, ": ", name,
               " shape must be [num_heads, tokens] = [", heads, ", ", tokens, "] but is ",
               t.shape_str());
  check_dtype(kFn, name, t, DType::kF32);
  check_device(kFn, name, t, device);
  KVATTN_CHECK(t.stride(1) == 1 || tokens <= 1, kFn, ": ", name,
               " must have contiguous tokens (stride(1) == 1) but stride(1) is ", t.stride(1));
  KVATTN_CHECK(t.stride(0) >= tokens || heads <= 1, kFn, ": ", name,
               " head stride must be >= tokens (", tokens, ") but is ", t.stride(0));
}

// out may share out_x's memory only element for element (the same view).
void check_alias(std::string_view name, const TensorView& out, const TensorView& x) {
  KVATTN_CHECK(out.data != x.data || out.size(0) <= 1 || out.stride(0) == x.stride(0), kFn,
               ": out aliases ", name, " (same data pointer) so its token stride must be ",
               x.stride(0), " but is ", out.stride(0));
}

}  // namespace

void merge_attention_states(const MergeStatesArgs& a) {
  using namespace detail;
  check_token_major(kFn, "out_a", a.out_a);
  check_dtype_in(kFn, "out_a", a.out_a, {DType::kF32, DType::kF16, DType::kBF16});
  const int64_t tokens = a.out_a.size(0), heads = a.out_a.size(1), head_dim = a.out_a.size(2);
  KVATTN_CHECK(head_dim >= 1 && head_dim <= kMaxHeadDim, kFn,
               ": out_a head_dim must be in [1, ", kMaxHeadDim, "] but is ", head_dim);
  check_rows_like("out_b", a.out_b, a.out_a);
  check_rows_like("out", a.out, a.out_a);
  KVATTN_CHECK(a.out.stride(0) >= heads * head_dim || tokens <= 1, kFn,
               ": out token stride must be >= num_heads * head_dim (", heads * head_dim,
               ", rows must not overlap) but is ", a.out.stride(0));
  check_alias("out_a", a.out, a.out_a);
  check_alias("out_b", a.out, a.out_b);
  const Device device = a.out_a.device;
  check_lse("lse_a", a.lse_a, heads, tokens, device);
  check_lse("lse_b", a.lse_b, heads, tokens, device);
  if (a.lse.defined()) {
    check_lse("lse", a.lse, heads, tokens, device);
    for (const auto& [name, x] : {std::pair{"lse_a", a.lse_a}, std::pair{"lse_b", a.lse_b}}) {
      KVATTN_CHECK(a.lse.data != x.data || heads <= 1 || a.lse.stride(0) == x.stride(0), kFn,
                   ": lse aliases ", name, " (same data pointer) so its head stride must be ",
                   x.stride(0), " but is ", a.lse.stride(0));
    }
  }
  if (tokens == 0 || heads == 0) return;

  if (device.is_cpu()) {
    cpu::merge_attention_states(a);
    return;
  }
#ifdef KVATTN_WITH_CUDA
  cuda::merge_attention_states(a);
#else
  KVATTN_FAIL(kFn, ": out_a is on ", device, " but this build of kvattn has no CUDA backend");
#endif
}

}  // namespace kvattn
