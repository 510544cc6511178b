// The HTTP side of kvattn::server::Server: routes, the API key, OpenAI-shaped errors for every
// failure (including httplib's own 404 / 413), and the start/stop order.
#include "kvattn/server/server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <chrono>
#include <ctime>
#include <exception>
#include <thread>

#include "kvattn/core/error.h"
#include "server/api_error.h"
#include "server/openai_format.h"
#include "server/server_context.h"

namespace kvattn::server {
namespace {

constexpr const char* kKvattnVersion = KVATTN_VERSION;  // the project's (CMakeLists.txt)

using Json = nlohmann::json;

// httplib 0.11 listens with a backlog of 5: a burst of clients (32 streams connecting at once)
// overflows it and some connections fail. listen() again on the bound socket raises it.
class HttpServer : public httplib::Server {
 public:
  void raise_backlog(int n) { ::listen(svr_sock_, n); }
};

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status();
  res.set_content(dump(e.to_json()), "application/json");
}

// Runs f; ApiError becomes the response, anything else a 500.
template <typename F>
void respond_guarded(httplib::Response& res, F&& f) {
  try {
    f();
  } catch (const ApiError& e) {
    send_error(res, e);
  } catch (const std::exception& e) {
    send_error(res, ApiError(500, std::string("internal error: ") + e.what()));
  }
}

// A route's handler, guarded (respond_guarded).
template <typename F>
httplib::Server::Handler guarded(F f) {
  return [f](const httplib::Request& req, httplib::Response& res) {
    respond_guarded(res, [&] { f(req, res); });
  };
}

// A POST route's handler over its whole body, read here whatever the Content-Type says: httplib
// would otherwise parse an application/x-www-form-urlencoded body (curl -d's default) as a
// form and refuse one over 8 KiB with a 413. The body limit (max_body_bytes) still applies.
// A multipart body is read to its end (the connection stays in step) and refused: the API
// takes JSON.
template <typename F>
httplib::Server::HandlerWithContentReader with_body(F f) {
  return [f](const httplib::Request& req, httplib::Response& res,
             const httplib::ContentReader& reader) {
    respond_guarded(res, [&] {
      std::string body;
      bool read = false;
      if (req.is_multipart_form_data()) {
        read = reader([](const httplib::MultipartFormData&) { return true; },
                      [](const char*, size_t) { return true; });
      } else {
        read = reader([&body](const char* data, size_t n) {
          body.append(data, n);
          return true;
        });
      }
      if (!read && res.status == 413) {
        throw ApiError(413, "The request body is too large", "", "payload_too_large");
      }
      if (req.is_multipart_form_data()) {
        throw bad_request("the request body must be JSON (Content-Type: application/json), not "
                          "multipart/form-data",
                          "", "invalid_json");
      }
      if (!read) {
        throw bad_request("the request body could not be read (a POST takes a JSON body, sent "
                          "with Content-Length or chunked)",
                          "", "invalid_json");
      }
      f(std::string_view(body), res);
    });
  };
}

// CORS (vLLM's CORSMiddleware, whose default allows every origin): the origin to allow for
// this request's Origin header, or empty for none.
std::string allowed_origin(const ServerOptions& o, const httplib::Request& req) {
  if (!req.has_header("Origin")) return {};
  const std::string origin = req.get_header_value("Origin");
  for (const std::string& a : o.allowed_origins) {
    if (a == "*") return "*";
    if (a == origin) return origin;
  }
  return {};
}

// A CORS preflight (OPTIONS with Origin and Access-Control-Request-Method): answered before
// the API key check, as browsers send preflights without credentials. False: not one.
bool answer_preflight(const ServerOptions& o, const httplib::Request& req,
                      httplib::Response& res) {
  if (req.method != "OPTIONS" || !req.has_header("Access-Control-Request-Method")) return false;
  const std::string origin = allowed_origin(o, req);
  if (origin.empty()) return false;
  res.status = 200;
  res.set_header("Access-Control-Allow-Origin", origin);
  res.set_header("Access-Control-Allow-Methods", "GET, HEAD, OPTIONS, POST");
  const std::string asked = req.get_header_value("Access-Control-Request-Headers");
  if (!asked.empty()) res.set_header("Access-Control-Allow-Headers", asked);
  res.set_header("Access-Control-Max-Age", "600");
  if (origin != "*") res.set_header("Vary", "Origin");
  return true;
}

// The routes and their methods, for a 405 (FastAPI's, vLLM's) where a known path is asked
// with another method; GET routes also answer HEAD (httplib). Every route also answers with
// one trailing slash (vLLM redirects those to the route).
std::string without_trailing_slash(std::string path) {
  if (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}
bool is_post_route(const std::string& p) {
  const std::string path = without_trailing_slash(p);
  return path == "/v1/completions" || path == "/v1/chat/completions" || path == "/tokenize" ||
         path == "/detokenize";
}
bool is_get_route(const std::string& p) {
  const std::string path = without_trailing_slash(p);
  return path == "/v1/models" || path.rfind("/v1/models/", 0) == 0 || path == "/health" ||
         path == "/metrics" || path == "/version";
}

Json model_card(const ServerContext& ctx) {
  return {{"id", ctx.model_name},
          {"object", "model"},
          {"created", ctx.created},
          {"owned_by", "kvattn"},
          {"max_model_len", ctx.llm.max_model_len()}};
}

}  // namespace

ServerContext::ServerContext(LLM& llm_, ServerOptions options_, std::string model_name_)
    : llm(llm_), options(std::move(options_)), model_name(std::move(model_name_)),
      created(static_cast<int64_t>(std::time(nullptr))),
      loop(llm_, metrics, options.max_queue), rng_(std::random_device{}()) {}

uint64_t ServerContext::random() {
  std::lock_guard<std::mutex> lock(rng_mu_);
  return rng_();
}

void ServerContext::check_model(const std::string& model) const {
  if (!model.empty() && model != model_name) {
    throw ApiError(404, "The model '" + model + "' does not exist; this server serves '" +
                            model_name + "'",
                   "model", "model_not_found");
  }
}

std::string ServerContext::new_id(const char* prefix) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(random()));
  return std::string(prefix) + buf;
}

