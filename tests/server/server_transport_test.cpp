// The server's HTTP transport, in-process on the tiny Qwen3 checkpoint (server_fixture.h):
//  - a JSON body is read as JSON whatever its Content-Type (curl -d sends form-urlencoded;
//    httplib alone refused such bodies over 8 KiB with a 413), up to max_body_bytes;
//    multipart and empty bodies get a 400 naming the problem;
//  - an error only the model can see (a logit_bias id past the vocabulary) names its field;
//  - a known path with the wrong method is a 405 naming the right one; every route answers
//    with a trailing slash too; vLLM's /version and /ping;
//  - CORS as vLLM's default: every origin allowed, preflights answered without the API key;
//    a list of origins allows those alone; an empty list sends no CORS headers.
#include <gtest/gtest.h>
#include <httplib.h>

#include <string>

#include "server_fixture.h"

namespace kvattn::server {
namespace {

using test_server::completion_body;
using test_server::expect_error;
using test_server::Ids;
using test_server::Json;
using test_server::Running;

constexpr const char* kForm = "application/x-www-form-urlencoded";

// The generated ids of a whole (not streamed) completion response.
Ids ids_of(const httplib::Result& r) {
  EXPECT_TRUE(r);
  if (!r) return {};
  EXPECT_EQ(r->status, 200) << r->body;
  return Json::parse(r->body)["choices"][0]["token_ids"].get<Ids>();
}

TEST(ServerTransport, BodyIsJsonWhateverTheContentType) {
  ServerOptions o;
  o.max_body_bytes = 64 << 10;
  Running s(o);
  auto c = s.client();
  c.set_keep_alive(true);  // one connection: every refusal must leave it in step
  Json b = completion_body({5, 6, 7}, 4, false);
  b["user"] = std::string(20000, 'u');  // a 20 KB body: past httplib's 8 KiB form limit
  const std::string body = b.dump();
  const Ids want = ids_of(c.Post("/v1/completions", body, "application/json"));
  ASSERT_EQ(want.size(), 4u);
  EXPECT_EQ(ids_of(c.Post("/v1/completions", body, kForm)), want);
  EXPECT_EQ(ids_of(c.Post("/v1/completions", body, "text/plain")), want);

  b["user"] = std::string(70000, 'u');  // past max_body_bytes, in either content type
  for (const char* type : {"application/json", kForm}) {
    auto big = c.Post("/v1/completions", b.dump(), type);
    expect_error(big, 413);
    EXPECT_EQ(Json::parse(big->body)["error"]["code"], "payload_too_large") << type;
  }
  auto empty = c.Post("/v1/completions", "", "application/json");
  expect_error(empty, 400);
  EXPECT_EQ(Json::parse(empty->body)["error"]["code"], "invalid_json");
  httplib::MultipartFormDataItems parts = {{"prompt", "[5, 6]", "", ""}};
  auto multipart = c.Post("/v1/completions", parts);
  expect_error(multipart, 400);
  EXPECT_NE(Json::parse(multipart->body)["error"]["message"].get<std::string>().find("multipart"),
            std::string::npos);
  EXPECT_EQ(ids_of(c.Post("/v1/completions", body, kForm)), want);  // still serving
  c.stop();  // close the kept-alive connection: the server's stop would wait out its 5 s idle
  s.stop();
}

TEST(ServerTransport, LogitBiasOutsideTheVocabularyNamesIt) {
  Running s;
  auto c = s.client();
  Json b = completion_body({5, 6}, 2, false);
  b["logit_bias"] = {{"320", 5}};  // the vocabulary is [0, 320)
  auto r = c.Post("/v1/completions", b.dump(), "application/json");
  expect_error(r, 400, "logit_bias");
  const Json e = Json::parse(r->body)["error"];
  EXPECT_EQ(e["code"], "invalid_value");
  const std::string message = e["message"].get<std::string>();
  EXPECT_NE(message.find("320"), std::string::npos) << message;
  EXPECT_EQ(message.find(".cpp"), std::string::npos) << message;  // no source locations
  b["logit_bias"] = {{"319", 5}};
  EXPECT_EQ(c.Post("/v1/completions", b.dump(), "application/json")->status, 200);
  s.stop();
}

// A known path asked with another method: 405 with Allow (FastAPI's, vLLM's), not 404.
TEST(ServerTransport, WrongMethodIs405) {
  Running s;
  auto c = s.client();
  auto get = c.Get("/v1/chat/completions");
  expect_error(get, 405);
  EXPECT_EQ(get->get_header_value("Allow"), "POST");
  EXPECT_EQ(Json::parse(get->body)["error"]["code"], "method_not_allowed");
  auto post = c.Post("/v1/models", "{}", "application/json");
  expect_error(post, 405);
  EXPECT_EQ(post->get_header_value("Allow"), "GET, HEAD");
  expect_error(c.Post("/health", "{}", "application/json"), 405);
  auto unknown = c.Get("/v1/nothing");
  expect_error(unknown, 404);
  EXPECT_EQ(Json::parse(unknown->body)["error"]["code"], "unknown_url");
  s.stop();
}

// Routes with one trailing slash are the routes (vLLM redirects them); vLLM's /version and
// /ping (GET and POST) answer.
TEST(ServerTransport, TrailingSlashVersionAndPing) {
  Running s;
  auto c = s.client();
  const Ids want = ids_of(c.Post("/v1/completions", completion_body({5, 6}, 3, false).dump(),
                                 "application/json"));
  EXPECT_EQ(ids_of(c.Post("/v1/completions/", completion_body({5, 6}, 3, false).dump(),
                          "application/json")),
            want);
  for (const char* path : {"/v1/models/", "/v1/models/tiny/", "/health/", "/metrics/"}) {
    auto r = c.Get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 200) << path << ": " << r->body;
  }
  EXPECT_EQ(Json::parse(c.Get("/v1/models/")->body)["data"][0]["id"], "tiny");
  expect_error(c.Get("/v1/models/other/"), 404, "model");
  expect_error(c.Get("/v1/chat/completions/"), 405);
  auto v = c.Get("/version");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->status, 200);
  EXPECT_FALSE(Json::parse(v->body)["version"].get<std::string>().empty());
  EXPECT_EQ(c.Get("/ping")->status, 200);
  EXPECT_EQ(c.Post("/ping", "", "text/plain")->status, 200);
  s.stop();
}

