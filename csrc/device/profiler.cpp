// The device in torch's profiler: torch's PrivateUse1 extension point for device timing
// (torch::profiler::impl::ProfilerStubs, registered with registerPrivateUse1Methods), timed by
// the runtime table's events. With it, torch's profiler in its PrivateUse1 event mode
// (torch.autograd.profiler.profile(use_device=NAME, use_kineto=False), ProfilerState
// KINETO_PRIVATEUSE1_FALLBACK) records a timing event on the current stream when an operator
// starts and when it ends, and reports the time between them as the operator's device time
// (FunctionEvent.device_time, key_averages()'s "Device" columns). torch.profiler.profile's
// Kineto mode is served by a Kineto activity profiler (below, where torch ships Kineto's
// headers). A runtime without event_elapsed_time cannot time anything: the events stay empty,
// torch reports CPU time only, and one warning says why.
//
// Both are registered when _C is loaded; they do nothing until a runtime is loaded.

#include <c10/core/DeviceGuard.h>
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/stubs/base.h>

#include "tv_device.h"

#ifdef USE_KINETO  // set by CMakeLists.txt for this file where torch ships Kineto's headers
#include <libkineto.h>
#include <output_base.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include <map>
#include <mutex>
#include <thread>
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
// torch.profiler.profile(activities=[CPU, PrivateUse1]) runs torch's KINETO_PRIVATEUSE1 mode:
// Kineto hands every operator's correlation id to the registered PrivateUse1 activity profiler
// when the operator starts and ends. The session records a timing event on the current stream
// at both and, when the trace is processed, puts on the device's timeline the device time of
// each operator outside the operators it called (the same self time the ProfilerStubs give),
// as activities linked to the operator: its device time in key_averages(), the device's row in
// the Chrome trace. Times: a base event per device, with the CPU clock beside it.
struct Open {  // an operator that has started: where its own device time resumed
  int32_t id;
  c10::DeviceIndex device;
  tv_event since;
};
struct Segment {  // device time of operator `id` between two events of its device
  int32_t id;
  c10::DeviceIndex device;
  tv_event from, to;
};

class DeviceSession final : public libkineto::IActivityProfilerSession {
 public:
  ~DeviceSession() override {
    for (tv_event e : events_) rt().event_destroy(e);
  }
  void start() override { status_ = libkineto::TraceStatus::RECORDING; }
  void stop() override { status_ = libkineto::TraceStatus::PROCESSING; }
  std::vector<std::string> errors() override { return {}; }

  void pushCorrelationId(uint64_t id) override {
    if (status_ != libkineto::TraceStatus::RECORDING || !runtime_loaded()) return;
    if (!timing_events()) return warn_untimed();
    c10::DeviceIndex d = current_device();
    std::lock_guard<std::mutex> lock(mu_);
    if (!bases_.count(d)) bases_[d] = {event(d), c10::getTime()};
    tv_event e = event(d);
    auto& stack = open_[std::this_thread::get_id()];
    if (!stack.empty()) {  // the caller's own time pauses
      Open& caller = stack.back();
      done_.push_back({caller.id, caller.device, caller.since, caller.device == d ? e : event(caller.device)});
    }
    stack.push_back({static_cast<int32_t>(id), d, e});
  }
  void popCorrelationId() override {
    std::lock_guard<std::mutex> lock(mu_);
    auto& stack = open_[std::this_thread::get_id()];
    if (stack.empty()) return;
    Open op = stack.back();
    stack.pop_back();
    tv_event e = event(op.device);
    done_.push_back({op.id, op.device, op.since, e});
    if (!stack.empty())  // the caller's own time resumes
      stack.back().since = stack.back().device == op.device ? e : event(stack.back().device);
  }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, [](int32_t) -> const libkineto::ITraceActivity* { return nullptr; }, 0, 0);
  }
  void processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback linked,
                    int64_t, int64_t) override {
    for (const Segment& s : done_) {
      int64_t from = at(s.device, s.from), to = at(s.device, s.to);
      if (to <= from) continue;
      const libkineto::ITraceActivity* op = linked(s.id);
      auto a = std::make_unique<libkineto::GenericTraceActivity>(
          buffer_->span, libkineto::ActivityType::CONCURRENT_KERNEL,
          (op ? op->name() : std::string("operator")) + " (" + backend_name() + ")");
      a->startTime = from;
      a->endTime = to;
      a->id = s.id;
      a->device = s.device;
      a->linked = op;
      a->flow.id = static_cast<uint32_t>(s.id);
      a->flow.type = libkineto::kLinkAsyncCpuGpu;
      logger.handleActivity(*a);
      buffer_->activities.push_back(std::move(a));
    }
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override { return nullptr; }
  std::vector<libkineto::ResourceInfo> getResourceInfos() override { return {}; }
  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return std::move(buffer_); }

 private:
  tv_event event(c10::DeviceIndex d) {  // a timing event on d's current stream, destroyed with the session
    tv_event e = nullptr;
    TV_CALL(event_create, static_cast<int32_t>(d), static_cast<uint32_t>(TV_EVENT_ENABLE_TIMING), &e);
    events_.push_back(e);
    TV_CALL(event_record, e, native_stream(current_stream(d)));
    return e;
  }
  // Nanoseconds since the epoch (Kineto's clock) of a completed event on device d.
  int64_t at(c10::DeviceIndex d, tv_event e) {
    auto& [b, cpu_ns] = bases_.at(d);
    TV_CALL(event_synchronize, e);
    TV_CALL(event_synchronize, b);
    float ms = 0.0f;
    TV_CALL(event_elapsed_time, b, e, &ms);
    return cpu_ns + static_cast<int64_t>(static_cast<double>(ms) * 1e6);
  }

  std::mutex mu_;
  std::map<std::thread::id, std::vector<Open>> open_;
  std::vector<Segment> done_;
  std::vector<tv_event> events_;
  std::map<c10::DeviceIndex, std::pair<tv_event, int64_t>> bases_;
  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_ = std::make_unique<libkineto::CpuTraceBuffer>();
};

class DeviceActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }
  const std::set<libkineto::ActivityType>& availableActivities() const override { return types_; }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(const std::set<libkineto::ActivityType>&,
                                                                  const libkineto::Config&) override {
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
                                              libkineto::ActivityType::PRIVATEUSE1_RUNTIME};
};

REGISTER_PRIVATEUSE1_PROFILER(DeviceActivityProfiler);
#endif  // USE_KINETO

struct RegisterStubs {
  RegisterStubs() {
    static DeviceProfilerStubs stubs;
    torch::profiler::impl::registerPrivateUse1Methods(&stubs);
  }
} register_stubs;

}  // namespace
}  // namespace torchvendor
