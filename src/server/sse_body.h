// The streamed body (Server-Sent Events) of one engine request, shared by the endpoints:
// `frames` turns each batch of the request's events into the bytes to send and sets `done`
// with the last of them. While no event comes the client's connection is checked every 20 ms;
// a client found gone, or a write that fails, cancels the request, as does a server that stops
// before the last frame. The caller has decided the status (the engine accepted the request).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "server/request_stream.h"
#include "server/server_context.h"

namespace httplib {
struct Response;
}  // namespace httplib

namespace kvattn::server {

using SseFrames = std::function<std::string(const std::vector<StreamEvent>& events, bool& done)>;

// `first`: events already taken from the stream (the acceptance's batch).
void serve_sse(ServerContext& ctx, std::shared_ptr<RequestStream> stream,
               std::vector<StreamEvent> first, SseFrames frames, httplib::Response& res);

}  // namespace kvattn::server