struct Server::Impl {
  Impl(LLM& llm, ServerOptions o)
      : ctx(llm, o, o.model_name.empty() ? std::string("kvattn") : o.model_name) {}
  ServerContext ctx;
  HttpServer http;
  std::mutex stop_mu;
  bool stopped = false;
};

Server::Server(LLM& llm, ServerOptions options)
    : impl_(std::make_unique<Impl>(llm, std::move(options))) {
  ServerContext& ctx = impl_->ctx;
  httplib::Server& http = impl_->http;
  const int threads = std::max(1, ctx.options.http_threads);
  http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  http.set_payload_max_length(ctx.options.max_body_bytes);
  http.set_tcp_nodelay(true);

  http.set_pre_routing_handler([&ctx](const httplib::Request& req, httplib::Response& res) {
    if (answer_preflight(ctx.options, req, res)) return httplib::Server::HandlerResponse::Handled;
    if (ctx.options.api_key.empty() || req.path.rfind("/v1/", 0) != 0) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    if (req.get_header_value("Authorization") == "Bearer " + ctx.options.api_key) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    send_error(res, ApiError(401, req.has_header("Authorization")
                                      ? "Incorrect API key provided"
                                      : "Missing API key: send 'Authorization: Bearer <key>'",
                             "", "invalid_api_key"));
    return httplib::Server::HandlerResponse::Handled;
  });
  http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const bool post = is_post_route(req.path), get = is_get_route(req.path);
    if (res.status == 404 && (post || get)) {
      res.set_header("Allow", post ? "POST" : "GET, HEAD");
      send_error(res, ApiError(405, req.method + " is not allowed on " + req.path + " (use " +
                                        (post ? "POST" : "GET") + ")",
                               "", "method_not_allowed"));
    } else if (res.status == 404) {
      send_error(res, ApiError(404, "Unknown route: " + req.method + " " + req.path, "",
                               "unknown_url"));
    } else if (res.status == 413) {
      send_error(res, ApiError(413, "The request body is too large", "", "payload_too_large"));
    } else if (res.status == 400) {
      send_error(res, bad_request("the HTTP request could not be parsed", "", "invalid_request"));
    } else {
      send_error(res, ApiError(res.status, "HTTP error " + std::to_string(res.status)));
    }
  });
  http.set_post_routing_handler([&ctx](const httplib::Request& req, httplib::Response& res) {
    const std::string origin = allowed_origin(ctx.options, req);
    if (origin.empty() || res.has_header("Access-Control-Allow-Origin")) return;
    res.set_header("Access-Control-Allow-Origin", origin);
    if (origin != "*") res.set_header("Vary", "Origin");
  });
  http.set_logger([&ctx](const httplib::Request&, const httplib::Response& res) {
    if (res.status >= 400) ctx.metrics.http_error(res.status);
  });

  http.Post("/v1/completions/?", with_body([&ctx](std::string_view body, auto& res) {
              handle_completion(ctx, body, res, Endpoint::kCompletions);
            }));
  http.Post("/v1/chat/completions/?", with_body([&ctx](std::string_view body, auto& res) {
              handle_completion(ctx, body, res, Endpoint::kChat);
            }));
  http.Post("/v1/responses/?", with_body([&ctx](std::string_view body, auto& res) {
              handle_responses(ctx, body, res);
            }));
  http.Post("/tokenize/?", with_body([&ctx](std::string_view body, auto& res) {
              handle_tokenize(ctx, body, res);
            }));
  http.Post("/detokenize/?", with_body([&ctx](std::string_view body, auto& res) {
              handle_detokenize(ctx, body, res);
            }));
  http.Get("/v1/models/?", guarded([&ctx](const auto&, auto& res) {
             const Json list = {{"object", "list"}, {"data", Json::array({model_card(ctx)})}};
             res.set_content(dump(list), "application/json");
           }));
  http.Get("/v1/models/([^/]+)/?", guarded([&ctx](const httplib::Request& req, auto& res) {
             if (req.matches[1] != ctx.model_name) {
               throw ApiError(404, "The model '" + std::string(req.matches[1]) +
                                       "' does not exist",
                              "model", "model_not_found");
             }
             res.set_content(dump(model_card(ctx)), "application/json");
           }));
  // /health, and vLLM's /ping (GET or POST; load balancers' probe): 200 while serving.
  const auto health = [&ctx](const auto&, auto& res) {
    if (ctx.shutting_down) {
      send_error(res, ApiError(503, "the server is shutting down", "", "shutting_down"));
    } else {
      res.set_content("{\"status\":\"ok\"}", "application/json");
    }
  };
  http.Get("/health/?", health);
  http.Get("/ping/?", health);
  http.Post("/ping/?", health);
  http.Get("/version/?", [](const auto&, auto& res) {
    res.set_content(dump(Json{{"version", kKvattnVersion}}), "application/json");
  });
  http.Get("/metrics/?", [&ctx](const auto&, auto& res) {
    res.set_content(ctx.metrics.render(), "text/plain; version=0.0.4; charset=utf-8");
  });
}

