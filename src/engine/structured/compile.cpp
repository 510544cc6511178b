#include "engine/structured/compile.h"

#include <algorithm>

#include "engine/structured/gbnf_grammar.h"
#include "engine/structured/json_grammar.h"
#include "engine/structured/regex_grammar.h"

namespace kvattn::structured {

std::shared_ptr<const Grammar> compile(const StructuredOutput& output) {
  using Kind = StructuredOutput::Kind;
  switch (output.kind) {
    case Kind::kJsonObject: return json_object_grammar();
    case Kind::kJsonSchema: return json_schema_grammar(output.spec);
    case Kind::kRegex: return regex_grammar(output.spec);
    case Kind::kChoice: return choice_grammar(output.choices);
    case Kind::kGrammar: return gbnf_grammar(output.spec);
    case Kind::kNone: break;
  }
  return nullptr;
}

CompiledStructure GrammarCache::get(const StructuredOutput& output) {
  std::string key(1, static_cast<char>(output.kind));
  const auto add = [&](const std::string& s) {
    key += std::to_string(s.size()) + ":" + s;
  };
  add(output.spec);
  for (const auto& c : output.choices) add(c);
  // The newest entry for key moved to the front; false when there is none.
  const auto find_locked = [&] {
    const auto it = std::find_if(recent_.begin(), recent_.end(),
                                 [&](const auto& entry) { return entry.first == key; });
    if (it == recent_.end()) return false;
    std::rotate(recent_.begin(), it, it + 1);
    return true;
  };
  {
    std::lock_guard lock(mutex_);
    if (find_locked()) return recent_.front().second;
  }
  CompiledStructure compiled{compile(output), std::make_shared<FrameMasks>()};
  std::lock_guard lock(mutex_);
  if (find_locked()) return recent_.front().second;  // another thread compiled it meanwhile
  if (recent_.size() == kCapacity) recent_.pop_back();
  recent_.insert(recent_.begin(), {std::move(key), compiled});
  return compiled;
}

}  // namespace kvattn::structured
