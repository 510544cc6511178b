// POST /v1/responses: the Responses API over the chat path (responses_request.h): output
// items (messages, function calls) built as the tokens come (responses_stream.h), returned
// whole or streamed as the Responses API's events. As with the other endpoints, the status is
// decided before any byte is sent, and a client that goes away mid-stream cancels its request.
#include <httplib.h>

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/prompt_builder.h"
#include "server/responses_stream.h"
#include "server/server_context.h"
#include "server/sse_body.h"
#include "server/tool_output.h"

namespace kvattn::server {
namespace {

using Kind = StreamEvent::Kind;

// One request from acceptance to its last event; the same for both modes (the whole response
// is the streamed one's final object).
struct ResponsesRun {
  ServerContext* ctx = nullptr;
  std::shared_ptr<const ResponsesRequest> request;
  ResponsesMeta meta;
  ResponsesEvents events;
  std::optional<ResponsesItems> items;
  std::optional<ToolOutput> tools;  // the text is read for function calls
  std::optional<ToolCallParser> parser;
  size_t calls_sent = 0;
  FinishReason finish = FinishReason::kStop;
  bool opened = false;
  bool done = false;
  std::optional<ApiError> error;

  std::string text_and_calls(const std::string& text, std::vector<ParsedToolCall> parsed) {
    std::string out = items->text(text);
    for (const ToolCallOut& c :
         tools->to_calls(std::move(parsed), calls_sent, [this] { return ctx->random(); })) {
      ++calls_sent;
      out += items->call(c);
    }
    return out;
  }

  // The frames for a batch of engine events (the opening ones first).
  std::string consume(const std::vector<StreamEvent>& evs) {
    std::string out;
    if (!opened) {
      const ResponseJson started =
          response_object(meta, "in_progress", ResponseJson::array(), nullptr);
      out += events.frame("response.created", {{"response", started}});
      out += events.frame("response.in_progress", {{"response", started}});
      opened = true;
    }
    for (const StreamEvent& e : evs) {
      if (e.kind == Kind::kToken) {
        if (!tools) {
          out += items->text(e.text);
          continue;
        }
        std::vector<ParsedToolCall> parsed;
        const std::string text = parser->feed(e.text, parsed);
        out += text_and_calls(text, std::move(parsed));
      } else if (e.kind == Kind::kChoiceEnd) {
        finish = e.finish_reason;
        if (!tools) continue;
        std::vector<ParsedToolCall> parsed;
        const std::string rest = parser->finish(parsed);
        out += text_and_calls(rest, std::move(parsed));
      } else if (e.kind == Kind::kDone) {
        out += items->finish(finish, e.usage);
        done = true;
      } else if (e.kind == Kind::kError) {
        error = *e.error;
        out += events.frame("response.failed",
                            {{"response", response_object(meta, "failed", ResponseJson::array(),
                                                          nullptr, &*error)}});
        done = true;
      }
    }
    return out;
  }
};

}  // namespace

void handle_responses(ServerContext& ctx, std::string_view body, httplib::Response& res) {
  const auto arrival = EngineLoop::Clock::now();
  auto request = std::make_shared<const ResponsesRequest>(parse_responses_request(body));
  ctx.check_model(request->chat.model);
  EnginePrompts ep = build_prompts(request->chat, ctx.llm, ctx.random());
  auto stream = ctx.loop.submit(std::move(ep.prompts), ep.params, arrival);
  std::vector<StreamEvent> evs = stream->wait_all();
  if (evs.front().kind == Kind::kError) throw *evs.front().error;

  auto run = std::make_shared<ResponsesRun>();
  run->ctx = &ctx;
  run->request = request;
  run->meta.id = request->chat.request_id.empty() ? ctx.new_id("resp_")
                                                  : "resp_" + request->chat.request_id;
  run->meta.model = ctx.model_name;
  run->meta.created = static_cast<int64_t>(std::time(nullptr));
  run->meta.request = request.get();
  run->items.emplace(run->meta, run->events,
                     [&ctx](const char* prefix) { return ctx.new_id(prefix); });
  run->tools = tool_output(request->chat, ctx.llm);
  if (run->tools) run->parser.emplace(run->tools->parser());
  if (!request->chat.stream) {
    for (;;) {
      run->consume(evs);
      if (run->error) throw *run->error;
      if (run->done) break;
      evs = stream->wait_all();
    }
    res.set_content(dump(run->items->response()), "application/json");
    return;
  }
  serve_sse(
      ctx, stream, std::move(evs),
      [run](const std::vector<StreamEvent>& batch, bool& done) {
        std::string out = run->consume(batch);
        done = run->done;
        return out;
      },
      res);
}

}  // namespace kvattn::server