Server::~Server() { shutdown(); }

int Server::bind() {
  const ServerOptions& o = impl_->ctx.options;
  int port = o.port;
  if (port == 0) {
    port = impl_->http.bind_to_any_port(o.host);
  } else if (!impl_->http.bind_to_port(o.host, port)) {
    port = -1;
  }
  KVATTN_CHECK(port > 0, "serve: cannot listen on ", o.host, ":", o.port,
               " (address in use, or not a local address)");
  impl_->http.raise_backlog(SOMAXCONN);
  return port;
}

bool Server::run() { return impl_->http.listen_after_bind(); }

void Server::shutdown() {
  std::lock_guard<std::mutex> lock(impl_->stop_mu);
  if (impl_->stopped) return;
  impl_->stopped = true;
  ServerContext& ctx = impl_->ctx;
  ctx.shutting_down = true;
  // The engine first: every open stream gets its last event, so no handler is left waiting
  // when the HTTP server joins its threads.
  ctx.loop.shutdown(std::chrono::duration<double>(ctx.options.drain_seconds));
  // Let the streams write their last event before httplib stops calling their providers
  // (bounded: a client that does not read cannot hold the shutdown).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (ctx.open_streams > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  impl_->http.stop();
}

const std::string& Server::model_name() const { return impl_->ctx.model_name; }

}  // namespace kvattn::server
