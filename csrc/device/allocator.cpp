// The caching device allocator (c10::DeviceAllocator over runtime malloc/free) and the pinned
// host allocator (runtime host_malloc/host_free).
//
// Rules (docs/source/accelerator/allocator.md): never touch the GIL here; one mutex per device;
// runtime calls that may block (malloc, free, synchronize) run outside that mutex. Blocks are
// cached per device in size-rounded free lists keyed by the stream they were allocated on; a
// block used on other streams (recordStream) returns to its free list only once events recorded
// on those streams at free time have completed.
#include "tv_device.h"

#include <c10/core/AutogradState.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/DeviceType.h>

#include <atomic>

#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>

namespace torchvendor {
namespace {

using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatArray;
using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;

constexpr size_t kRound = 512;                // every block is a multiple of this
constexpr size_t kSmallSize = 1 << 20;        // <= this: small pool (stats only)

size_t round_size(size_t n) { return (n + kRound - 1) / kRound * kRound; }

struct Block {
  void* ptr = nullptr;
  size_t size = 0;        // rounded, what the runtime gave us
  size_t requested = 0;   // what the caller asked for
  c10::DeviceIndex device = 0;
  c10::StreamId stream = 0;            // allocation stream: reuse only on it
  std::vector<c10::Stream> uses;       // other streams (recordStream)
  std::vector<tv_event> events;        // pending: block is free once these complete
};

struct BlockLess {
  bool operator()(const Block* a, const Block* b) const {
    if (a->stream != b->stream) return a->stream < b->stream;
    if (a->size != b->size) return a->size < b->size;
    return a->ptr < b->ptr;
  }
};

void update(StatArray& stat, size_t bytes, bool increase) {
  auto apply = [&](Stat& s) { increase ? s.increase(bytes) : s.decrease(bytes); };
  apply(stat[static_cast<size_t>(StatType::AGGREGATE)]);
  apply(stat[static_cast<size_t>(bytes <= kSmallSize ? StatType::SMALL_POOL
                                                     : StatType::LARGE_POOL)]);
}
void update_count(StatArray& stat, size_t block_size, bool increase) {
  auto apply = [&](Stat& s) { increase ? s.increase(1) : s.decrease(1); };
  apply(stat[static_cast<size_t>(StatType::AGGREGATE)]);
  apply(stat[static_cast<size_t>(block_size <= kSmallSize ? StatType::SMALL_POOL
                                                          : StatType::LARGE_POOL)]);
}

struct DeviceState {
  std::mutex mutex;
  std::set<Block*, BlockLess> free_blocks;
  std::map<uintptr_t, Block*> allocated;  // ordered: interior pointers resolve too
  std::vector<Block*> pending;            // freed, waiting for events
  DeviceStats stats;
};

std::vector<std::unique_ptr<DeviceState>> g_devices;
std::once_flag g_devices_once;

DeviceState& state(c10::DeviceIndex device) {
  std::call_once(g_devices_once, [] {
    for (int i = 0; i < device_count(); ++i) g_devices.push_back(std::make_unique<DeviceState>());
  });
  check_device_index(device);
  return *g_devices[device];
}

// Moves pending blocks whose events have completed to the free lists (mutex held; event_query
// and event_destroy do not block).
void process_pending(DeviceState& st) {
  for (auto it = st.pending.begin(); it != st.pending.end();) {
    Block* b = *it;
    bool done = true;
    for (tv_event e : b->events) {
      tv_status s = rt().event_query(e);
      if (s == TV_ERROR_NOT_READY) { done = false; break; }
      if (s != TV_SUCCESS) raise_call(s, "event_query", {describe_arg(e)});
    }
    if (!done) { ++it; continue; }
    for (tv_event e : b->events) rt().event_destroy(e);
    b->events.clear();
    st.free_blocks.insert(b);
    it = st.pending.erase(it);
  }
}

// Frees every cached block of a device back to the runtime, waiting for pending ones.
void release_cached(c10::DeviceIndex device) {
  DeviceState& st = state(device);
  std::vector<Block*> to_free;
  {
    std::lock_guard<std::mutex> lock(st.mutex);
    to_free.assign(st.free_blocks.begin(), st.free_blocks.end());
    st.free_blocks.clear();
    to_free.insert(to_free.end(), st.pending.begin(), st.pending.end());
    st.pending.clear();
  }
  for (Block* b : to_free) {  // blocking calls, outside the mutex
    for (tv_event e : b->events) {
      TV_CALL(event_synchronize, e);
      rt().event_destroy(e);
    }
    TV_CALL(free, b->device, b->ptr);
  }
  std::lock_guard<std::mutex> lock(st.mutex);
  for (Block* b : to_free) {
    update(st.stats.reserved_bytes, b->size, false);
    update_count(st.stats.segment, b->size, false);
    st.stats.num_device_free++;
    delete b;
  }
}

Block* find_block(const void* ptr, DeviceState** owner) {  // locks each device in turn
  auto p = reinterpret_cast<uintptr_t>(ptr);
  for (int d = 0; d < device_count(); ++d) {
    DeviceState& st = state(d);
    std::lock_guard<std::mutex> lock(st.mutex);
    auto it = st.allocated.upper_bound(p);
    if (it == st.allocated.begin()) continue;
    --it;
    if (p < it->first + it->second->size) {
      if (owner) *owner = &st;
      return it->second;
    }
  }
  return nullptr;
}

void free_block(void* ptr);
void raw_delete(void* ptr) {
  try {
    free_block(ptr);
  } catch (const std::exception& e) {
    TORCH_WARN("torchvendor: freeing ", backend_name(), " memory failed: ", e.what());
  }
}

void free_block(void* ptr) {
  if (ptr == nullptr) return;
  DeviceState* st_ptr = nullptr;
  Block* b = find_block(ptr, &st_ptr);
  TORCH_INTERNAL_ASSERT(b != nullptr && b->ptr == ptr, "freeing an unknown pointer");
  DeviceState& st = *st_ptr;
  std::vector<c10::Stream> uses;
  {
    std::lock_guard<std::mutex> lock(st.mutex);
    st.allocated.erase(reinterpret_cast<uintptr_t>(ptr));
    update(st.stats.allocated_bytes, b->size, false);
    update(st.stats.active_bytes, b->size, false);
    update(st.stats.requested_bytes, b->requested, false);
    update_count(st.stats.allocation, b->size, false);
    update_count(st.stats.active, b->size, false);
    uses.swap(b->uses);
    if (uses.empty()) {
      st.free_blocks.insert(b);
      return;
    }
  }
  std::vector<tv_event> events;
  for (const c10::Stream& s : uses) {
    tv_event e = nullptr;
    TV_CALL(event_create, s.device_index(), TV_EVENT_DEFAULT, &e);
    TV_CALL(event_record, e, native_stream(s));
    events.push_back(e);
  }
  std::lock_guard<std::mutex> lock(st.mutex);
  b->events = std::move(events);
  st.pending.push_back(b);
}

std::atomic<bool> g_calling_thread_autograd{false};

// A thread reaches a backward on the device with a tensor it allocated there (loss.backward()
// allocates the seed gradient), so its first allocation is where to set its autograd mode. Done
// once per thread, so a thread that turns multithreading back on keeps its choice.
void use_calling_thread_autograd() {
  thread_local bool done = false;
  if (done) return;
  done = true;
  c10::AutogradState::get_tls_state().set_multithreading_enabled(false);
}

class DeviceAllocatorImpl final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    if (C10_UNLIKELY(g_calling_thread_autograd.load(std::memory_order_relaxed))) {
      use_calling_thread_autograd();
    }
    const c10::DeviceIndex device = current_device();
    const c10::Device dev(c10::DeviceType::PrivateUse1, device);
    if (n == 0) return c10::DataPtr(nullptr, nullptr, &raw_delete, dev);
    const size_t size = round_size(n);
    const c10::StreamId stream = current_stream(device).id();
    DeviceState& st = state(device);
    {
      std::lock_guard<std::mutex> lock(st.mutex);
      process_pending(st);
      Block key;
      key.stream = stream;
      key.size = size;
      auto it = st.free_blocks.lower_bound(&key);
      // Reuse a cached block of the same stream wasting at most 1/8 of it.
      if (it != st.free_blocks.end() && (*it)->stream == stream &&
          (*it)->size - size <= size / 8) {
        Block* b = *it;
        st.free_blocks.erase(it);
        b->requested = n;
        return commit(st, b, dev);
      }
    }
    void* ptr = nullptr;
    tv_status s = rt().malloc(device, size, &ptr);
    std::string first_message;
    if (s == TV_ERROR_OUT_OF_MEMORY) {
      first_message = last_error();
      release_cached(device);  // free the cache and retry once
      {
        std::lock_guard<std::mutex> lock(st.mutex);
        st.stats.num_alloc_retries++;
      }
      s = rt().malloc(device, size, &ptr);
    }
    if (s == TV_ERROR_OUT_OF_MEMORY) raise_oom(st, device, n, first_message);
    if (s != TV_SUCCESS) raise_call(s, "malloc", {describe_arg(device), describe_arg(size)});
    TORCH_CHECK(ptr != nullptr, backend_name(), " runtime malloc(", size,
                ") returned success and a NULL pointer");
    auto* b = new Block;
    b->ptr = ptr;
    b->size = size;
    b->requested = n;
    b->device = device;
    b->stream = stream;
    std::lock_guard<std::mutex> lock(st.mutex);
    update(st.stats.reserved_bytes, size, true);
    update_count(st.stats.segment, size, true);
    st.stats.num_device_alloc++;
    return commit_locked(st, b, dev);
  }

