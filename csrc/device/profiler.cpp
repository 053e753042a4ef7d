// The device in torch's profiler, timed by the runtime table's events. Two of torch's extension
// points:
//
// - Kineto's activity profiler (torch.profiler.profile(activities=[CPU, PrivateUse1])): while a
//   trace records, every kernel launch, copy, memset and collective the device layer or a kernel
//   library sends through the runtime table is timed by a pair of timing events on its stream
//   and goes on the device's timeline of the trace, named (the kernel's function name, "Memcpy
//   HtoD (Host -> acme)", ...) and linked to the operator that issued it: that operator's device
//   time in key_averages(), the device's rows in export_chrome_trace. torch 2.12 and later take
//   the profiler through their PrivateUse1 registry (REGISTER_PRIVATEUSE1_PROFILER); torch 2.11
//   has no registry, and the profiler goes to Kineto's own child-profiler API
//   (libkineto::api().registerProfilerFactory, the Kineto headers torch ships for PrivateUse1
//   backends), which is what the registry calls in later releases.
// - torch's ProfilerStubs (registerPrivateUse1Methods), the profiler's device-event mode
//   (torch.autograd.profiler.profile(use_device=NAME, use_kineto=False), ProfilerState
//   KINETO_PRIVATEUSE1_FALLBACK): a timing event on the current stream when an operator starts
//   and when it ends, the time between them the operator's device time.
//
// A runtime without event_elapsed_time cannot time anything: nothing is recorded, torch reports
// CPU time only, and one warning says why.

#include <c10/core/DeviceGuard.h>
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/stubs/base.h>

#include "tv_device.h"

#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#ifdef USE_KINETO  // set by CMakeLists.txt for this file where torch ships Kineto's headers
#include <libkineto.h>
#include <output_base.h>
#ifdef TV_PRIVATEUSE1_PROFILER_REGISTRY  // torch 2.12 and later
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>
#endif
#endif

namespace torchvendor {
namespace {

using torch::profiler::impl::ProfilerStubs;
using torch::profiler::impl::ProfilerVoidEventStub;

bool timing_events() { return runtime_loaded() && rt().event_elapsed_time != nullptr; }

// The one message of a profiler that cannot time the device (CPU time is still recorded).
void warn_untimed() {
  TORCH_WARN_ONCE("torchvendor: the ", backend_name(), " runtime '", runtime_info().name,
                  "' has no event_elapsed_time, so torch's profiler shows CPU time only for ", backend_name(),
                  " (a runtime times operators on the device with timing events)");
}

// ---- the device's activities ----------------------------------------------------------------
// The runtime table's entries that put work on a device go through the wrappers below
// (wrap_activity_entries, called once by load_runtime); they pass straight through unless a
// Kineto trace records. They never throw: a vendor's kernel library calls them through the C ABI.

tv_runtime g_orig{};                   // the vendor's entries behind the wrappers
std::atomic<bool> g_recording{false};  // a Kineto session records

enum class Kind { kernel, memcpy, memset, collective };

struct Activity {  // one piece of device work, timed by two events on its stream
  Kind kind;
  std::string name;
  int32_t device;
  tv_stream stream;
  tv_event start, end;
  uint64_t correlation;  // the operator that issued it (0: none)
  int64_t bytes;
};

std::mutex g_mu;  // guards everything below
std::unordered_map<tv_function, std::string> g_function_names;
std::vector<Activity> g_activities;
std::unordered_map<std::thread::id, std::vector<uint64_t>> g_operators;  // correlation ids, innermost last

tv_event record_event(int32_t device, tv_stream stream) {
  tv_event e = nullptr;
  if (g_orig.event_create(device, TV_EVENT_ENABLE_TIMING, &e) != TV_SUCCESS) return nullptr;
  if (g_orig.event_record(e, stream) == TV_SUCCESS) return e;
  g_orig.event_destroy(e);
  return nullptr;
}

// Times one call of a wrapped entry: a start event before it, an end event after it, on the
// call's stream (a synchronous copy's: the current stream of the current device).
class Timed {
 public:
  explicit Timed(tv_stream stream) {
    if (!g_recording.load(std::memory_order_relaxed)) return;
    try {
      device_ = current_device();
      stream_ = stream ? stream : native_stream(current_stream(static_cast<c10::DeviceIndex>(device_)));
    } catch (...) {
      return;
    }
    start_ = record_event(device_, stream_);
  }
  Timed(const Timed&) = delete;
  Timed& operator=(const Timed&) = delete;
  ~Timed() {
    if (start_) g_orig.event_destroy(start_);
  }
  explicit operator bool() const { return start_ != nullptr; }

