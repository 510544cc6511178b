// The OpenAI error shape: every failure the server reports is an ApiError, sent as
//   {"error": {"message": ..., "type": ..., "param": ... | null, "code": ... | null}}
// with its HTTP status (400 bad request, 401 API key, 404 route or model, 413 body too large,
// 503 queue full or shutting down, 500 an engine failure).
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace kvattn::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, const std::string& message, std::string param = {}, std::string code = {});
  int status() const { return status_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }
  // OpenAI's error type for the status: invalid_request_error (4xx), server_error (5xx), ...
  std::string type() const;
  nlohmann::json to_json() const;

 private:
  int status_;
  std::string param_, code_;
};

// 400 with code "invalid_value" unless another code is given.
ApiError bad_request(const std::string& message, const std::string& param = {},
                     const std::string& code = "invalid_value");

}  // namespace kvattn::server
