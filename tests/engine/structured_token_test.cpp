// TokenConstraint (src/engine/structured/token_constraint.h): the mask it applies equals,
// token by token, what the grammar allows of each token's bytes (a Matcher per token, the
// definition), on a synthetic vocabulary with shared prefixes, multi-byte characters, special
// and empty tokens, along random walks through JSON grammars; end tokens only where the text
// is whole; and a token taken outside the grammar leaves only the end tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "engine/structured/json_grammar.h"
#include "engine/structured/matcher.h"
#include "engine/structured/token_constraint.h"

namespace kvattn::structured {
namespace {

struct Vocab {
  std::vector<std::string> bytes;
  std::vector<bool> eligible;
  int32_t eos = -1;
};

Vocab synthetic_vocab(std::mt19937& rng) {
  Vocab v;
  for (int b = 0; b < 256; ++b) v.bytes.push_back(std::string(1, static_cast<char>(b)));
  const std::string alphabet = "{}[]\":, \n\t0123456789abcxyz.-+eE\\utrflsn";
  const std::vector<std::string> pieces = {"\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80",
                                           "true", "false", "null", "\": \"", "\",\n  \""};
  for (int i = 0; i < 3000; ++i) {
    std::string t;
    const int n = 1 + static_cast<int>(rng() % 7);
    for (int k = 0; k < n; ++k) {
      if (rng() % 6 == 0) {
        t += pieces[rng() % pieces.size()];
      } else {
        t += alphabet[rng() % alphabet.size()];
      }
    }
    v.bytes.push_back(t);
  }
  v.bytes.push_back("{\"");  // duplicates of other entries' bytes are fine
  v.bytes.push_back("{\"");
  v.bytes.push_back("");     // an empty token never matches
  v.eligible.assign(v.bytes.size(), true);
  v.bytes.push_back("<|special|>");
  v.eligible.push_back(false);
  v.bytes.push_back("<|end|>");
  v.eligible.push_back(false);
  v.eos = static_cast<int32_t>(v.bytes.size() - 1);
  return v;
}

// The definition: token t may come next iff its bytes keep the text a prefix of a sentence;
// the end token iff the text is a whole sentence.
std::vector<bool> expected_mask(const Matcher& m, const Vocab& v) {
  std::vector<bool> ok(v.bytes.size(), false);
  for (size_t t = 0; t < v.bytes.size(); ++t) {
    if (static_cast<int32_t>(t) == v.eos) {
      ok[t] = m.can_end();
    } else if (v.eligible[t] && !v.bytes[t].empty()) {
      Matcher c = m;
      ok[t] = c.advance(v.bytes[t]);
    }
  }
  return ok;
}

TEST(TokenConstraint, MaskEqualsTheGrammarTokenByToken) {
  std::mt19937 rng(3);
  const Vocab v = synthetic_vocab(rng);
  const auto bytes = std::make_shared<const TokenBytes>(v.bytes, v.eligible);
  const std::vector<std::shared_ptr<const Grammar>> grammars = {
      json_object_grammar(),
      json_schema_grammar(R"({"type": "object", "properties": {"a": {"type": "string"},
          "b": {"type": "array", "items": {"type": "number"}}}, "required": ["a"]})"),
      // Repetition chains longer than the frame masks' horizon (TokenConstraint::kHorizon):
      // masks shared between their rules must still be exact near both bounds.
      json_schema_grammar(R"({"type": "object", "properties": {"s": {"type": "string",
          "minLength": 30, "maxLength": 45}, "l": {"type": "array", "items": {"enum": [1, 22]},
          "minItems": 27, "maxItems": 29}}, "required": ["s", "l"]})")};
  int steps = 0, ends = 0;
  for (const auto& g : grammars) {
    for (int walk = 0; walk < 6; ++walk) {
      TokenConstraint c(g, bytes, {v.eos});
      Matcher m(g);
      for (int step = 0; step < 70; ++step) {
        std::vector<float> logits(v.bytes.size() + 5, 0.5f);  // 5 ids past the vocabulary
        c.apply(logits);
        const std::vector<bool> ok = expected_mask(m, v);
        std::vector<int32_t> allowed;
        for (size_t t = 0; t < logits.size(); ++t) {
          const bool expect = t < ok.size() && ok[t];
          ASSERT_EQ(std::isfinite(logits[t]), expect)
              << "token " << t << " '" << (t < v.bytes.size() ? v.bytes[t] : "") << "' at step "
              << step;
          if (expect) allowed.push_back(static_cast<int32_t>(t));
          if (expect) EXPECT_EQ(logits[t], 0.5f);  // allowed logits are left as they were
        }
        ASSERT_FALSE(allowed.empty());
        ++steps;
        // Prefer tokens other than the end, so walks get somewhere.
        int32_t pick = allowed[rng() % allowed.size()];
        if (pick == v.eos && allowed.size() > 1 && rng() % 4 != 0) pick = allowed.front();
        if (pick == v.eos) {
          ++ends;
          break;
        }
        c.on_generated(pick);
        ASSERT_TRUE(m.advance(v.bytes[static_cast<size_t>(pick)]));
        EXPECT_EQ(c.complete(), !m.can_continue());
      }
    }
  }
  EXPECT_GT(steps, 200);
  std::printf("%d masks checked, %d walks ended\n", steps, ends);
}

