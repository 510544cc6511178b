// Block hashes for the prefix cache: the key under which a full block of KV is found again.
#pragma once

#include <cstdint>

namespace kvattn {

// Hash of one full block: a function of the parent block's hash and the block's token ids, so
// the hash of block i names the whole prefix of tokens [0, (i+1) * block_size).
// The hash only finds a candidate; BlockManager confirms a hit by comparing the token ids and
// the parent block, so a weak or colliding function can cost hits but never serve wrong KV.
// Tests inject deliberately colliding functions through this type.
using BlockHashFn = uint64_t (*)(uint64_t parent_hash, const int32_t* tokens, int64_t num_tokens);

// The parent hash of a sequence's first block.
inline constexpr uint64_t kRootBlockHash = 0;

// xxHash64 of the block's token ids (as little-endian int32 bytes), seeded with the parent hash.
uint64_t xxhash_block_hash(uint64_t parent_hash, const int32_t* tokens, int64_t num_tokens);

}  // namespace kvattn
