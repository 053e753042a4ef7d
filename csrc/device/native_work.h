// What a native collective leaves behind (native_work.cpp): its counts, and the c10d Work whose
// wait() is a stream-ordered event wait. Used by process_group.cpp's fast path, which runs a
// collective on the runtime's entry without Python.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Work.hpp>

namespace torchvendor {

// The collectives the C++ path runs, under the names sdk/device/distributed.py counts them by.
enum class NativeCollective : uint8_t {
  all_reduce,
  broadcast,
  all_gather_single,
  reduce_scatter_single,
  all_reduce_coalesced,
  all_gather_single_coalesced,
  reduce_scatter_single_coalesced,
  count_  // not a collective: the number of them
};

// Counts one collective; `op` is its c10d::ReduceOp::RedOpType, or -1 for none.
void count_native(NativeCollective collective, int op);
// {"native:all_reduce.sum": n, ...}: what count_native counted since the last reset.
std::map<std::string, int64_t> native_collective_counts();
void reset_native_collective_counts();

// A Work for collectives just enqueued on `stream`: records an event (from a pool) after them.
// wait() makes the caller's current stream wait for it (nothing when that is `stream`);
// getFuture() completes once the host sees the event, off the caller's thread, as the Python
// path's futures do.
c10::intrusive_ptr<c10d::Work> make_native_work(std::vector<at::Tensor> outputs, c10::Stream stream);

}  // namespace torchvendor