  c10::DeleterFnPtr raw_deleter() const override { return &raw_delete; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    copy_bytes(dest, src, count, TV_MEMCPY_DEVICE_TO_DEVICE, current_stream(-1), false);
  }

  bool initialized() override { return runtime_loaded(); }

  void emptyCache(c10::MempoolId_t /*mempool_id*/) override { empty_cache(); }

  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override {
    if (ptr.get() == nullptr || ptr.get_deleter() != &raw_delete) return;
    DeviceState* st = nullptr;
    Block* b = find_block(ptr.get(), &st);
    if (b == nullptr) return;
    std::lock_guard<std::mutex> lock(st->mutex);
    if (stream.device_type() != c10::DeviceType::PrivateUse1 || stream.id() == b->stream) return;
    for (const auto& s : b->uses)
      if (s == stream) return;
    b->uses.push_back(stream);
  }

  DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    DeviceState& st = state(device);
    std::lock_guard<std::mutex> lock(st.mutex);
    return st.stats;
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    reset_accumulated_stats(device);
  }
  void resetPeakStats(c10::DeviceIndex device) override { reset_peak_stats(device); }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    // The runtime reports only the total; "free" is what this process has not reserved.
    tv_device_properties props{};
    props.struct_size = sizeof props;
    TV_CALL(get_device_properties, device, &props);
    DeviceState& st = state(device);
    std::lock_guard<std::mutex> lock(st.mutex);
    int64_t reserved = st.stats.reserved_bytes[0].current;
    size_t total = props.total_memory;
    return {total > size_t(reserved) ? total - reserved : 0, total};
  }

 private:
  c10::DataPtr commit(DeviceState& st, Block* b, c10::Device dev) { return commit_locked(st, b, dev); }
  c10::DataPtr commit_locked(DeviceState& st, Block* b, c10::Device dev) {
    st.allocated[reinterpret_cast<uintptr_t>(b->ptr)] = b;
    update(st.stats.allocated_bytes, b->size, true);
    update(st.stats.active_bytes, b->size, true);
    update(st.stats.requested_bytes, b->requested, true);
    update_count(st.stats.allocation, b->size, true);
    update_count(st.stats.active, b->size, true);
    return c10::DataPtr(b->ptr, b->ptr, &raw_delete, dev);
  }

  [[noreturn]] void raise_oom(DeviceState& st, c10::DeviceIndex device, size_t n,
                              const std::string& first_message) {
    std::string message = last_error();
    if (message.empty()) message = first_message;
    tv_device_properties props{};
    props.struct_size = sizeof props;
    uint64_t total = rt().get_device_properties(device, &props) == TV_SUCCESS
                         ? props.total_memory : 0;
    int64_t allocated, reserved;
    {
      std::lock_guard<std::mutex> lock(st.mutex);
      st.stats.num_ooms++;
      allocated = st.stats.allocated_bytes[0].current;
      reserved = st.stats.reserved_bytes[0].current;
    }
    auto mib = [](double bytes) {
      std::ostringstream o;
      o.precision(2);
      o << std::fixed << bytes / (1024.0 * 1024.0) << " MiB";
      return o.str();
    };
    TORCH_CHECK_WITH(OutOfMemoryError, false, backend_name(), " out of memory on device ",
                     int(device), ": tried to allocate ", mib(n), " (", n, " bytes); ",
                     mib(allocated), " allocated by PyTorch, ", mib(reserved),
                     " reserved by the caching allocator (cache already freed and retried), "
                     "device total ", mib(total), ". Runtime says: ",
                     message.empty() ? "(no message)" : message,
                     ". Free tensors you no longer need or use smaller batches; torch.",
                     backend_name(), ".memory_stats() shows where memory goes.");
  }
};

