// Internal: the sliding-window and softcap options shared by the prefill and decode entries
// (flash-attn's window_size and softcap; DESIGN §8).
#pragma once

#include <string_view>

#include "backend.h"

namespace kvattn::detail {

// Checks window_left/right (each >= -1) and softcap (finite, >= 0), rejects them on backends
// that do not implement them (CUDA, for now) and stores the resolved values in `shape`:
// causal sets the right bound to 0, as flash-attn does.
void check_mask_options(std::string_view fn, int64_t window_left, int64_t window_right,
                        float softcap, bool causal, Device device, AttentionShape& shape);

}  // namespace kvattn::detail
