// POST /v1/completions and /v1/chat/completions: parse, tokenize, submit to the engine loop,
// then either wait for the whole result or stream it as Server-Sent Events. The status is
// decided before any byte is sent: the handler waits for the engine's kAccepted (or kError).
#include <httplib.h>

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/openai_format.h"
#include "server/prompt_builder.h"
#include "server/server_context.h"
#include "server/sse_body.h"
#include "server/tool_output.h"

namespace kvattn::server {
namespace {

using Kind = StreamEvent::Kind;

// Completions' echo: each prompt's text and ids, which lead its n choices.
struct EchoPrompts {
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> ids;
  size_t n = 1;
};

EchoPrompts echo_prompts(const ParsedRequest& pr, const EnginePrompts& ep, const LLM& llm) {
  EchoPrompts e;
  e.ids = ep.prompts;
  e.n = static_cast<size_t>(ep.params.n);
  for (size_t i = 0; i < ep.prompts.size(); ++i) {
    if (i < pr.text_prompts.size() && !ep.truncated) {
      e.texts.push_back(pr.text_prompts[i]);  // as sent (truncated: what was kept, below)
    } else {
      e.texts.push_back(llm.tokenizer() != nullptr ? llm.tokenizer()->decode(ep.prompts[i]) : "");
    }
  }
  return e;
}

// A choice's text -> its content and tool calls (tool_output.h).
void take_tool_calls(const ToolOutput& tools, ServerContext& ctx, ChoiceResult& c) {
  ToolCallParser parser = tools.parser();
  std::vector<ParsedToolCall> parsed;
  c.text = parse_tool_calls(parser, c.text, parsed);
  c.tool_calls = tools.to_calls(std::move(parsed), 0, [&] { return ctx.random(); });
  c.finish_name = tools.finish_reason(c.finish_reason, !c.tool_calls.empty());
}

// logprobs: non-null when the request asked for log-probabilities; echo: non-null with echo;
// tools: non-null when the text is read for tool calls.
void respond_whole(ServerContext& ctx, RequestStream& stream, std::vector<StreamEvent> evs,
                   const ResponseMeta& meta, size_t num_choices, bool with_token_ids,
                   const LogprobsFormat* logprobs, const EchoPrompts* echo,
                   const ToolOutput* tools, httplib::Response& res) {
  std::vector<ChoiceResult> choices(num_choices);
  if (echo != nullptr) {
    for (size_t c = 0; c < num_choices; ++c) {
      choices[c].prompt_text = echo->texts.at(c / echo->n);
      choices[c].prompt_ids = echo->ids.at(c / echo->n);
    }
  }
  for (;;) {
    for (StreamEvent& e : evs) {
      if (e.kind == Kind::kPromptLogprobs) {
        for (size_t c = e.choice; c < e.choice + (echo != nullptr ? echo->n : 0); ++c) {
          choices.at(c).prompt_logprobs = e.prompt_logprobs;
        }
      } else if (e.kind == Kind::kToken) {
        ChoiceResult& c = choices.at(e.choice);
        c.text += e.text;
        if (e.token >= 0) c.token_ids.push_back(e.token);
        if (e.token >= 0 && e.logprobs) c.logprobs.push_back(std::move(*e.logprobs));
      } else if (e.kind == Kind::kChoiceEnd) {
        choices.at(e.choice).finish_reason = e.finish_reason;
      } else if (e.kind == Kind::kError) {
        throw *e.error;
      } else if (e.kind == Kind::kDone) {
        if (tools != nullptr) {
          for (ChoiceResult& c : choices) take_tool_calls(*tools, ctx, c);
        }
        res.set_content(dump(full_response(meta, choices, e.usage, with_token_ids, logprobs)),
                        "application/json");
        return;
      }
    }
    evs = stream.wait_all();
  }
}

// The SSE body's frames (sse_body.h): one chunk per token event, then the usage chunk
// (include_usage) and "data: [DONE]".
struct SseState {
  ServerContext* ctx;
  ResponseMeta meta;
  size_t num_choices = 0;
  bool include_usage = false;
  bool token_ids = false;  // return_token_ids
  std::optional<LogprobsFormat> logprobs;  // the request asked for log-probabilities
  std::vector<int64_t> text_offsets;       // completions' logprobs: per choice
  std::optional<ToolOutput> tools;         // the text is read for tool calls
  std::vector<ToolCallParser> parsers;     // with tools: per choice
  std::vector<size_t> calls_sent;          // with tools: per choice
  bool opened = false;
};

// The "logprobs" of a token event's chunk: its token's, in the endpoint's shape.
ResponseJson event_logprobs(SseState& st, const StreamEvent& e) {
  std::vector<int32_t> ids;
  std::vector<TokenLogprobs> lps;
  if (e.token >= 0 && e.logprobs) {
    ids.push_back(e.token);
    lps.push_back(*e.logprobs);
  }
  if (st.meta.endpoint == Endpoint::kChat) return chat_logprobs(*st.logprobs, ids, lps);
  return completion_logprobs(*st.logprobs, ids, lps, st.text_offsets.at(e.choice));
}

// With tool calling: the calls completed so far, one chunk each.
void add_tool_call_chunks(SseState& st, uint32_t choice, std::vector<ParsedToolCall> parsed,
                          std::string& out) {
  size_t& sent = st.calls_sent.at(choice);
  for (const ToolCallOut& c :
       st.tools->to_calls(std::move(parsed), sent, [&] { return st.ctx->random(); })) {
    out += sse(tool_call_chunk(st.meta, choice, sent++, c, st.include_usage));
  }
}

std::string sse_frames(SseState& st, const std::vector<StreamEvent>& evs, bool& done) {
  std::string out;
  if (!st.opened && st.meta.endpoint == Endpoint::kChat) {
    for (size_t c = 0; c < st.num_choices; ++c) {
      out += sse(role_chunk(st.meta, static_cast<uint32_t>(c), st.include_usage));
    }
  }
  st.opened = true;
  for (const StreamEvent& e : evs) {
    switch (e.kind) {
      case Kind::kToken: {
        std::string text = e.text;
        std::vector<ParsedToolCall> calls;
        if (st.tools) text = st.parsers.at(e.choice).feed(e.text, calls);
        // A token with log-probabilities gets its chunk even while its text is held back.
        const bool with_lp = st.logprobs && e.token >= 0;
        if (st.token_ids || with_lp || !text.empty()) {
          std::vector<int32_t> ids;
          if (e.token >= 0) ids.push_back(e.token);
          ResponseJson lp;
          if (st.logprobs) lp = event_logprobs(st, e);
          out += sse(stream_chunk(st.meta, e.choice, text, std::nullopt, st.include_usage,
                                  st.token_ids ? &ids : nullptr, st.logprobs ? &lp : nullptr));
        }
        if (!calls.empty()) add_tool_call_chunks(st, e.choice, std::move(calls), out);
        break;
      }
      case Kind::kChoiceEnd:
        if (st.tools) {
          std::vector<ParsedToolCall> calls;
          const std::string rest = st.parsers.at(e.choice).finish(calls);
          if (!rest.empty()) {
            out += sse(stream_chunk(st.meta, e.choice, rest, std::nullopt, st.include_usage));
          }
          add_tool_call_chunks(st, e.choice, std::move(calls), out);
          out += sse(finish_chunk(
              st.meta, e.choice,
              st.tools->finish_reason(e.finish_reason, st.calls_sent.at(e.choice) > 0),
              st.include_usage));
          break;
        }
        out += sse(stream_chunk(st.meta, e.choice, "", e.finish_reason, st.include_usage));
        break;
      case Kind::kDone:
        if (st.include_usage) out += sse(usage_chunk(st.meta, e.usage));
        out += kSseDone;
        done = true;
        break;
      case Kind::kError:
        out += sse(e.error->to_json());
        out += kSseDone;
        done = true;
        break;
      case Kind::kAccepted:
      case Kind::kPromptLogprobs:  // echo: not with stream (request_parser.h)
        break;
    }
  }
  return out;
}

}  // namespace

void handle_completion(ServerContext& ctx, std::string_view body, httplib::Response& res,
                       Endpoint endpoint) {
  const auto arrival = EngineLoop::Clock::now();
  const ParsedRequest pr = parse_request(body, endpoint);
  ctx.check_model(pr.model);
  EnginePrompts ep = build_prompts(pr, ctx.llm, ctx.random());
  const size_t num_choices = ep.prompts.size() * static_cast<size_t>(ep.params.n);
  std::optional<EchoPrompts> echo;
  if (pr.echo) echo = echo_prompts(pr, ep, ctx.llm);
  auto stream = ctx.loop.submit(std::move(ep.prompts), ep.params, arrival);

  std::vector<StreamEvent> evs = stream->wait_all();
  if (evs.front().kind == Kind::kError) throw *evs.front().error;
  ResponseMeta meta;
  meta.endpoint = endpoint;
  const char* id_prefix = endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-";
  meta.id = pr.request_id.empty() ? ctx.new_id(id_prefix) : id_prefix + pr.request_id;
  meta.model = ctx.model_name;
  meta.created = static_cast<int64_t>(std::time(nullptr));
  std::optional<LogprobsFormat> logprobs;
  if (pr.params.logprobs >= 0) logprobs = LogprobsFormat{ctx.llm.tokenizer()};
  const std::optional<ToolOutput> tools = tool_output(pr, ctx.llm);
  if (!pr.stream) {
    respond_whole(ctx, *stream, std::move(evs), meta, num_choices, pr.return_token_ids,
                  logprobs ? &*logprobs : nullptr, echo ? &*echo : nullptr,
                  tools ? &*tools : nullptr, res);
    return;
  }
  auto st = std::make_shared<SseState>();
  st->ctx = &ctx;
  st->meta = meta;
  st->num_choices = num_choices;
  st->include_usage = pr.include_usage;
  st->token_ids = pr.return_token_ids;
  st->logprobs = logprobs;
  st->text_offsets.assign(num_choices, 0);
  st->tools = tools;
  if (tools) {
    for (size_t c = 0; c < num_choices; ++c) st->parsers.push_back(tools->parser());
    st->calls_sent.assign(num_choices, 0);
  }
  serve_sse(
      ctx, stream, std::move(evs),
      [st](const std::vector<StreamEvent>& batch, bool& done) {
        return sse_frames(*st, batch, done);
      },
      res);
}

}  // namespace kvattn::server