// Past the work budget (a tiny one here; a very ambiguous grammar in practice) the mask keeps
// only tokens the grammar takes, the most likely of them, and never leaves a live text with
// nothing to draw.
TEST(TokenConstraint, PastTheWorkBudgetOnlyFittingCandidatesSurvive) {
  std::mt19937 rng(6);
  const Vocab v = synthetic_vocab(rng);
  const auto bytes = std::make_shared<const TokenBytes>(v.bytes, v.eligible);
  const auto g = json_object_grammar();
  TokenConstraint c(g, bytes, {v.eos}, nullptr, /*work_budget=*/200);
  Matcher m(g);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  int kept_total = 0;
  for (int step = 0; step < 40 && m.can_continue(); ++step) {
    std::vector<float> logits(v.bytes.size());
    for (float& x : logits) x = nd(rng);
    const std::vector<float> raw = logits;
    c.apply(logits);
    const std::vector<bool> ok = expected_mask(m, v);
    std::vector<int32_t> kept;
    for (size_t t = 0; t < logits.size(); ++t) {
      if (!std::isfinite(logits[t])) continue;
      ASSERT_TRUE(ok[t]) << "token " << t << " '" << v.bytes[t] << "' kept but not allowed";
      EXPECT_EQ(logits[t], raw[t]);
      kept.push_back(static_cast<int32_t>(t));
    }
    ASSERT_FALSE(kept.empty()) << "nothing left to draw at step " << step;
    EXPECT_LE(kept.size(), TokenConstraint::kCandidates + 256);  // the budget held
    kept_total += static_cast<int>(kept.size());
    // The most likely allowed token is kept (greedy stays the grammar's argmax) whenever it
    // is among the kCandidates most likely tokens.
    int32_t best = -1;
    size_t rank = 0;  // tokens above it
    for (size_t t = 0; t < ok.size(); ++t) {
      if (ok[t] && static_cast<int32_t>(t) != v.eos && (best < 0 || raw[t] > raw[best])) {
        best = static_cast<int32_t>(t);
      }
    }
    for (size_t t = 0; t < raw.size(); ++t) {
      if (v.eligible[t] && static_cast<int32_t>(t) != v.eos && raw[t] > raw[best]) ++rank;
    }
    if (best >= 0 && rank < TokenConstraint::kCandidates) {
      EXPECT_NE(std::find(kept.begin(), kept.end(), best), kept.end()) << "step " << step;
    }
    const int32_t pick = kept[rng() % kept.size()];
    if (pick == v.eos) break;
    c.on_generated(pick);
    ASSERT_TRUE(m.advance(v.bytes[static_cast<size_t>(pick)]));
  }
  EXPECT_GT(kept_total, 0);
}

TEST(TokenConstraint, CompleteTextAllowsOnlyTheEnd) {
  std::mt19937 rng(4);
  const Vocab v = synthetic_vocab(rng);
  const auto bytes = std::make_shared<const TokenBytes>(v.bytes, v.eligible);
  TokenConstraint c(choice_grammar({"{}"}), bytes, {v.eos});
  c.on_generated('{');
  c.on_generated('}');
  EXPECT_TRUE(c.complete());
  std::vector<float> logits(v.bytes.size(), 1.0f);
  c.apply(logits);
  for (size_t t = 0; t < logits.size(); ++t) {
    EXPECT_EQ(std::isfinite(logits[t]), static_cast<int32_t>(t) == v.eos) << t;
  }
}

TEST(TokenConstraint, ATokenOutsideTheGrammarLeavesOnlyTheEnd) {
  std::mt19937 rng(5);
  const Vocab v = synthetic_vocab(rng);
  const auto bytes = std::make_shared<const TokenBytes>(v.bytes, v.eligible);
  TokenConstraint c(json_object_grammar(), bytes, {v.eos});
  EXPECT_FALSE(c.allows('x'));
  EXPECT_TRUE(c.allows('{'));
  EXPECT_FALSE(c.allows(v.eos));
  c.on_generated('x');  // drawn without the mask
  std::vector<float> logits(v.bytes.size(), 1.0f);
  c.apply(logits);
  for (size_t t = 0; t < logits.size(); ++t) {
    EXPECT_EQ(std::isfinite(logits[t]), static_cast<int32_t>(t) == v.eos) << t;
  }
}

}  // namespace
}  // namespace kvattn::structured
