#include "engine/parallel/collective.h"

#include <barrier>
#include <cstring>

#include "kvattn/core/error.h"

namespace kvattn {
namespace {

// What the ranks of one group share: a barrier and each rank's published buffer.
struct Group {
  explicit Group(int n) : sync(n), sources(static_cast<size_t>(n), nullptr) {}
  std::barrier<> sync;
  std::vector<const float*> sources;
};

class ThreadCollective final : public Collective {
 public:
  ThreadCollective(std::shared_ptr<Group> g, int rank, int size)
      : group_(std::move(g)), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce_sum(float* buf, int64_t count) override {
    KVATTN_CHECK(count >= 0, "Collective::all_reduce_sum: count must be >= 0 but is ", count);
    if (size_ == 1 || count == 0) return;
    sum_.resize(static_cast<size_t>(count));
    group_->sources[rank_] = buf;
    group_->sync.arrive_and_wait();  // every buffer is published
    std::memcpy(sum_.data(), group_->sources[0], static_cast<size_t>(count) * sizeof(float));
    for (int r = 1; r < size_; ++r) {
      const float* src = group_->sources[r];
      for (int64_t i = 0; i < count; ++i) sum_[i] += src[i];
    }
    group_->sync.arrive_and_wait();  // every rank has read every buffer
    std::memcpy(buf, sum_.data(), static_cast<size_t>(count) * sizeof(float));
  }

  void all_gather(const float* send, float* recv, int64_t count) override {
    KVATTN_CHECK(count >= 0, "Collective::all_gather: count must be >= 0 but is ", count);
    if (count == 0) return;  // every rank has the same count: no rank waits at the barrier
    if (size_ == 1) {
      if (recv != send) std::memmove(recv, send, count * sizeof(float));
      return;
    }
    group_->sources[rank_] = send;
    group_->sync.arrive_and_wait();
    for (int r = 0; r < size_; ++r) {
      std::memcpy(recv + r * count, group_->sources[r], static_cast<size_t>(count) * sizeof(float));
    }
    group_->sync.arrive_and_wait();
  }

 private:
  std::shared_ptr<Group> group_;
  int rank_, size_;
  std::vector<float> sum_;
};

}  // namespace

std::vector<std::unique_ptr<Collective>> make_thread_collectives(int size) {
  KVATTN_CHECK(size >= 1, "make_thread_collectives: size must be >= 1 but is ", size);
  auto group = std::make_shared<Group>(size);
  std::vector<std::unique_ptr<Collective>> out;
  for (int r = 0; r < size; ++r) out.push_back(std::make_unique<ThreadCollective>(group, r, size));
  return out;
}

}  // namespace kvattn
