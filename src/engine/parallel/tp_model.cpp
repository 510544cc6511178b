#include "engine/parallel/tp_model.h"

#ifdef KVATTN_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/model/factories.h"
#include "engine/parallel/collective.h"
#include "engine/parallel/nccl_comm.h"
#include "engine/parallel/sharding.h"
#include "kvattn/core/error.h"

namespace kvattn {
namespace {

// One worker thread per rank > 0; run() hands every rank the same job and returns when all
// are done, rethrowing the first error.
class RankThreads {
 public:
  explicit RankThreads(int ranks) {
    for (int r = 1; r < ranks; ++r) threads_.emplace_back([this, r] { loop(r); });
    errors_.resize(static_cast<size_t>(ranks));
  }
  ~RankThreads() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

  void run(const std::function<void(int rank)>& job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = &job;
      pending_ = static_cast<int>(threads_.size());
      ++generation_;
    }
    cv_.notify_all();
    try {
      job(0);
    } catch (...) {
      errors_[0] = std::current_exception();
    }
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return pending_ == 0; });
    job_ = nullptr;
    for (auto& e : errors_) {
      if (e) {
        auto first = e;
        for (auto& x : errors_) x = nullptr;
        std::rethrow_exception(first);
      }
    }
  }

 private:
  void loop(int rank) {
    uint64_t seen = 0;
    for (;;) {
      const std::function<void(int)>* job = nullptr;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        job = job_;
      }
      try {
        (*job)(rank);
      } catch (...) {
        errors_[rank] = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_.notify_all();
    }
  }

  std::vector<std::thread> threads_;
  std::vector<std::exception_ptr> errors_;
  std::mutex mu_;
  std::condition_variable cv_, done_;
  const std::function<void(int)>* job_ = nullptr;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

class TensorParallelModel final : public Model {
 public:
  TensorParallelModel(ModelWeights full, Device device, const ModelOptions& options)
      : cfg_(full.config), device_(device) {
    const int n = options.tensor_parallel;
    check_tensor_parallel(cfg_, {0, n});
    ModelOptions rank_options = options;
    rank_options.tensor_parallel = 1;
    if (device.is_cpu()) {
      comms_ = make_thread_collectives(n);
      for (int r = 0; r < n; ++r) {
        RankContext ctx{r, n, cfg_.vocab_size, comms_[r].get(), nullptr};
        ranks_.push_back(make_cpu_model(shard_weights(full, {r, n}), rank_options, ctx));
      }
    } else {
#if defined(KVATTN_WITH_CUDA) && defined(KVATTN_WITH_NCCL)
      int visible = 0;
      if (cudaGetDeviceCount(&visible) != cudaSuccess) visible = 0;
      KVATTN_CHECK(device.index + n <= visible, "Model: tensor_parallel ", n, " from ", device,
                   " needs GPUs ", device.index, "..", device.index + n - 1, " but ", visible,
                   " are visible");
      std::vector<int> devices;
      for (int r = 0; r < n; ++r) devices.push_back(device.index + r);
      nccl_ = NcclComm::create(devices);
      for (int r = 0; r < n; ++r) {
        RankContext ctx{r, n, cfg_.vocab_size, nullptr, nccl_[r].get()};
        ranks_.push_back(make_cuda_model(shard_weights(full, {r, n}), Device::cuda(devices[r]),
                                         rank_options, ctx));
      }
#else
      KVATTN_FAIL("Model: tensor_parallel ", n, " on ", device,
                  " needs NCCL, which this build lacks (set KVATTN_NCCL_ROOT, or install the "
                  "nvidia-nccl wheel, and rebuild)");
#endif
    }
    full = ModelWeights();  // the shards are copies: free the full weights
    threads_ = std::make_unique<RankThreads>(n);
    rank_logits_.resize(static_cast<size_t>(n));
    rank_tokens_.resize(static_cast<size_t>(n));
    rank_budget_.resize(static_cast<size_t>(n));
  }

  const ModelConfig& config() const override { return cfg_; }
  Device device() const override { return device_; }
  DType kv_dtype() const override { return ranks_[0]->kv_dtype(); }

  // In parallel: a CUDA rank may capture graphs (with collectives) here.
  void allocate_kv_cache(int64_t num_blocks, int64_t block_size) override {
    threads_->run([&](int r) { ranks_[r]->allocate_kv_cache(num_blocks, block_size); });
  }
  int64_t num_kv_blocks() const override { return ranks_[0]->num_kv_blocks(); }
  int64_t kv_block_size() const override { return ranks_[0]->kv_block_size(); }

  void copy_kv_blocks(std::span<const BlockCopy> copies) override {
    threads_->run([&](int r) { ranks_[r]->copy_kv_blocks(copies); });
  }

  bool samples_on_device() const override { return ranks_[0]->samples_on_device(); }

  // Every rank draws from the same gathered logits with the same (seed, stream, step): their
  // tokens agree; rank 0's are returned (and its logits, when asked).
  void forward_sample(const ModelInput& in, std::span<const RowSampling> rows,
                      std::span<int32_t> tokens, std::span<const int32_t> copy_rows,
                      std::span<float> logits) override {
    threads_->run([&](int r) {
      std::span<int32_t> out = tokens;
      if (r > 0) {
        rank_tokens_[r].resize(tokens.size());
        out = rank_tokens_[r];
      }
      ranks_[r]->forward_sample(in, rows, out, r == 0 ? copy_rows : std::span<const int32_t>{},
                                r == 0 ? logits : std::span<float>{});
    });
  }

  // Each rank's budget holds its 1/N share of every block: the pool can take N times the
  // smallest rank budget in full-model block bytes.
  int64_t kv_cache_budget(int64_t max_num_batched_tokens, double memory_fraction) override {
    threads_->run([&](int r) {
      rank_budget_[r] = ranks_[r]->kv_cache_budget(max_num_batched_tokens, memory_fraction);
    });
    int64_t least = rank_budget_[0];
    for (int64_t b : rank_budget_) least = std::min(least, b);
    return least * static_cast<int64_t>(ranks_.size());
  }

  void forward(const ModelInput& in, std::span<float> logits) override {
    // Every rank computes the whole gathered logits; rank 0 writes the caller's buffer.
    threads_->run([&](int r) {
      std::span<float> out = logits;
      if (r > 0) {
        rank_logits_[r].resize(logits.size());
        out = rank_logits_[r];
      }
      ranks_[r]->forward(in, out);
    });
  }

 private:
  ModelConfig cfg_;
  Device device_;
  std::vector<std::unique_ptr<Collective>> comms_;
#ifdef KVATTN_WITH_NCCL
  std::vector<std::unique_ptr<NcclComm>> nccl_;  // destroyed after the ranks (declared first)
#endif
  std::vector<std::unique_ptr<Model>> ranks_;
  std::unique_ptr<RankThreads> threads_;
  std::vector<std::vector<float>> rank_logits_;
  std::vector<std::vector<int32_t>> rank_tokens_;
  std::vector<int64_t> rank_budget_;
};

}  // namespace

std::unique_ptr<Model> make_tensor_parallel_model(ModelWeights weights, Device device,
                                                  const ModelOptions& options) {
  return std::make_unique<TensorParallelModel>(std::move(weights), device, options);
}

}  // namespace kvattn