  // After a successful call: the activity joins the trace.
  void done(Kind kind, std::string name, int64_t bytes) {
    tv_event end = record_event(device_, stream_);
    if (!end) return;
    std::lock_guard<std::mutex> lock(g_mu);
    auto& ops = g_operators[std::this_thread::get_id()];
    g_activities.push_back({kind, std::move(name), device_, stream_, start_, end, ops.empty() ? 0 : ops.back(), bytes});
    start_ = nullptr;
  }

 private:
  int32_t device_ = 0;
  tv_stream stream_ = nullptr;
  tv_event start_ = nullptr;
};

std::string copy_name(tv_memcpy_kind kind) {
  const std::string dev = backend_name();
  switch (kind) {
    case TV_MEMCPY_HOST_TO_DEVICE: return "Memcpy HtoD (Host -> " + dev + ")";
    case TV_MEMCPY_DEVICE_TO_HOST: return "Memcpy DtoH (" + dev + " -> Host)";
    case TV_MEMCPY_DEVICE_TO_DEVICE: return "Memcpy DtoD (" + dev + " -> " + dev + ")";
    default: return "Memcpy HtoH (Host -> Host)";
  }
}

tv_status w_module_get_function(tv_module module, const char* name, tv_function* function) {
  tv_status s = g_orig.module_get_function(module, name, function);
  if (s == TV_SUCCESS && function && *function && name) {
    try {
      std::lock_guard<std::mutex> lock(g_mu);
      g_function_names[*function] = name;
    } catch (...) {
    }
  }
  return s;
}

tv_status w_launch(tv_function fn, const tv_launch_config* config, const void* args, size_t size, tv_stream stream) {
  Timed t(stream);
  tv_status s = g_orig.launch(fn, config, args, size, stream);
  if (t && s == TV_SUCCESS) {
    std::string name;
    {
      std::lock_guard<std::mutex> lock(g_mu);
      auto it = g_function_names.find(fn);
      name = it != g_function_names.end() ? it->second : "kernel";
    }
    t.done(Kind::kernel, std::move(name), 0);
  }
  return s;
}

tv_status w_memcpy(void* dst, const void* src, size_t n, tv_memcpy_kind kind) {
  Timed t(nullptr);
  tv_status s = g_orig.memcpy(dst, src, n, kind);
  if (t && s == TV_SUCCESS) t.done(Kind::memcpy, copy_name(kind), static_cast<int64_t>(n));
  return s;
}

tv_status w_memcpy_async(void* dst, const void* src, size_t n, tv_memcpy_kind kind, tv_stream stream) {
  Timed t(stream);
  tv_status s = g_orig.memcpy_async(dst, src, n, kind, stream);
  if (t && s == TV_SUCCESS) t.done(Kind::memcpy, copy_name(kind), static_cast<int64_t>(n));
  return s;
}

tv_status w_memset(void* dst, int value, size_t n) {
  Timed t(nullptr);
  tv_status s = g_orig.memset(dst, value, n);
  if (t && s == TV_SUCCESS) t.done(Kind::memset, "Memset (" + backend_name() + ")", static_cast<int64_t>(n));
  return s;
}

tv_status w_memset_async(void* dst, int value, size_t n, tv_stream stream) {
  Timed t(stream);
  tv_status s = g_orig.memset_async(dst, value, n, stream);
  if (t && s == TV_SUCCESS) t.done(Kind::memset, "Memset (" + backend_name() + ")", static_cast<int64_t>(n));
  return s;
}

// Collectives: one activity each, named after the collective (the stream waits for the peers).
#define TV_WRAP_COLLECTIVE(entry, params, args, stream)                \
  tv_status w_##entry params {                                         \
    Timed t(stream);                                                   \
    tv_status st = g_orig.entry args;                                  \
    if (t && st == TV_SUCCESS) t.done(Kind::collective, #entry, 0);    \
    return st;                                                         \
  }
TV_WRAP_COLLECTIVE(all_reduce, (const void* a, void* b, size_t n, tv_dtype d, tv_reduce_op o, tv_comm c, tv_stream s),
                   (a, b, n, d, o, c, s), s)
TV_WRAP_COLLECTIVE(broadcast, (const void* a, void* b, size_t n, tv_dtype d, int32_t r, tv_comm c, tv_stream s),
                   (a, b, n, d, r, c, s), s)
TV_WRAP_COLLECTIVE(all_gather, (const void* a, void* b, size_t n, tv_dtype d, tv_comm c, tv_stream s),
                   (a, b, n, d, c, s), s)
TV_WRAP_COLLECTIVE(reduce_scatter, (const void* a, void* b, size_t n, tv_dtype d, tv_reduce_op o, tv_comm c, tv_stream s),
                   (a, b, n, d, o, c, s), s)
TV_WRAP_COLLECTIVE(send, (const void* a, size_t n, tv_dtype d, int32_t p, tv_comm c, tv_stream s), (a, n, d, p, c, s), s)
TV_WRAP_COLLECTIVE(recv, (void* a, size_t n, tv_dtype d, int32_t p, tv_comm c, tv_stream s), (a, n, d, p, c, s), s)
#undef TV_WRAP_COLLECTIVE

void destroy_activities() {  // g_mu held
  for (const Activity& a : g_activities) {
    g_orig.event_destroy(a.start);
    g_orig.event_destroy(a.end);
  }
  g_activities.clear();
}

struct DeviceProfilerStubs final : ProfilerStubs {
  void record(c10::DeviceIndex* device, ProfilerVoidEventStub* event, int64_t* cpu_ns) const override {
    if (cpu_ns) *cpu_ns = c10::getTime();
    if (!runtime_loaded()) return;
    c10::DeviceIndex d = current_device();
    if (device) *device = d;
    if (!timing_events()) {  // no event: elapsed() reports 0
      warn_untimed();
      return;
    }
    tv_event e = nullptr;
    TV_CALL(event_create, static_cast<int32_t>(d), static_cast<uint32_t>(TV_EVENT_ENABLE_TIMING), &e);
    *event = std::shared_ptr<void>(e, [](void* p) { rt().event_destroy(static_cast<tv_event>(p)); });
    TV_CALL(event_record, e, native_stream(current_stream(d)));
  }

