// The device in torch's profiler: torch's PrivateUse1 extension point for device timing
// (torch::profiler::impl::ProfilerStubs, registered with registerPrivateUse1Methods), timed by
// the runtime table's events. With it, torch's profiler in its PrivateUse1 event mode
// (torch.autograd.profiler.profile(use_device=NAME, use_kineto=False), ProfilerState
// KINETO_PRIVATEUSE1_FALLBACK) records a timing event on the current stream when an operator
// starts and when it ends, and reports the time between them as the operator's device time
// (FunctionEvent.device_time, key_averages()'s "Device" columns). A runtime without
// event_elapsed_time cannot time anything: the stubs then say they are disabled, the events
// stay empty and torch reports CPU time only (sdk/device/profiler.py says so once).
//
// The stubs are registered when _C is loaded; they do nothing until a runtime is loaded.

#include <c10/core/DeviceGuard.h>
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/stubs/base.h>

#include "tv_device.h"

namespace torchvendor {
namespace {

using torch::profiler::impl::ProfilerStubs;
using torch::profiler::impl::ProfilerVoidEventStub;

bool timing_events() { return runtime_loaded() && rt().event_elapsed_time != nullptr; }

struct DeviceProfilerStubs final : ProfilerStubs {
  void record(c10::DeviceIndex* device, ProfilerVoidEventStub* event, int64_t* cpu_ns) const override {
    if (cpu_ns) *cpu_ns = c10::getTime();
    if (!runtime_loaded()) return;
    c10::DeviceIndex d = current_device();
    if (device) *device = d;
    if (!timing_events()) {  // no event: elapsed() reports 0
      TORCH_WARN_ONCE("torchvendor: the ", backend_name(), " runtime '", runtime_info().name,
                      "' has no event_elapsed_time, so torch's profiler shows CPU time only for ",
                      backend_name(), " (a runtime times operators on the device with timing events)");
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

struct RegisterStubs {
  RegisterStubs() {
    static DeviceProfilerStubs stubs;
    torch::profiler::impl::registerPrivateUse1Methods(&stubs);
  }
} register_stubs;

}  // namespace
}  // namespace torchvendor
