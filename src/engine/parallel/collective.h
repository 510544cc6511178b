// Internal: the collectives a tensor-parallel rank needs, over host float32 buffers, for
// ranks that run as threads of this process (the CPU model). GPU ranks use NcclComm.
//
// Every rank of a group must make the same calls in the same order (as with NCCL); a call
// returns when every rank has made it. Sums add the ranks' values in rank order on every
// rank, so all ranks see bit-identical results.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace kvattn {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In place: buf := sum over ranks of buf.
  virtual void all_reduce_sum(float* buf, int64_t count) = 0;
  // recv [size, count] := every rank's send [count], in rank order.
  virtual void all_gather(const float* send, float* recv, int64_t count) = 0;
};

// `size` collectives sharing one group: rank r must only be used by one thread at a time.
std::vector<std::unique_ptr<Collective>> make_thread_collectives(int size);

}  // namespace kvattn
