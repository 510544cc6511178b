// safetensors: parse the header, then convert every float tensor; offsets must stay in the file.
#include <cstdint>
#include <span>

#include "fuzz_util.h"
#include "kvattn/engine/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvattn;
  try {
    const SafetensorsFile f =
        SafetensorsFile::from_bytes(std::span<const uint8_t>(data, size), "fuzz.safetensors");
    for (const SafetensorsTensorInfo& t : f.tensors()) {
      FUZZ_ASSERT(t.begin <= t.end && t.end <= size);
      FUZZ_ASSERT(static_cast<uint64_t>(t.numel * t.elem_size) == t.end - t.begin);
      if (t.dtype == "F32" || t.dtype == "F16" || t.dtype == "BF16") {
        FUZZ_ASSERT(f.to_f32(t).numel() == t.numel);
      }
    }
  } catch (const Error&) {
  }
  return 0;
}
