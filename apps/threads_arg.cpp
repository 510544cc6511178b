// --threads, shared by generate, bench and serve: 0 means automatic; a count above the cores
// this process may run on is allowed (the user may know better) but warned about, since
// oversubscribed OpenMP decode slows down sharply (issue 21: 8 threads on 2 cores, 204 -> 68
// tok/s).
#include <sched.h>

#include <charconv>
#include <cstdio>
#include <string>
#include <thread>

#include "commands.h"

namespace kvattn::cli {

int available_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  const unsigned n = std::thread::hardware_concurrency();
  return n > 0 ? static_cast<int>(n) : 1;
}

std::string threads_error(const std::string& value) {
  int n = 0;
  const char* end = value.data() + value.size();
  const auto [ptr, ec] = std::from_chars(value.data(), end, n);
  if (ec == std::errc() && ptr == end && n >= 0 && n <= kMaxThreads) return {};
  return "must be 0 (automatic) or a thread count in 1.." + std::to_string(kMaxThreads) +
         " (this machine has " + std::to_string(available_cores()) + " cores), but is '" +
         value + "'";
}

void warn_if_oversubscribed(int threads) {
  const int cores = available_cores();
  if (threads <= cores) return;
  std::fprintf(stderr,
               "kvattn: warning: --threads %d is more than the %d cores available; threads "
               "will share cores and run slower (0 picks automatically)\n",
               threads, cores);
}

}  // namespace kvattn::cli
