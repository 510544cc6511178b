#include "server/tool_parsers.h"

#include <optional>

#include <nlohmann/json.hpp>

namespace kvattn::server {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kWs = " \t\n\r";
constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kMistralMarker = "[TOOL_CALLS]";
constexpr std::string_view kPythonTag = "<|python_tag|>";

std::string_view trim(std::string_view s) {
  const size_t b = s.find_first_not_of(kWs);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(kWs) - b + 1);
}

// The longest suffix of `s` that is a proper prefix of `marker` (held back while streaming).
size_t partial_suffix(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n) {
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

// Past the end of the JSON object or list that opens at s[at], or npos when it is not closed.
size_t json_value_end(std::string_view s, size_t at) {
  int depth = 0;
  bool in_string = false, escape = false;
  for (size_t i = at; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (escape) escape = false;
      else if (c == '\\') escape = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

Json parse_json(std::string_view s) { return Json::parse(s, nullptr, /*allow_exceptions=*/false); }

// {"name": <one of tools>, <key>: {...}} for the first of `keys` present.
std::optional<ParsedToolCall> call_of(const Json& j, const std::set<std::string>& tools,
                                      std::initializer_list<const char*> keys) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return std::nullopt;
  const std::string& name = j["name"].get_ref<const std::string&>();
  if (!tools.count(name)) return std::nullopt;
  for (const char* key : keys) {
    if (!j.contains(key)) continue;
    if (!j[key].is_object()) return std::nullopt;
    return ParsedToolCall{name, j[key].dump()};
  }
  return std::nullopt;
}

}  // namespace

ToolCallParser::ToolCallParser(ToolFormat format, std::set<std::string> tools, std::string named)
    : format_(format), tools_(std::move(tools)), named_(std::move(named)),
      state_(format == ToolFormat::kLlama3Json ? State::kUndecided
             : format == ToolFormat::kHermes || format == ToolFormat::kMistral ? State::kText
                                                                               : State::kCall) {}

std::string ToolCallParser::text(std::string_view s) {
  const size_t end = s.find_last_not_of(kWs);
  if (end == std::string_view::npos) {
    held_ws_ += s;
    return {};
  }
  std::string out = after_call_ ? std::string() : held_ws_;
  const size_t start = after_call_ ? s.find_first_not_of(kWs) : 0;
  out += s.substr(start, end + 1 - start);
  held_ws_ = std::string(s.substr(end + 1));
  after_call_ = false;
  return out;
}

void ToolCallParser::call(ParsedToolCall c, std::vector<ParsedToolCall>& calls) {
  calls.push_back(std::move(c));
  ++num_calls_;
  held_ws_.clear();
  block_ws_.clear();
  after_call_ = true;
}

std::string ToolCallParser::feed(std::string_view piece, std::vector<ParsedToolCall>& calls) {
  buf_ += piece;
  switch (format_) {
    case ToolFormat::kHermes: return feed_hermes(calls);
    case ToolFormat::kMistral: return feed_mistral();
    case ToolFormat::kLlama3Json: return feed_llama();
    case ToolFormat::kRequired:
    case ToolFormat::kNamed: return {};  // the whole output is the call(s)
  }
  return {};
}

std::string ToolCallParser::feed_hermes(std::vector<ParsedToolCall>& calls) {
  std::string out;
  for (;;) {
    if (state_ == State::kText) {
      const size_t at = buf_.find(kHermesOpen);
      if (at == std::string::npos) {
        const size_t keep = partial_suffix(buf_, kHermesOpen);
        out += text(std::string_view(buf_).substr(0, buf_.size() - keep));
        buf_.erase(0, buf_.size() - keep);
        return out;
      }
      out += text(std::string_view(buf_).substr(0, at));
      block_ws_ = after_call_ ? std::string() : held_ws_;  // content again if the block is bad
      held_ws_.clear();
      buf_.erase(0, at + kHermesOpen.size());
      state_ = State::kCall;
    } else {
      const size_t at = buf_.find(kHermesClose);
      if (at == std::string::npos) return out;
      const std::string body = buf_.substr(0, at);
      buf_.erase(0, at + kHermesClose.size());
      state_ = State::kText;
      if (auto c = call_of(parse_json(trim(body)), tools_, {"arguments", "parameters"})) {
        call(std::move(*c), calls);
      } else {
        out += block_ws_;
        out.append(kHermesOpen).append(body).append(kHermesClose);
        block_ws_.clear();
        after_call_ = false;
      }
    }
  }
}

std::string ToolCallParser::feed_mistral() {
  if (state_ != State::kText) return {};  // after the marker: held to the end
  const size_t at = buf_.find(kMistralMarker);
  if (at == std::string::npos) {
    const size_t keep = partial_suffix(buf_, kMistralMarker);
    std::string out = text(std::string_view(buf_).substr(0, buf_.size() - keep));
    buf_.erase(0, buf_.size() - keep);
    return out;
  }
  std::string out = text(std::string_view(buf_).substr(0, at));
  block_ws_ = held_ws_;
  held_ws_.clear();
  buf_.erase(0, at + kMistralMarker.size());
  state_ = State::kCall;
  return out;
}

std::string ToolCallParser::feed_llama() {
  if (state_ == State::kUndecided) {
    const size_t b = buf_.find_first_not_of(kWs);
    if (b == std::string::npos) return {};
    const std::string_view rest = std::string_view(buf_).substr(b);
    if (rest[0] == '{' || rest.starts_with(kPythonTag)) {
      state_ = State::kCall;
    } else if (!kPythonTag.starts_with(rest)) {
      state_ = State::kText;
    } else {
      return {};  // maybe the start of <|python_tag|>
    }
  }
  if (state_ == State::kCall) return {};
  std::string out = text(buf_);
  buf_.clear();
  return out;
}

std::string ToolCallParser::finish_held(std::vector<ParsedToolCall>& calls) {
  std::vector<ParsedToolCall> found;
  bool ok = false;
  const std::string_view body = trim(buf_);
  if (format_ == ToolFormat::kNamed) {
    const Json j = parse_json(body);
    ok = j.is_object();
    if (ok) found.push_back({named_, j.dump()});
  } else if (format_ == ToolFormat::kRequired || format_ == ToolFormat::kMistral) {
    const Json j = parse_json(body);
    ok = j.is_array() && !j.empty();
    for (size_t i = 0; ok && i < j.size(); ++i) {
      auto c = call_of(j[i], tools_,
                       {format_ == ToolFormat::kRequired ? "parameters" : "arguments"});
      ok = c.has_value();
      if (ok) found.push_back(std::move(*c));
    }
  } else {  // kLlama3Json: [<|python_tag|>] {...} (; {...})*
    std::string_view s = body;
    if (s.starts_with(kPythonTag)) s.remove_prefix(kPythonTag.size());
    size_t at = 0;
    ok = true;
    while (ok) {
      at = s.find_first_not_of(kWs, at);
      ok = at != std::string_view::npos && s[at] == '{';
      if (!ok) break;
      const size_t end = json_value_end(s, at);
      auto c = end == std::string_view::npos
                   ? std::nullopt
                   : call_of(parse_json(s.substr(at, end - at)), tools_, {"parameters", "arguments"});
      ok = c.has_value();
      if (!ok) break;
      found.push_back(std::move(*c));
      at = s.find_first_not_of(kWs, end);
      if (at == std::string_view::npos) break;
      ok = s[at] == ';';
      ++at;
    }
  }
  if (ok) {
    for (ParsedToolCall& c : found) call(std::move(c), calls);
    buf_.clear();
    return {};
  }
  // Not calls: the text as written is content.
  std::string raw = format_ == ToolFormat::kMistral ? block_ws_ + std::string(kMistralMarker) + buf_
                                                   : buf_;
  block_ws_.clear();
  buf_.clear();
  after_call_ = false;
  if (format_ == ToolFormat::kMistral) return raw;  // after content already sent
  return text(raw);
}

std::string ToolCallParser::finish(std::vector<ParsedToolCall>& calls) {
  std::string out;
  if (format_ == ToolFormat::kHermes) {
    if (state_ == State::kCall) {  // a block the generation did not close
      if (auto c = call_of(parse_json(trim(buf_)), tools_, {"arguments", "parameters"})) {
        call(std::move(*c), calls);
      } else {
        out += block_ws_;
        out.append(kHermesOpen).append(buf_);
        after_call_ = false;
      }
      buf_.clear();
    } else {
      out += text(buf_);
      buf_.clear();
    }
  } else if (state_ == State::kCall) {
    out += finish_held(calls);
  } else {
    out += text(buf_);
    buf_.clear();
  }
  if (num_calls_ == 0) out += held_ws_;
  held_ws_.clear();
  state_ = State::kText;
  return out;
}

std::string parse_tool_calls(ToolCallParser& p, std::string_view text,
                             std::vector<ParsedToolCall>& calls) {
  std::string out = p.feed(text, calls);
  out += p.finish(calls);
  return out;
}

}  // namespace kvattn::server