DeviceAllocatorImpl g_device_allocator;

// ---- pinned host memory --------------------------------------------------------------------

struct PinnedBlock {
  size_t size = 0;
  std::vector<tv_event> events;
  bool freed = false;
};
std::mutex g_pinned_mutex;
std::map<uintptr_t, PinnedBlock> g_pinned;

// Returns host_free-able pointers whose last async use has completed (mutex held).
std::vector<void*> collect_pinned() {
  std::vector<void*> done;
  for (auto it = g_pinned.begin(); it != g_pinned.end();) {
    PinnedBlock& b = it->second;
    if (b.freed) {
      bool ready = true;
      for (tv_event e : b.events)
        if (rt().event_query(e) == TV_ERROR_NOT_READY) { ready = false; break; }
      if (ready) {
        for (tv_event e : b.events) rt().event_destroy(e);
        done.push_back(reinterpret_cast<void*>(it->first));
        it = g_pinned.erase(it);
        continue;
      }
    }
    ++it;
  }
  return done;
}

void pinned_delete(void* ptr) {
  if (ptr == nullptr) return;
  std::vector<void*> done;
  {
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    auto it = g_pinned.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == g_pinned.end()) return;
    it->second.freed = true;
    done = collect_pinned();
  }
  for (void* p : done) rt().host_free(p);
}

class PinnedAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    TORCH_CHECK_NOT_IMPLEMENTED(
        rt().host_malloc && rt().host_free, "the ", backend_name(), " runtime '",
        runtime_info().name, "' does not provide host_malloc/host_free, so pinned memory "
        "(pin_memory(), pin_memory=True, non_blocking copies through pinned buffers) is "
        "unavailable. Implement those entries in the runtime table.");
    std::vector<void*> done;
    {
      std::lock_guard<std::mutex> lock(g_pinned_mutex);
      done = collect_pinned();
    }
    for (void* p : done) rt().host_free(p);
    void* ptr = nullptr;
    if (n > 0) {
      tv_status s = rt().host_malloc(n, &ptr);
      if (s != TV_SUCCESS) raise_call(s, "host_malloc", {describe_arg(n)});
      std::lock_guard<std::mutex> lock(g_pinned_mutex);
      g_pinned[reinterpret_cast<uintptr_t>(ptr)] = PinnedBlock{n, {}, false};
    }
    return c10::DataPtr(ptr, ptr, &pinned_delete, c10::Device(c10::DeviceType::CPU));
  }
  c10::DeleterFnPtr raw_deleter() const override { return &pinned_delete; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
};

PinnedAllocator g_pinned_allocator;

}  // namespace

