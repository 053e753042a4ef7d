// The Work a native collective returns, its events and its counts (native_work.h). Why events come
// from a pool: a collective of a few KiB takes microseconds, and creating and destroying a runtime
// event per call (the CUDA runtime: cuEventCreate and cuEventDestroy) was part of the fixed cost
// per call that kept small messages below NCCL's own process group.
#include "native_work.h"

#include "tv_device.h"

#include <ATen/core/ivalue.h>
#include <c10/core/Event.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

namespace torchvendor {
namespace {

constexpr int kOps = 6;  // none, then c10d's RedOpType SUM, AVG, PRODUCT, MIN, MAX (0..4)
constexpr const char* kNames[] = {"all_reduce", "broadcast", "all_gather_single", "reduce_scatter_single",
                                  "all_reduce_coalesced", "all_gather_single_coalesced",
                                  "reduce_scatter_single_coalesced"};
constexpr const char* kOpNames[] = {"", ".sum", ".avg", ".product", ".min", ".max"};
static_assert(std::size(kNames) == static_cast<size_t>(NativeCollective::count_));

std::array<std::atomic<int64_t>, static_cast<size_t>(NativeCollective::count_) * kOps> g_counts{};

// Runtime events of finished works, per device, recorded again by later collectives. Leaked on
// purpose: destroying them at exit would call into a runtime that may be gone.
struct EventPool {
  std::mutex mu;
  std::vector<std::vector<c10::Event*>> free;  // per device index
};
EventPool& pool() {
  static auto* p = new EventPool;
  return *p;
}

std::shared_ptr<c10::Event> pooled_event(c10::DeviceIndex device) {
  EventPool& p = pool();
  c10::Event* e = nullptr;
  {
    std::lock_guard<std::mutex> lock(p.mu);
    if (static_cast<size_t>(device) < p.free.size() && !p.free[device].empty()) {
      e = p.free[device].back();
      p.free[device].pop_back();
    }
  }
  if (e == nullptr) e = new c10::Event(c10::DeviceType::PrivateUse1, c10::EventFlag::PYTORCH_DEFAULT);
  return std::shared_ptr<c10::Event>(e, [device](c10::Event* done) {
    EventPool& q = pool();
    std::lock_guard<std::mutex> lock(q.mu);
    if (q.free.size() <= static_cast<size_t>(device)) q.free.resize(device + 1);
    q.free[device].push_back(done);
  });
}

// Completes futures in order once the host sees their event, off the caller's thread (DDP's
// reducer chains its bucket callbacks on them while backward goes on). Leaked like the pool.
struct Completer {
  struct Item {
    std::shared_ptr<c10::Event> event;
    c10::intrusive_ptr<c10::ivalue::Future> future;
    std::vector<at::Tensor> outputs;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Item> queue;

  Completer() { std::thread([this] { run(); }).detach(); }

  void put(Item item) {
    {
      std::lock_guard<std::mutex> lock(mu);
      queue.push_back(std::move(item));
    }
    cv.notify_one();
  }

  void run() {
    for (;;) {
      Item item;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [this] { return !queue.empty(); });
        item = std::move(queue.front());
        queue.pop_front();
      }
      try {
        item.event->synchronize();
        item.future->markCompleted(c10::IValue(std::move(item.outputs)));
      } catch (...) {
        item.future->setError(std::current_exception());
      }
    }
  }
};
Completer& completer() {
  static auto* c = new Completer;
  return *c;
}

class NativeWork : public c10d::Work {
 public:
  NativeWork(std::vector<at::Tensor> outputs, c10::Stream stream)
      : outputs_(std::move(outputs)), stream_(stream), done_(pooled_event(stream.device_index())) {
    done_->record(stream);
  }

  bool wait(std::chrono::milliseconds /*timeout*/) override {
    c10::Stream current = current_stream(stream_.device_index());
    if (current != stream_) done_->block(current);  // on the launch stream, order is already so
    return true;
  }
  void synchronize() override { wait(std::chrono::milliseconds(0)); }
  bool isCompleted() override { return done_->query(); }
  std::vector<at::Tensor> result() override { return outputs_; }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    auto future = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
    completer().put({done_, future, outputs_});
    return future;
  }

 private:
  std::vector<at::Tensor> outputs_;
  c10::Stream stream_;
  std::shared_ptr<c10::Event> done_;
};

}  // namespace

void count_native(NativeCollective collective, int op) {
  const int slot = op >= 0 && op < kOps - 1 ? op + 1 : 0;
  g_counts[static_cast<size_t>(collective) * kOps + slot].fetch_add(1, std::memory_order_relaxed);
}

std::map<std::string, int64_t> native_collective_counts() {
  std::map<std::string, int64_t> out;
  for (size_t i = 0; i < g_counts.size(); ++i) {
    if (int64_t n = g_counts[i].load(std::memory_order_relaxed))
      out[std::string("native:") + kNames[i / kOps] + kOpNames[i % kOps]] = n;
  }
  return out;
}

void reset_native_collective_counts() {
  for (auto& n : g_counts) n.store(0, std::memory_order_relaxed);
}

c10::intrusive_ptr<c10d::Work> make_native_work(std::vector<at::Tensor> outputs, c10::Stream stream) {
  return c10::make_intrusive<NativeWork>(std::move(outputs), stream);
}

}  // namespace torchvendor
