// POST /v1/responses: the Responses API over the chat path (responses_request.h): one output
// message, whole or streamed as the Responses API's events (responses_format.h). As with the
// other endpoints, the status is decided before any byte is sent, and a client that goes away
// mid-stream cancels its request.
#include <httplib.h>

#include <chrono>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "server/prompt_builder.h"
#include "server/responses_format.h"
#include "server/server_context.h"

namespace kvattn::server {
namespace {

using Kind = StreamEvent::Kind;
constexpr std::chrono::milliseconds kPoll{20};  // how often a waiting stream checks its client

struct ResponsesSse {
  ServerContext* ctx = nullptr;
  std::shared_ptr<RequestStream> stream;
  std::shared_ptr<const ResponsesRequest> request;
  ResponsesMeta meta;
  ResponsesEvents events;
  std::vector<StreamEvent> pending;
  std::string text;
  FinishReason finish = FinishReason::kStop;
  bool opened = false;
  bool done = false;
};

// The part of an event every content event carries.
ResponseJson at_part(const ResponsesMeta& m) {
  return {{"item_id", m.message_id}, {"output_index", 0}, {"content_index", 0}};
}

std::string opening(ResponsesSse& st) {
  const ResponseJson started =
      response_object(st.meta, "in_progress", ResponseJson::array(), nullptr);
  std::string out = st.events.frame("response.created", {{"response", started}});
  out += st.events.frame("response.in_progress", {{"response", started}});
  out += st.events.frame("response.output_item.added",
                         {{"output_index", 0},
                          {"item", output_message(st.meta, "in_progress", nullptr)}});
  ResponseJson part = at_part(st.meta);
  part["part"] = output_text_part("");
  out += st.events.frame("response.content_part.added", std::move(part));
  return out;
}

std::string closing(ResponsesSse& st, const Usage& usage) {
  const bool incomplete = st.finish == FinishReason::kLength;
  ResponseJson text_done = at_part(st.meta);
  text_done["text"] = st.text;
  text_done["logprobs"] = ResponseJson::array();
  std::string out = st.events.frame("response.output_text.done", std::move(text_done));
  ResponseJson part_done = at_part(st.meta);
  part_done["part"] = output_text_part(st.text);
  out += st.events.frame("response.content_part.done", std::move(part_done));
  out += st.events.frame(
      "response.output_item.done",
      {{"output_index", 0},
       {"item", output_message(st.meta, incomplete ? "incomplete" : "completed", &st.text)}});
  out += st.events.frame(incomplete ? "response.incomplete" : "response.completed",
                         {{"response", finished_response(st.meta, st.text, st.finish, usage)}});
  return out;
}

bool write_events(ResponsesSse& st, httplib::DataSink& sink) {
  std::vector<StreamEvent> evs;
  evs.swap(st.pending);
  if (evs.empty() && !st.stream->pop_all(evs, kPoll)) {
    if (sink.is_writable()) return true;
    st.ctx->loop.cancel(st.stream);
    return false;
  }
  std::string out;
  if (!st.opened) out = opening(st);
  st.opened = true;
  for (const StreamEvent& e : evs) {
    if (e.kind == Kind::kToken && !e.text.empty()) {
      st.text += e.text;
      ResponseJson delta = at_part(st.meta);
      delta["delta"] = e.text;
      delta["logprobs"] = ResponseJson::array();
      out += st.events.frame("response.output_text.delta", std::move(delta));
    } else if (e.kind == Kind::kChoiceEnd) {
      st.finish = e.finish_reason;
    } else if (e.kind == Kind::kDone) {
      out += closing(st, e.usage);
      st.done = true;
    } else if (e.kind == Kind::kError) {
      out += st.events.frame(
          "response.failed",
          {{"response", response_object(st.meta, "failed", ResponseJson::array(), nullptr,
                                        &*e.error)}});
      st.done = true;
    }
  }
  if (!out.empty() && !sink.write(out.data(), out.size())) {
    if (!st.done) st.ctx->loop.cancel(st.stream);
    st.done = true;
    return false;
  }
  if (st.done) sink.done();
  return true;
}

}  // namespace

void handle_responses(ServerContext& ctx, std::string_view body, httplib::Response& res) {
  const auto arrival = EngineLoop::Clock::now();
  auto request = std::make_shared<const ResponsesRequest>(parse_responses_request(body));
  ctx.check_model(request->chat.model);
  EnginePrompts ep = build_prompts(request->chat, ctx.llm, ctx.random());
  auto stream = ctx.loop.submit(std::move(ep.prompts), ep.params, arrival);
  std::vector<StreamEvent> evs = stream->wait_all();
  if (evs.front().kind == Kind::kError) throw *evs.front().error;

  ResponsesMeta meta;
  meta.id = request->chat.request_id.empty() ? ctx.new_id("resp_")
                                             : "resp_" + request->chat.request_id;
  meta.message_id = ctx.new_id("msg_");
  meta.model = ctx.model_name;
  meta.created = static_cast<int64_t>(std::time(nullptr));
  meta.request = request.get();
  if (!request->chat.stream) {
    std::string text;
    FinishReason finish = FinishReason::kStop;
    for (;;) {
      for (const StreamEvent& e : evs) {
        if (e.kind == Kind::kToken) text += e.text;
        if (e.kind == Kind::kChoiceEnd) finish = e.finish_reason;
        if (e.kind == Kind::kError) throw *e.error;
        if (e.kind == Kind::kDone) {
          res.set_content(dump(finished_response(meta, text, finish, e.usage)),
                          "application/json");
          return;
        }
      }
      evs = stream->wait_all();
    }
  }
  auto st = std::make_shared<ResponsesSse>();
  st->ctx = &ctx;
  st->stream = stream;
  st->request = request;  // meta.request points into it
  st->meta = meta;
  st->pending = std::move(evs);
  res.set_header("Cache-Control", "no-cache");
  ++ctx.open_streams;
  res.set_chunked_content_provider(
      "text/event-stream",
      [st](size_t, httplib::DataSink& sink) { return write_events(*st, sink); },
      [st](bool) {
        if (!st->done) st->ctx->loop.cancel(st->stream);  // the server stopped mid-stream
        --st->ctx->open_streams;
      });
}

}  // namespace kvattn::server
