// A progress bar on stderr for a long generate(): fed with every TokenEvent, it redraws at
// most every 100 ms on a terminal (in place) or every 5 s elsewhere (one line each). Cheap per
// token: a counter, and a clock read every 64 events.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>

#include "kvattn/engine/llm.h"

namespace kvattn::cli {

class ProgressBar {
 public:
  ProgressBar(int64_t total_tokens, int64_t total_seqs, bool tty)
      : total_tokens_(total_tokens), total_seqs_(total_seqs), tty_(tty),
        start_(Clock::now()), last_(start_) {}

  void on_event(const TokenEvent& e) {
    if (e.token >= 0) ++tokens_;
    if (e.finished) ++done_;
    if ((++events_ & 63) == 0) maybe_draw();
  }
  void finish() {
    draw();
    if (tty_) std::fputc('\n', stderr);
  }

 private:
  using Clock = std::chrono::steady_clock;

  void maybe_draw() {
    const auto now = Clock::now();
    if (now - last_ < (tty_ ? std::chrono::milliseconds(100) : std::chrono::seconds(5))) return;
    last_ = now;
    draw();
  }
  void draw() const {
    const double frac = total_tokens_ > 0 ? static_cast<double>(tokens_) / total_tokens_ : 1.0;
    const double secs = std::chrono::duration<double>(Clock::now() - start_).count();
    constexpr int kWidth = 30;
    char bar[kWidth + 1];
    const int filled = static_cast<int>(frac * kWidth + 0.5);
    for (int i = 0; i < kWidth; ++i) bar[i] = i < filled ? '#' : '-';
    bar[kWidth] = '\0';
    std::fprintf(stderr, "%s[%s] %3.0f%% %lld/%lld seqs %lld/%lld tok %.0f tok/s%s",
                 tty_ ? "\r" : "", bar, frac * 100.0, static_cast<long long>(done_),
                 static_cast<long long>(total_seqs_), static_cast<long long>(tokens_),
                 static_cast<long long>(total_tokens_), secs > 0 ? tokens_ / secs : 0.0,
                 tty_ ? "" : "\n");
    std::fflush(stderr);
  }

  int64_t total_tokens_, total_seqs_;
  bool tty_;
  Clock::time_point start_, last_;
  int64_t tokens_ = 0, done_ = 0, events_ = 0;
};

}  // namespace kvattn::cli
