// Which attention forms read float8_e4m3 paged KV caches on a device (decode_attention and the
// paged prefill_attention alike), for callers that choose a cache dtype before serving (the
// engine's Model::create).
#pragma once

#include "kvattn/core/device.h"

namespace kvattn {

// Window, softcap, ALiBi and head_dim 80, 96 and 256 over float8_e4m3 caches: always on the
// CPU; on CUDA unless the environment sets KVATTN_FP8_EXTENDED_FORMS=0 (then refused by name).
// (head_dim 64 and 128 without them run on both.) A build without CUDA answers false for a
// CUDA device.
bool fp8_cache_extended_forms(Device device);

// Decode over float8_e4m3 caches at head_dim 80 and 96: always on the CPU; on CUDA unless the
// environment sets KVATTN_FP8_PADDED_DECODE=0 (on since session 33), with the extended forms.
bool fp8_cache_padded_decode(Device device);

}  // namespace kvattn
