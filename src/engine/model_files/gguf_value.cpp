#include <sstream>

#include "kvattn/engine/gguf.h"

namespace kvattn {

std::string_view gguf_type_name(GgufValue::Type type) {
  using T = GgufValue::Type;
  switch (type) {
    case T::kU8: return "uint8";
    case T::kI8: return "int8";
    case T::kU16: return "uint16";
    case T::kI16: return "int16";
    case T::kU32: return "uint32";
    case T::kI32: return "int32";
    case T::kF32: return "float32";
    case T::kBool: return "bool";
    case T::kString: return "string";
    case T::kArray: return "array";
    case T::kU64: return "uint64";
    case T::kI64: return "int64";
    case T::kF64: return "float64";
  }
  return "?";
}

namespace {

std::string describe(GgufValue::Type type, GgufValue::Type elem) {
  if (type != GgufValue::Type::kArray) return std::string(gguf_type_name(type));
  return "array of " + std::string(gguf_type_name(elem));
}

template <typename T>
const T& get_as(const GgufValue::Storage& v, GgufValue::Type type, GgufValue::Type elem,
                const char* wanted) {
  const T* p = std::get_if<T>(&v);
  KVATTN_CHECK(p != nullptr, "GGUF value: expected ", wanted, " but the value is ",
               describe(type, elem));
  return *p;
}

}  // namespace

size_t GgufValue::array_size() const {
  if (auto* v = std::get_if<std::vector<int64_t>>(&value_)) return v->size();
  if (auto* v = std::get_if<std::vector<double>>(&value_)) return v->size();
  if (auto* v = std::get_if<std::vector<std::string>>(&value_)) return v->size();
  return 0;
}

int64_t GgufValue::as_int() const {
  if (auto* b = std::get_if<bool>(&value_)) return *b ? 1 : 0;
  return get_as<int64_t>(value_, type_, elem_type_, "an integer");
}

double GgufValue::as_float() const {
  if (auto* i = std::get_if<int64_t>(&value_)) return static_cast<double>(*i);
  return get_as<double>(value_, type_, elem_type_, "a number");
}

bool GgufValue::as_bool() const {
  if (auto* i = std::get_if<int64_t>(&value_)) return *i != 0;
  return get_as<bool>(value_, type_, elem_type_, "a bool");
}

const std::string& GgufValue::as_string() const {
  return get_as<std::string>(value_, type_, elem_type_, "a string");
}

const std::vector<int64_t>& GgufValue::as_ints() const {
  return get_as<std::vector<int64_t>>(value_, type_, elem_type_, "an array of integers");
}

const std::vector<double>& GgufValue::as_floats() const {
  return get_as<std::vector<double>>(value_, type_, elem_type_, "an array of floats");
}

const std::vector<std::string>& GgufValue::as_strings() const {
  return get_as<std::vector<std::string>>(value_, type_, elem_type_, "an array of strings");
}

std::string GgufValue::to_string(size_t max_items) const {
  std::ostringstream os;
  auto quoted = [&](const std::string& s) {
    const size_t limit = 16 * max_items;
    os << '"' << (s.size() > limit ? s.substr(0, limit) + "..." : s) << '"';
  };
  auto list = [&](const auto& vec, auto&& item) {
    os << '[';
    for (size_t i = 0; i < vec.size() && i < max_items; ++i) {
      if (i) os << ", ";
      item(vec[i]);
    }
    if (vec.size() > max_items) os << ", ... (" << vec.size() << " items)";
    os << ']';
  };
  std::visit(
      [&](const auto& v) {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, std::string>) {
          quoted(v);
        } else if constexpr (std::is_same_v<V, bool>) {
          os << (v ? "true" : "false");
        } else if constexpr (std::is_same_v<V, std::vector<std::string>>) {
          list(v, quoted);
        } else if constexpr (std::is_same_v<V, std::vector<int64_t>> ||
                             std::is_same_v<V, std::vector<double>>) {
          list(v, [&](auto x) { os << x; });
        } else {
          os << v;
        }
      },
      value_);
  return os.str();
}

}  // namespace kvattn
