// DeviceGuardImplInterface (devices, streams, events), PrivateUse1HooksInterface and the
// per-device generators, all over the runtime table.
#include "tv_device.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <ATen/core/Generator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <mutex>

namespace torchvendor {
namespace {

using c10::Device;
using c10::DeviceIndex;
using c10::Stream;
constexpr auto kPU1 = c10::DeviceType::PrivateUse1;

DeviceIndex index_of(Device d) { return d.has_index() ? d.index() : current_device(); }

struct GuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kPU1; }
  Device exchangeDevice(Device d) const override {
    TORCH_CHECK(d.type() == kPU1, "expected a ", backend_name(), " device, got ", d);
    Device old = getDevice();
    if (d.has_index() && d.index() != old.index()) set_device(d.index());
    return old;
  }
  Device getDevice() const override { return Device(kPU1, current_device()); }
  void setDevice(Device d) const override {
    TORCH_CHECK(d.type() == kPU1, "expected a ", backend_name(), " device, got ", d);
    if (d.has_index()) set_device(d.index());
  }
  void uncheckedSetDevice(Device d) const noexcept override {
    try {
      if (d.has_index()) set_device(d.index());
    } catch (...) {
    }
  }
  Stream getStream(Device d) const override { return current_stream(index_of(d)); }
  Stream getDefaultStream(Device d) const override { return default_stream(index_of(d)); }
  Stream getStreamFromGlobalPool(Device d, bool high) const override {
    return pool_stream(index_of(d), high);
  }
  Stream getNewStream(Device d, int priority) const override {
    return new_stream(index_of(d), priority);
  }
  Stream exchangeStream(Stream s) const override { return exchange_stream(s); }
  void* getStreamNativeHandle(const Stream s) const override { return native_stream(s); }

  void destroyEvent(void* event, const DeviceIndex) const noexcept override {
    if (event && runtime_loaded()) rt().event_destroy(static_cast<tv_event>(event));
  }
  void record(void** event, const Stream& stream, const DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(),
                "Event device index ", int(device_index),
                " does not match the recording stream's device index ",
                int(stream.device_index()), ".");
    tv_stream s = native_stream(stream);
    if (*event == nullptr) {
      tv_event e = nullptr;
      uint32_t flags = flag == c10::EventFlag::BACKEND_DEFAULT ? TV_EVENT_ENABLE_TIMING
                                                               : TV_EVENT_DEFAULT;
      TV_CALL(event_create, stream.device_index(), flags, &e);
      *event = e;
    }
    TV_CALL(event_record, static_cast<tv_event>(*event), s);
  }
  void block(void* event, const Stream& stream) const override {
    if (event == nullptr) return;
    TV_CALL(stream_wait_event, native_stream(stream), static_cast<tv_event>(event));
  }
  bool queryEvent(void* event) const override {
    if (event == nullptr) return true;
    tv_status s = rt().event_query(static_cast<tv_event>(event));
    if (s == TV_ERROR_NOT_READY) return false;
    if (s != TV_SUCCESS) raise_call(s, "event_query", {describe_arg(event)});
    return true;
  }
  DeviceIndex deviceCount() const noexcept override {
    return static_cast<DeviceIndex>(device_count());
  }
  bool queryStream(const Stream& stream) const override {
    tv_status s = rt().stream_query(native_stream(stream));
    if (s == TV_ERROR_NOT_READY) return false;
    if (s != TV_SUCCESS) raise_call(s, "stream_query", {describe_arg(native_stream(stream))});
    return true;
  }
  void synchronizeStream(const Stream& stream) const override {
    TV_CALL(stream_synchronize, native_stream(stream));
  }
  void synchronizeEvent(void* event) const override {
    if (event == nullptr) return;
    TV_CALL(event_synchronize, static_cast<tv_event>(event));
  }
  void synchronizeDevice(const DeviceIndex device_index) const override {
    DeviceIndex d = device_index < 0 ? current_device() : device_index;
    check_device_index(d);
    TV_CALL(device_synchronize, d);
  }
  void recordDataPtrOnStream(const c10::DataPtr& ptr, const Stream& stream) const override {
    device_allocator()->recordStream(ptr, stream);
  }
  double elapsedTime(void* start, void* end, const DeviceIndex) const override {
    TORCH_CHECK(start && end, "Both events must be recorded before calculating elapsed time.");
    TORCH_CHECK_NOT_IMPLEMENTED(rt().event_elapsed_time, "the ", backend_name(), " runtime '",
                                runtime_info().name, "' does not provide event_elapsed_time; "
                                "Event.elapsed_time() is unavailable.");
    float ms = 0;
    TV_CALL(event_elapsed_time, static_cast<tv_event>(start), static_cast<tv_event>(end),
                                     &ms);
    return ms;
  }
  c10::DeviceCapability getDeviceCapability(Device) const override {
    return c10::DeviceCapability();  // every dtype: unsupported ops run via the CPU fallback
  }
};

GuardImpl g_guard;