  // Microseconds between two recorded events (torch's unit for the stubs), once both completed.
  float elapsed(const ProfilerVoidEventStub* start, const ProfilerVoidEventStub* end) const override {
    if (!start || !*start || !end || !*end || !timing_events()) return 0.0f;
    auto a = static_cast<tv_event>(start->get());
    auto b = static_cast<tv_event>(end->get());
    TV_CALL(event_synchronize, a);
    TV_CALL(event_synchronize, b);
    float ms = 0.0f;
    TV_CALL(event_elapsed_time, a, b, &ms);
    return ms * 1000.0f;
  }

  // The runtime table has no annotation ranges (NVTX's role): nothing to mark.
  void mark(const char*) const override {}
  void rangePush(const char*) const override {}
  void rangePop() const override {}

  bool enabled() const override { return timing_events(); }

  void onEachDevice(std::function<void(int)> op) const override {
    if (!runtime_loaded()) return;
    c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, current_device()));
    for (int i = 0; i < device_count(); ++i) {
      guard.set_index(static_cast<c10::DeviceIndex>(i));
      op(i);
    }
  }

  void synchronize() const override {
    if (runtime_loaded()) TV_CALL(device_synchronize, static_cast<int32_t>(current_device()));
  }
};

#ifdef USE_KINETO
// A Kineto session: records the device's activities between start() and stop(), and hands them
// to Kineto's logger in processTrace(), linked to their operators. Times: a base event per device
// recorded on an idle device at start(), with the CPU clock (c10::getTime, the profiler's clock)
// read beside it; an activity starts at the base's CPU time plus the events' elapsed time.
class DeviceSession final : public libkineto::IActivityProfilerSession {
 public:
  DeviceSession() {
    std::lock_guard<std::mutex> lock(g_mu);
    destroy_activities();  // left by a session that never processed its trace
  }
  ~DeviceSession() override {
    for (auto& [device, base] : bases_) g_orig.event_destroy(base.first);
  }

