#include "engine/model_files/json_util.h"

#include <fstream>
#include <sstream>

#include "kvattn/core/error.h"

namespace kvattn {

nlohmann::json parse_json(std::string_view text, const std::string& file, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      KVATTN_CHECK(++depth <= max_depth, file, ": JSON nesting deeper than ", max_depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    KVATTN_FAIL(file, ": invalid JSON: ", e.what());
  }
}

std::string read_text_file(const std::string& path, uint64_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  KVATTN_CHECK(in.good(), path, ": cannot open");
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  KVATTN_CHECK(size >= 0 && static_cast<uint64_t>(size) <= max_bytes, path, ": size ", size,
               " is over the limit of ", max_bytes, " bytes");
  in.seekg(0);
  std::string text(static_cast<size_t>(size), '\0');
  in.read(text.data(), size);
  KVATTN_CHECK(in.good() || in.eof(), path, ": read failed");
  return text;
}

const nlohmann::json& json_field(const nlohmann::json& obj, std::string_view key,
                                 const std::string& file) {
  KVATTN_CHECK(obj.is_object(), file, ": expected an object holding '", key, "'");
  auto it = obj.find(key);
  KVATTN_CHECK(it != obj.end(), file, ": field '", key, "' is missing");
  return *it;
}

int64_t json_int(const nlohmann::json& v, std::string_view key, const std::string& file) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    KVATTN_CHECK(u <= static_cast<uint64_t>(INT64_MAX), file, ": field '", key, "' value ", u,
                 " is out of range");
    return static_cast<int64_t>(u);
  }
  KVATTN_CHECK(v.is_number_integer(), file, ": field '", key, "' must be an integer but is ",
               v.type_name());
  return v.get<int64_t>();
}

double json_number(const nlohmann::json& v, std::string_view key, const std::string& file) {
  KVATTN_CHECK(v.is_number(), file, ": field '", key, "' must be a number but is ", v.type_name());
  return v.get<double>();
}

bool json_bool(const nlohmann::json& v, std::string_view key, const std::string& file) {
  KVATTN_CHECK(v.is_boolean(), file, ": field '", key, "' must be a bool but is ", v.type_name());
  return v.get<bool>();
}

const std::string& json_string(const nlohmann::json& v, std::string_view key,
                               const std::string& file) {
  KVATTN_CHECK(v.is_string(), file, ": field '", key, "' must be a string but is ",
               v.type_name());
  return v.get_ref<const std::string&>();
}

}  // namespace kvattn
