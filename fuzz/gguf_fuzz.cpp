// GGUF: parse, read every metadata value, dequantize every small enough tensor, derive the model
// config and the tokenizer, and encode with it.
#include <cstdint>
#include <span>

#include "fuzz_util.h"
#include "kvattn/engine/gguf.h"
#include "kvattn/engine/tokenizer.h"
#include "kvattn/engine/weights.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvattn;
  std::optional<GgufFile> f;
  try {
    f = GgufFile::from_bytes(std::span<const uint8_t>(data, size), "fuzz.gguf");
  } catch (const Error&) {
    return 0;
  }
  for (const auto& [key, value] : f->metadata()) (void)value.to_string(4);
  for (const GgufTensorInfo& t : f->tensors()) {
    FUZZ_ASSERT(f->data_offset() + t.offset + t.nbytes <= f->file_size());
    if (t.numel > (1 << 20)) continue;
    try {
      const Tensor x = f->dequantize(t);
      FUZZ_ASSERT(x.numel() == t.numel);
    } catch (const Error&) {
    }
  }
  try {
    (void)config_from_gguf(*f);
  } catch (const Error&) {
  }
  try {
    const Tokenizer tok = Tokenizer::from_gguf(*f);
    const std::vector<int32_t> ids = tok.encode("Hello <|im_start|>world 123 日本\xff");
    for (int32_t id : ids) FUZZ_ASSERT(id >= 0 && id < tok.vocab_size());
    (void)tok.decode(ids);
    if (tok.chat_template()) (void)tok.apply_chat_template({{"user", "hi"}}, true);
  } catch (const Error&) {
  }
  return 0;
}
