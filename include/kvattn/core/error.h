// kvattn::Error and the one family of argument checks used at every public boundary.
//
// Contract: a failed check throws kvattn::Error whose message starts with the
// function, names the argument, gives the expected and the actual value, and
// ends with the file:line of the check, e.g.
//   "store_kv: k_cache head_dim is 128 but key head_dim is 64 (store_kv.cpp:41)"
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace kvattn {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {

[[noreturn]] void throw_error(const std::string& message, const char* file, int line);

template <typename... Parts>
std::string concat(Parts&&... parts) {
  std::ostringstream os;
  (os << ... << std::forward<Parts>(parts));
  return os.str();
}

}  // namespace detail
}  // namespace kvattn

// KVATTN_CHECK(cond, parts...): throws kvattn::Error built from `parts` when cond is false.
#define KVATTN_CHECK(cond, ...)                                                        \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      ::kvattn::detail::throw_error(::kvattn::detail::concat(__VA_ARGS__), __FILE__,   \
                                    __LINE__);                                         \
    }                                                                                  \
  } while (0)

// KVATTN_CHECK_EQ(fn, what, expected, actual): "<fn>: <what> must be <expected> but is <actual>".
#define KVATTN_CHECK_EQ(fn, what, expected, actual)                                    \
  do {                                                                                 \
    const auto& kvattn_e_ = (expected);                                                \
    const auto& kvattn_a_ = (actual);                                                  \
    if (!(kvattn_e_ == kvattn_a_)) {                                                   \
      ::kvattn::detail::throw_error(                                                   \
          ::kvattn::detail::concat(fn, ": ", what, " must be ", kvattn_e_, " but is ",  \
                                   kvattn_a_),                                         \
          __FILE__, __LINE__);                                                         \
    }                                                                                  \
  } while (0)

#define KVATTN_FAIL(...) \
  ::kvattn::detail::throw_error(::kvattn::detail::concat(__VA_ARGS__), __FILE__, __LINE__)