  void start() override {
    status_ = libkineto::TraceStatus::RECORDING;
    if (!runtime_loaded()) return;
    untimed_ = !timing_events();
    if (untimed_) return;
    for (int32_t d = 0; d < device_count(); ++d) {  // an idle device: its base event completes now
      if (g_orig.device_synchronize(d) != TV_SUCCESS) continue;
      tv_event e = nullptr;
      int64_t cpu_ns = c10::getTime();
      try {
        e = record_event(d, native_stream(default_stream(static_cast<c10::DeviceIndex>(d))));
      } catch (...) {
      }
      if (e && g_orig.event_synchronize(e) == TV_SUCCESS) bases_[d] = {e, cpu_ns};
      else if (e) g_orig.event_destroy(e);
    }
    g_recording = true;
  }
  void stop() override {
    g_recording = false;
    status_ = libkineto::TraceStatus::PROCESSING;
  }
  std::vector<std::string> errors() override { return {}; }

  void pushCorrelationId(uint64_t id) override {
    if (untimed_) return warn_untimed();  // from an operator's call, where torch shows it as a Python warning
    if (!g_recording) return;
    std::lock_guard<std::mutex> lock(g_mu);
    g_operators[std::this_thread::get_id()].push_back(id);
  }
  void popCorrelationId() override {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_operators.find(std::this_thread::get_id());
    if (it != g_operators.end() && !it->second.empty()) it->second.pop_back();
  }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, [](int32_t) -> const libkineto::ITraceActivity* { return nullptr; }, 0, 0);
  }
  void processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback linked,
                    int64_t, int64_t) override {
    std::vector<Activity> done;
    {
      std::lock_guard<std::mutex> lock(g_mu);
      done.swap(g_activities);
      g_operators.clear();
    }
    for (const Activity& a : done) {
      log(a, logger, linked);
      g_orig.event_destroy(a.start);
      g_orig.event_destroy(a.end);
    }
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override { return nullptr; }
  std::vector<libkineto::ResourceInfo> getResourceInfos() override { return {}; }
  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return std::move(buffer_); }

 private:
  void log(const Activity& a, libkineto::ActivityLogger& logger, const libkineto::getLinkedActivityCallback& linked) {
    auto base = bases_.find(a.device);
    float since = 0.0f, took = 0.0f;
    if (base == bases_.end() || g_orig.event_synchronize(a.end) != TV_SUCCESS ||
        g_orig.event_elapsed_time(base->second.first, a.start, &since) != TV_SUCCESS ||
        g_orig.event_elapsed_time(a.start, a.end, &took) != TV_SUCCESS)
      return;
    static const libkineto::ActivityType types[] = {
        libkineto::ActivityType::CONCURRENT_KERNEL, libkineto::ActivityType::GPU_MEMCPY,
        libkineto::ActivityType::GPU_MEMSET, libkineto::ActivityType::CONCURRENT_KERNEL};
    auto act = std::make_unique<libkineto::GenericTraceActivity>(buffer_->span, types[static_cast<int>(a.kind)], a.name);
    act->startTime = base->second.second + static_cast<int64_t>(static_cast<double>(since) * 1e6);
    act->endTime = act->startTime + std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(took) * 1e6));
    act->id = static_cast<int32_t>(a.correlation);
    act->device = a.device;
    act->resource = lane(a.device, a.stream);
    act->linked = a.correlation ? linked(static_cast<int32_t>(a.correlation)) : nullptr;
    act->flow.id = static_cast<uint32_t>(a.correlation);
    act->flow.type = libkineto::kLinkAsyncCpuGpu;
    // Quoted values: addMetadata's formatting needs fmt symbols that torch does not export.
    act->addMetadataQuoted("runtime", runtime_info().name);  // what timed it (another profiler may see the device too)
    act->addMetadataQuoted("device", std::to_string(a.device));
    act->addMetadataQuoted("stream", std::to_string(act->resource));
    act->addMetadataQuoted("correlation", std::to_string(a.correlation));
    if (a.bytes) {
      act->addMetadataQuoted("bytes", std::to_string(a.bytes));
      char gbps[32];
      std::snprintf(gbps, sizeof gbps, "%.3f", took > 0 ? static_cast<double>(a.bytes) / (took * 1e6) : 0.0);
      act->addMetadataQuoted("memory bandwidth (GB/s)", gbps);
    }
    logger.handleActivity(*act);
    buffer_->activities.push_back(std::move(act));
  }
  // The row of a stream on its device's timeline: 0 for the default stream, then in order of use.
  int32_t lane(int32_t device, tv_stream stream) {
    auto& lanes = lanes_[device];
    if (lanes.empty()) {
      try {
        lanes[native_stream(default_stream(static_cast<c10::DeviceIndex>(device)))] = 0;
      } catch (...) {
      }
    }
    return lanes.emplace(stream, static_cast<int32_t>(lanes.size())).first->second;
  }

  bool untimed_ = false;  // the runtime has no timing events
  std::unordered_map<int32_t, std::pair<tv_event, int64_t>> bases_;
  std::unordered_map<int32_t, std::unordered_map<tv_stream, int32_t>> lanes_;
  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_ = std::make_unique<libkineto::CpuTraceBuffer>();
};

class DeviceActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }
  const std::set<libkineto::ActivityType>& availableActivities() const override { return types_; }
  // A session only where the trace asks for device activity (not for a CPU-only trace).
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(const std::set<libkineto::ActivityType>& types,
                                                                  const libkineto::Config&) override {
    if (!types.count(libkineto::ActivityType::CONCURRENT_KERNEL)) return nullptr;
    return std::make_unique<DeviceSession>();
  }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(int64_t, int64_t,
                                                                  const std::set<libkineto::ActivityType>& types,
                                                                  const libkineto::Config& config) override {
    return configure(types, config);
  }

 private:
  std::string name_ = "torchvendor";
  std::set<libkineto::ActivityType> types_ = {libkineto::ActivityType::CONCURRENT_KERNEL,
                                              libkineto::ActivityType::GPU_MEMCPY,
                                              libkineto::ActivityType::GPU_MEMSET};
};

#ifdef TV_PRIVATEUSE1_PROFILER_REGISTRY
REGISTER_PRIVATEUSE1_PROFILER(DeviceActivityProfiler);
#else  // torch 2.11: Kineto's own child-profiler API, what the registry of later releases calls
struct RegisterWithKineto {
  RegisterWithKineto() {
    libkineto::api().registerProfilerFactory([] { return std::make_unique<DeviceActivityProfiler>(); });
  }
} register_with_kineto;
#endif
#endif  // USE_KINETO

struct RegisterStubs {
  RegisterStubs() {
    static DeviceProfilerStubs stubs;
    torch::profiler::impl::registerPrivateUse1Methods(&stubs);
  }
} register_stubs;

}  // namespace

void wrap_activity_entries(tv_runtime& table) {
  g_orig = table;
#define TV_WRAP(entry) \
  if (table.entry) table.entry = w_##entry
  TV_WRAP(module_get_function);
  TV_WRAP(launch);
  TV_WRAP(memcpy);
  TV_WRAP(memcpy_async);
  TV_WRAP(memset);
  TV_WRAP(memset_async);
  TV_WRAP(all_reduce);
  TV_WRAP(broadcast);
  TV_WRAP(all_gather);
  TV_WRAP(reduce_scatter);
  TV_WRAP(send);
  TV_WRAP(recv);
#undef TV_WRAP
}

}  // namespace torchvendor
