// Partial states of cut items: see attention_partials.h.
#include "kernels/cpu/attention_partials.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kvattn::cpu::attn {

void save_partial(const Scratch& sc, int64_t rows, int64_t d, float* slot) {
  std::copy(sc.acc.begin(), sc.acc.begin() + rows * d, slot);
  std::copy(sc.m.begin(), sc.m.begin() + rows, slot + rows * d);
  std::copy(sc.l.begin(), sc.l.begin() + rows, slot + rows * (d + 1));
}

void merge_partials(const float* first, int64_t parts, int64_t rows, int64_t d, Scratch& sc) {
  const int64_t stride = partial_floats(rows, d);
  sc.acc.assign(rows * d, 0.0f);
  sc.m.assign(rows, -std::numeric_limits<float>::infinity());
  sc.l.assign(rows, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t k = 0; k < parts; ++k) m = std::max(m, first[k * stride + rows * d + r]);
    if (m == -std::numeric_limits<float>::infinity()) continue;
    float* acc = sc.acc.data() + r * d;
    for (int64_t k = 0; k < parts; ++k) {
      const float* slot = first + k * stride;
      const float weight = std::exp(slot[rows * d + r] - m);  // 0 for a part without keys
      sc.l[r] += weight * slot[rows * (d + 1) + r];
      const float* part_acc = slot + r * d;
      for (int64_t x = 0; x < d; ++x) acc[x] += weight * part_acc[x];
    }
    sc.m[r] = m;
  }
}

}  // namespace kvattn::cpu::attn
