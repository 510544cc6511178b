#include "server/sse_body.h"

#include <httplib.h>

#include <chrono>
#include <utility>

namespace kvattn::server {
namespace {

constexpr std::chrono::milliseconds kPoll{20};  // how often a waiting stream checks its client

struct SseBody {
  ServerContext* ctx = nullptr;
  std::shared_ptr<RequestStream> stream;
  std::vector<StreamEvent> pending;
  SseFrames frames;
  bool done = false;
};

bool write_body(SseBody& b, httplib::DataSink& sink) {
  std::vector<StreamEvent> evs;
  evs.swap(b.pending);
  if (evs.empty() && !b.stream->pop_all(evs, kPoll)) {
    if (sink.is_writable()) return true;
    b.ctx->loop.cancel(b.stream);
    return false;
  }
  const std::string out = b.frames(evs, b.done);
  if (!out.empty() && !sink.write(out.data(), out.size())) {
    if (!b.done) b.ctx->loop.cancel(b.stream);
    b.done = true;
    return false;
  }
  if (b.done) sink.done();
  return true;
}

}  // namespace

void serve_sse(ServerContext& ctx, std::shared_ptr<RequestStream> stream,
               std::vector<StreamEvent> first, SseFrames frames, httplib::Response& res) {
  auto body = std::make_shared<SseBody>();
  body->ctx = &ctx;
  body->stream = std::move(stream);
  body->pending = std::move(first);
  body->frames = std::move(frames);
  res.set_header("Cache-Control", "no-cache");
  ++ctx.open_streams;
  res.set_chunked_content_provider(
      "text/event-stream",
      [body](size_t, httplib::DataSink& sink) { return write_body(*body, sink); },
      [body](bool) {
        if (!body->done) body->ctx->loop.cancel(body->stream);  // the server stopped mid-stream
        --body->ctx->open_streams;
      });
}

}  // namespace kvattn::server
