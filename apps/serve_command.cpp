// `kvattn serve`: loads the model, serves the OpenAI API until SIGINT/SIGTERM, then shuts down
// in order (no new requests, running ones drained for --drain-s then ended, HTTP stopped) and
// exits 0 only when every KV block is free again.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "commands.h"
#include "kvattn/core/error.h"
#include "kvattn/engine/llm.h"
#ifdef KVATTN_WITH_SERVER
#include "kvattn/server/server.h"
#endif

namespace kvattn::cli {

#ifdef KVATTN_WITH_SERVER
namespace {

LLMOptions llm_options(const ServeArgs& a) {
  LLMOptions o;
  o.model = resolve_model_path(a.model);
  o.device = a.device == "cuda" ? Device::cuda(0) : Device::cpu();
  o.num_threads = a.threads;
  o.kv_cache_bytes = a.kv_cache_mb << 20;
  o.ctx_size = a.ctx_size;
  apply_kv_cache_args(a.kv, o);
  o.max_num_seqs = a.max_num_seqs;
  o.max_num_batched_tokens = a.max_num_batched_tokens;
  o.gpu_memory_utilization = a.gpu_memory_utilization;
  o.cuda_graphs = !a.eager;
  o.tensor_parallel = a.tensor_parallel;
  o.enable_prefix_caching = !a.no_prefix_caching;
  apply_weights_arg(a.weights, o);
  return o;
}

// "SmolLM2-135M-Instruct.Q4_1.gguf" -> "SmolLM2-135M-Instruct.Q4_1"; a directory: its name.
std::string model_id(const std::string& path) {
  const std::filesystem::path p = std::filesystem::path(path).lexically_normal();
  const std::filesystem::path name = p.has_filename() ? p : p.parent_path();
  return name.extension() == ".gguf" ? name.stem().string() : name.filename().string();
}

// SIGINT/SIGTERM write their number to a pipe that one thread waits on. (Blocking the signals
// and sigwait() would not do: OpenBLAS starts its threads before main(), with the signals
// unblocked, so the default action would kill the process.)
int g_signal_pipe[2] = {-1, -1};

extern "C" void on_stop_signal(int sig) {
  const unsigned char b = static_cast<unsigned char>(sig);
  [[maybe_unused]] const ssize_t n = write(g_signal_pipe[1], &b, 1);
}

void install_stop_handlers() {
  KVATTN_CHECK(pipe(g_signal_pipe) == 0, "serve: pipe() failed");
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

// Blocks until a stop signal (its number) or wake_waiter() (0).
int wait_for_signal() {
  unsigned char b = 0;
  while (read(g_signal_pipe[0], &b, 1) < 0) {
  }
  return b;
}

void wake_waiter() { on_stop_signal(0); }

}  // namespace

int run_serve(const ServeArgs& args) {
  install_stop_handlers();
  LLMOptions opt = llm_options(args);
  if (!args.quiet) std::fprintf(stderr, "kvattn serve: loading %s\n", opt.model.c_str());
  LLM llm(opt);
  warn_on_sizing(llm, opt, args.quiet);

  server::ServerOptions so;
  so.host = args.host;
  so.port = args.port;
  so.api_key = args.api_key;
  if (so.api_key.empty()) {
    if (const char* k = std::getenv("KVATTN_API_KEY")) so.api_key = k;
  }
  so.model_name = args.served_model_name.empty() ? model_id(opt.model) : args.served_model_name;
  so.max_queue = args.max_queue;
  so.drain_seconds = args.drain_s;
  so.http_threads = args.http_threads;
  so.allowed_origins = args.allowed_origins;
  server::Server srv(llm, so);
  const int port = srv.bind();
  std::printf("kvattn serve: listening on http://%s:%d (model %s, %s, %lld KV tokens)\n",
              args.host.c_str(), port, srv.model_name().c_str(), args.device.c_str(),
              static_cast<long long>(llm.kv_cache_tokens()));
  std::fflush(stdout);

  std::thread waiter([&] {
    const int sig = wait_for_signal();
    if (sig != 0) {
      std::fprintf(stderr, "kvattn serve: %s, shutting down (drain %.1f s)\n",
                   sig == SIGINT ? "SIGINT" : "SIGTERM", args.drain_s);
    }
    srv.shutdown();
  });
  const bool listened = srv.run();
  if (!listened) wake_waiter();
  waiter.join();
  KVATTN_CHECK(listened, "serve: the HTTP server stopped unexpectedly");
  llm.check_kv_cache_idle();  // throws (exit 1) when a block leaked
  const BlockManagerStats s = llm.cache_stats();
  std::printf("kvattn serve: stopped; all %lld KV blocks free\n",
              static_cast<long long>(s.num_blocks));
  return 0;
}

#else

int run_serve(const ServeArgs&) {
  KVATTN_FAIL("serve: this kvattn was built without cpp-httplib; install it "
              "(apt-get install libcpp-httplib-dev, or bash scripts/setup.sh) and rebuild");
}

#endif

}  // namespace kvattn::cli