c10::DeviceAllocator* device_allocator() { return &g_device_allocator; }
c10::Allocator* pinned_allocator() { return &g_pinned_allocator; }

bool is_pinned_ptr(const void* ptr) {
  if (!runtime_loaded()) return false;
  auto p = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(g_pinned_mutex);
  auto it = g_pinned.upper_bound(p);
  if (it == g_pinned.begin()) return false;
  --it;
  return !it->second.freed && p < it->first + std::max<size_t>(it->second.size, 1);
}

void record_pinned_use(const void* ptr, c10::Stream stream) {
  auto p = reinterpret_cast<uintptr_t>(ptr);
  tv_event e = nullptr;
  TV_CALL(event_create, stream.device_index(), TV_EVENT_DEFAULT, &e);
  TV_CALL(event_record, e, native_stream(stream));
  std::lock_guard<std::mutex> lock(g_pinned_mutex);
  auto it = g_pinned.upper_bound(p);
  if (it != g_pinned.begin() && p < (--it)->first + it->second.size) {
    it->second.events.push_back(e);
    return;
  }
  rt().event_destroy(e);
}

c10::DeviceIndex device_of_ptr(const void* ptr) {
  if (!runtime_loaded()) return -1;
  Block* b = find_block(ptr, nullptr);
  return b ? b->device : -1;
}

std::map<std::string, int64_t> memory_stats(c10::DeviceIndex device) {
  DeviceStats s = g_device_allocator.getDeviceStats(device);
  std::map<std::string, int64_t> out;
  const char* pools[] = {"all", "small_pool", "large_pool"};
  auto add = [&](const char* name, const StatArray& a) {
    for (size_t i = 0; i < 3; ++i) {
      std::string prefix = std::string(name) + "." + pools[i] + ".";
      out[prefix + "current"] = a[i].current;
      out[prefix + "peak"] = a[i].peak;
      out[prefix + "allocated"] = a[i].allocated;
      out[prefix + "freed"] = a[i].freed;
    }
  };
  add("allocation", s.allocation);
  add("segment", s.segment);
  add("active", s.active);
  add("allocated_bytes", s.allocated_bytes);
  add("reserved_bytes", s.reserved_bytes);
  add("active_bytes", s.active_bytes);
  add("requested_bytes", s.requested_bytes);
  out["num_alloc_retries"] = s.num_alloc_retries;
  out["num_ooms"] = s.num_ooms;
  out["num_device_alloc"] = s.num_device_alloc;
  out["num_device_free"] = s.num_device_free;
  return out;
}

void reset_peak_stats(c10::DeviceIndex device) {
  DeviceState& st = state(device);
  std::lock_guard<std::mutex> lock(st.mutex);
  for (StatArray* a : {&st.stats.allocation, &st.stats.segment, &st.stats.active,
                       &st.stats.allocated_bytes, &st.stats.reserved_bytes,
                       &st.stats.active_bytes, &st.stats.requested_bytes})
    for (Stat& s : *a) s.reset_peak();
}

void reset_accumulated_stats(c10::DeviceIndex device) {
  DeviceState& st = state(device);
  std::lock_guard<std::mutex> lock(st.mutex);
  for (StatArray* a : {&st.stats.allocation, &st.stats.segment, &st.stats.active,
                       &st.stats.allocated_bytes, &st.stats.reserved_bytes,
                       &st.stats.active_bytes, &st.stats.requested_bytes})
    for (Stat& s : *a) s.reset_accumulated();
  st.stats.num_alloc_retries = 0;
  st.stats.num_ooms = 0;
  st.stats.num_device_alloc = 0;
  st.stats.num_device_free = 0;
}

void run_autograd_on_calling_threads() { g_calling_thread_autograd = true; }

void empty_cache() {
  for (int d = 0; d < device_count(); ++d) release_cached(d);
}

void install_allocators() {
  c10::SetAllocator(c10::DeviceType::PrivateUse1, &g_device_allocator);
}

}  // namespace torchvendor
