// Internal: a request's StructuredOutput compiled to its grammar, with a cache of recent ones
// (clients send the same schema with every request).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/structured/grammar.h"
#include "engine/structured/token_constraint.h"
#include "kvattn/engine/sampler.h"

namespace kvattn::structured {

// Throws kvattn::Error naming what the schema, regex or choices get wrong.
std::shared_ptr<const Grammar> compile(const StructuredOutput& output);

// A compiled structure and the token masks its samples share (one vocabulary: the engine's).
struct CompiledStructure {
  std::shared_ptr<const Grammar> grammar;
  std::shared_ptr<FrameMasks> frames;
};

// Safe to call from several threads: a server compiles a request's structure on its request
// thread (LLM::prepare_structured) and the engine's thread then finds it here. A structure is
// compiled outside the lock, so a huge schema holds up no other caller.
class GrammarCache {
 public:
  static constexpr size_t kCapacity = 32;
  // Throws kvattn::Error naming what the schema, regex or choices get wrong.
  CompiledStructure get(const StructuredOutput& output);

 private:
  std::mutex mutex_;
  std::vector<std::pair<std::string, CompiledStructure>> recent_;  // newest first
};

}  // namespace kvattn::structured
