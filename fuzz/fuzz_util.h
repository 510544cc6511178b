// Shared by the fuzz targets: kvattn::Error is the expected outcome for malformed input; any
// other exception escapes and libFuzzer reports it as a crash.
#pragma once

#include <cstdio>
#include <cstdlib>

#define FUZZ_ASSERT(cond)                                                  \
  do {                                                                     \
    if (!(cond)) {                                                         \
      std::fprintf(stderr, "FUZZ_ASSERT failed: %s (%s:%d)\n", #cond,      \
                   __FILE__, __LINE__);                                    \
      std::abort();                                                        \
    }                                                                      \
  } while (0)
