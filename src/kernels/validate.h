// Internal: argument checks shared by the op entries. Every failure throws kvattn::Error whose
// message is "<fn>: <name> ..." with the expected and the actual value.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string_view>

#include "kvattn/core/tensor.h"

namespace kvattn::detail {

void check_defined(std::string_view fn, std::string_view name, const TensorView& t);
void check_rank(std::string_view fn, std::string_view name, const TensorView& t, int rank);
void check_dtype(std::string_view fn, std::string_view name, const TensorView& t, DType dtype);
void check_dtype_in(std::string_view fn, std::string_view name, const TensorView& t,
                    std::initializer_list<DType> allowed);
void check_device(std::string_view fn, std::string_view name, const TensorView& t,
                  Device device);
void check_dim(std::string_view fn, std::string_view name, const TensorView& t, int dim,
               std::string_view dim_name, int64_t expected);
void check_stride(std::string_view fn, std::string_view name, const TensorView& t, int dim,
                  int64_t expected, std::string_view why);
void check_contiguous(std::string_view fn, std::string_view name, const TensorView& t);

// [tokens, heads, head_dim] with head_dim contiguous and head stride == head_dim; any token
// stride >= 0.
void check_token_major(std::string_view fn, std::string_view name, const TensorView& t);
// [num_blocks, block_size, heads, head_dim], contiguous inside a block, block stride >= one
// block.
void check_paged_cache(std::string_view fn, std::string_view name, const TensorView& t);

// Reads element i of a host int32/int64 vector.
int64_t index_at(const TensorView& t, int64_t i);

// Resolves softmax_scale == 0 to 1/sqrt(head_dim); rejects negative or non-finite scales.
float resolve_scale(std::string_view fn, float scale, int64_t head_dim);

}  // namespace kvattn::detail
