// JSON from untrusted files (safetensors headers, config.json, tokenizer.json): parse errors and
// type mismatches become kvattn::Error naming the file and the field.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace kvattn {

// Parses `text`; rejects nesting deeper than `max_depth` before parsing (keeps recursion bounded).
nlohmann::json parse_json(std::string_view text, const std::string& file, int max_depth = 64);
// Reads a whole (small) text file; `what` names it in errors ("config.json").
std::string read_text_file(const std::string& path, uint64_t max_bytes = uint64_t{1} << 30);

// Typed field access: throw "<file>: field '<key>' must be <kind>" on a mismatch.
const nlohmann::json& json_field(const nlohmann::json& obj, std::string_view key,
                                 const std::string& file);
int64_t json_int(const nlohmann::json& v, std::string_view key, const std::string& file);
double json_number(const nlohmann::json& v, std::string_view key, const std::string& file);
bool json_bool(const nlohmann::json& v, std::string_view key, const std::string& file);
const std::string& json_string(const nlohmann::json& v, std::string_view key,
                               const std::string& file);

}  // namespace kvattn