// A CPU generator (Philox-free mt19937, as OpenReg) that reports the PrivateUse1 device, so
// manual_seed / get_rng_state / set_rng_state work per device. The CPU fallback runs random
// operators with a CPU clone of it and writes the advanced state back (fallback.cpp).
class Generator final : public at::CPUGeneratorImpl {
 public:
  explicit Generator(DeviceIndex index) {
    device_ = Device(kPU1, index);
    key_set_ = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1);
  }

 private:
  Generator* clone_impl() const override {
    auto* gen = new Generator(device_.index());
    gen->set_engine(const_cast<Generator*>(this)->engine());
    gen->set_next_float_normal_sample(
        const_cast<Generator*>(this)->next_float_normal_sample());
    gen->set_next_double_normal_sample(
        const_cast<Generator*>(this)->next_double_normal_sample());
    return gen;
  }
};

std::vector<at::Generator>& default_generators() {
  static std::vector<at::Generator> gens = [] {
    std::vector<at::Generator> g;
    for (int i = 0; i < device_count(); ++i) {
      g.push_back(at::make_generator<Generator>(static_cast<DeviceIndex>(i)));
      g.back().set_current_seed(c10::detail::getNonDeterministicRandom());
    }
    return g;
  }();
  return gens;
}

struct Hooks final : public at::PrivateUse1HooksInterface {
  void init() const override {}
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count() > 0; }
  bool hasPrimaryContext(DeviceIndex device_index) const override {
    return device_index >= 0 && device_index < device_count();
  }
  DeviceIndex deviceCount() const override { return static_cast<DeviceIndex>(device_count()); }
  void setCurrentDevice(DeviceIndex d) const override { set_device(d); }
  DeviceIndex getCurrentDevice() const override { return current_device(); }
  DeviceIndex exchangeDevice(DeviceIndex d) const override {
    DeviceIndex old = current_device();
    if (d >= 0 && d != old) set_device(d);
    return old;
  }
  DeviceIndex maybeExchangeDevice(DeviceIndex d) const override { return exchangeDevice(d); }
  bool isPinnedPtr(const void* data) const override {
    if (is_pinned_ptr(data)) return true;
    // In a CUDA build on a machine with a GPU, `torch.empty(..., pin_memory=True)` takes CUDA's
    // host allocator (at::detail::GetCPUAllocatorMaybePinned prefers CUDA, for backward
    // compatibility), while `is_pinned()` asks the current accelerator, PrivateUse1. That
    // memory is page-locked as well, so report it pinned; copies from it are synchronous,
    // since our runtime did not allocate it.
    return at::globalContext().hasCUDA() && at::detail::getCUDAHooks().isPinnedPtr(data);
  }
  c10::Allocator* getPinnedMemoryAllocator() const override { return pinned_allocator(); }
  Device getDeviceFromPtr(void* data) const override {
    DeviceIndex d = device_of_ptr(data);
    TORCH_CHECK_VALUE(d >= 0, "pointer ", data, " was not allocated by the ", backend_name(),
                      " allocator, so its device is unknown.");
    return Device(kPU1, d);
  }
  const at::Generator& getDefaultGenerator(DeviceIndex device_index) const override {
    DeviceIndex d = device_index < 0 ? current_device() : device_index;
    check_device_index(d);
    return default_generators()[d];
  }
  at::Generator getNewGenerator(DeviceIndex device_index) const override {
    DeviceIndex d = device_index < 0 ? current_device() : device_index;
    check_device_index(d);
    return at::make_generator<Generator>(d);
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    resize_storage_bytes(storage.unsafeGetStorageImpl(), newsize);
  }
};

}  // namespace

const void* default_generator_ptr(c10::DeviceIndex device) {
  check_device_index(device);
  return &default_generators()[device];
}

void install_guard_and_hooks() {
  static bool done = false;
  if (done) return;
  const std::string name = backend_name();
  TORCH_CHECK(!c10::impl::hasDeviceGuardImpl(kPU1), "torchvendor: another package already "
              "registered a device guard for PrivateUse1 (backend name '", name,
              "'). Only one PrivateUse1 backend can live in a process: do not import that "
              "package (or disable its autoload with TORCH_DEVICE_BACKEND_AUTOLOAD=0).");
  TORCH_CHECK(!at::isPrivateUse1HooksRegistered(), "torchvendor: another package already "
              "registered PrivateUse1HooksInterface (backend name '", name,
              "'). Only one PrivateUse1 backend can live in a process: do not import that "
              "package (or disable its autoload with TORCH_DEVICE_BACKEND_AUTOLOAD=0).");
  // What C10_REGISTER_GUARD_IMPL(PrivateUse1, ...) expands to, run when the device is
  // registered rather than when the library is loaded.
  static c10::impl::DeviceGuardImplRegistrar registrar(kPU1, &g_guard);
  at::RegisterPrivateUse1HooksInterface(new Hooks());
  done = true;
}

}  // namespace torchvendor
