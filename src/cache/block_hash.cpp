#include "kvattn/cache/block_hash.h"

#include <xxhash.h>

namespace kvattn {

uint64_t xxhash_block_hash(uint64_t parent_hash, const int32_t* tokens, int64_t num_tokens) {
  return XXH64(tokens, static_cast<size_t>(num_tokens) * sizeof(int32_t), parent_hash);
}

}  // namespace kvattn