TEST(ServerTransport, CorsAllowsEveryOriginByDefault) {
  ServerOptions o;
  o.api_key = "sekrit";
  Running s(o);
  auto c = s.client();
  // A preflight carries no credentials: answered before the key check.
  auto pre = c.Options("/v1/chat/completions",
                       {{"Origin", "https://app.example"},
                        {"Access-Control-Request-Method", "POST"},
                        {"Access-Control-Request-Headers", "authorization, content-type"}});
  ASSERT_TRUE(pre);
  EXPECT_EQ(pre->status, 200) << pre->body;
  EXPECT_EQ(pre->get_header_value("Access-Control-Allow-Origin"), "*");
  EXPECT_NE(pre->get_header_value("Access-Control-Allow-Methods").find("POST"), std::string::npos);
  EXPECT_EQ(pre->get_header_value("Access-Control-Allow-Headers"), "authorization, content-type");

  c.set_bearer_token_auth("sekrit");
  auto r = c.Post("/v1/completions", {{"Origin", "https://app.example"}},
                  completion_body({5, 6}, 2, false).dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "*");
  auto err = c.Get("/v1/nothing", {{"Origin", "https://app.example"}});  // errors carry it too
  expect_error(err, 404);
  EXPECT_EQ(err->get_header_value("Access-Control-Allow-Origin"), "*");
  auto plain = c.Get("/v1/models");  // no Origin: no CORS headers
  ASSERT_TRUE(plain);
  EXPECT_FALSE(plain->has_header("Access-Control-Allow-Origin"));
  c.set_bearer_token_auth("");
  auto no_key = c.Post("/v1/completions", {{"Origin", "https://app.example"}},
                       completion_body({5, 6}, 2, false).dump(), "application/json");
  expect_error(no_key, 401);  // CORS does not open the API
  s.stop();
}

TEST(ServerTransport, CorsListedOriginsOnly) {
  ServerOptions o;
  o.allowed_origins = {"https://a.example"};
  Running s(o);
  auto c = s.client();
  auto a = c.Get("/v1/models", {{"Origin", "https://a.example"}});
  ASSERT_TRUE(a);
  EXPECT_EQ(a->get_header_value("Access-Control-Allow-Origin"), "https://a.example");
  EXPECT_EQ(a->get_header_value("Vary"), "Origin");
  auto b = c.Get("/v1/models", {{"Origin", "https://b.example"}});
  ASSERT_TRUE(b);
  EXPECT_EQ(b->status, 200);
  EXPECT_FALSE(b->has_header("Access-Control-Allow-Origin"));
  auto pre = c.Options("/v1/completions", {{"Origin", "https://b.example"},
                                           {"Access-Control-Request-Method", "POST"}});
  ASSERT_TRUE(pre);
  EXPECT_NE(pre->status, 200);
  EXPECT_FALSE(pre->has_header("Access-Control-Allow-Origin"));
  s.stop();

  ServerOptions off;
  off.allowed_origins.clear();
  Running t(off);
  auto d = t.client();
  auto r = d.Get("/v1/models", {{"Origin", "https://a.example"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_FALSE(r->has_header("Access-Control-Allow-Origin"));
  t.stop();
}

}  // namespace
}  // namespace kvattn::server
