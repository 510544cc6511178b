#include "engine/tokenizer/utf8.h"
#include "kvattn/engine/tokenizer.h"

namespace kvattn {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Moves the complete characters at the front of `pending` to the result. An incomplete character
// at the end stays pending unless `final`; each maximal ill-formed subpart (the bytes that cannot
// become a character) turns into one U+FFFD.
std::string take_complete(std::string& pending, bool final) {
  std::string out;
  size_t i = 0;
  while (i < pending.size()) {
    int bad = 1;
    const int n = tokenizer_detail::utf8_char_len(pending, i, &bad);
    if (n > 0) {
      out.append(pending, i, n);
      i += n;
    } else if (n < 0 && !final) {
      break;
    } else {
      out += kReplacement;
      i += n < 0 ? pending.size() - i : static_cast<size_t>(bad);
    }
  }
  pending.erase(0, i);
  return out;
}

}  // namespace

std::string StreamDecoder::push(int32_t id) {
  if (skip_special_ && tok_->is_special(id)) return {};
  pending_ += tok_->token_bytes(id);
  return take_complete(pending_, false);
}

std::string StreamDecoder::flush() {
  std::string out = take_complete(pending_, true);
  pending_.clear();
  return out;
}

}  // namespace kvattn
