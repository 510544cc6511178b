// Structured-output grammars from untrusted text (a request's JSON schema, regex or GBNF
// grammar): the first byte picks the compiler (% 3: 0 JSON schema, 1 regex, 2 GBNF); the
// bytes up to the first NUL are its input, the rest a text fed to a Matcher of the grammar.
// Compiling succeeds or throws kvattn::Error; matching never fails otherwise, and a refused
// byte leaves the state as it was.
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/structured/gbnf_grammar.h"
#include "engine/structured/json_grammar.h"
#include "engine/structured/matcher.h"
#include "engine/structured/regex_grammar.h"
#include "fuzz_util.h"
#include "kvattn/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvattn::structured;
  if (size == 0) return 0;
  const std::string_view all(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t cut = all.find('\0');
  const std::string_view spec = all.substr(0, cut);
  const std::string_view text = cut == std::string_view::npos ? "" : all.substr(cut + 1);
  std::shared_ptr<const Grammar> g;
  try {
    switch (data[0] % 3) {
      case 0:
        g = json_schema_grammar(spec);
        break;
      case 1:
        g = regex_grammar(spec);
        break;
      default:
        g = gbnf_grammar(spec);
        break;
    }
  } catch (const kvattn::Error&) {
    return 0;
  }
  FUZZ_ASSERT(g != nullptr);
  Matcher m(g);
  for (char c : text) {
    const std::string before = m.state_key();
    if (!m.advance(std::string_view(&c, 1))) {
      FUZZ_ASSERT(m.state_key() == before);
      break;
    }
    FUZZ_ASSERT(m.can_end() || m.can_continue());
  }
  return 0;
}
