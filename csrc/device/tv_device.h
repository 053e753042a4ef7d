// The device layer's internal interface: one vendor runtime table (runtime.h) turned into the
// PrivateUse1 device. Only c10 headers here, so every TU stays cheap to compile.
//
//   runtime.cpp   dlopen + ABI negotiation, error mapping, devices, the stream registry
//   allocator.cpp caching device allocator (c10::DeviceAllocator) and pinned host allocator
//   guard.cpp     DeviceGuardImplInterface, PrivateUse1HooksInterface, per-device generators
//   ops.cpp       the ATen kernels that must be native (factories, views, copies, resize, set_)
//   fallback.cpp  the counted boxed CPU fallback, autocast, and install() of everything
//   kernels.cpp   vendor kernel libraries on torch's stable ABI (torchvendor/kernel_api.h)
//   collectives.cpp the runtime's optional collectives (communicators, all_reduce, ...)
//   process_group.cpp the c10d backend a Python `tvgloo` group registers for the device type
//   module.cpp    the Python bindings (with process_group.cpp, the only TUs that see pybind11)
#pragma once

#include <torchvendor/runtime.h>

#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/core/Stream.h>
#include <c10/core/StorageImpl.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <cstdio>
#include <type_traits>
#include <map>
#include <string>
#include <vector>

namespace pybind11 {
class object;  // process_group.cpp's entry point takes a Python object
}  // namespace pybind11
namespace c10 {
class OperatorHandle;  // the boxed fallback's entry (fallback.cpp) takes a dispatcher operator
struct IValue;
}  // namespace c10

namespace torchvendor {

// ---- runtime.cpp ---------------------------------------------------------------------------

// The negotiated table. Entries the library does not provide (NULL, or beyond its struct_size)
// are NULL here, so `rt().memcpy_async == nullptr` means "optional entry missing".
const tv_runtime& rt();
bool runtime_loaded();

struct RuntimeInfo {
  std::string path;
  std::string name;            // tv_runtime::name
  uint32_t abi_major = 0, abi_minor = 0;
  uint64_t struct_size = 0;
  int device_count = 0;
  std::vector<std::string> missing_optional;  // optional entries the runtime does not provide
};
const RuntimeInfo& runtime_info();

// Loads the library, negotiates the ABI and checks the table. Throws c10::Error with a message
// that says what is wrong and what to do. A second call with the same path is a no-op; with
// another path it throws.
const RuntimeInfo& load_runtime(const std::string& path);

// Throws the c10 error that fits `status` (OutOfMemoryError, ValueError, NotImplementedError,
// RuntimeError otherwise). The message names the runtime entry and the arguments it was called
// with (by the header's parameter names), quotes the runtime's own message and says what to do.
[[noreturn]] void raise_call(tv_status status, const char* entry,
                             const std::vector<std::string>& args);
[[noreturn]] inline void raise_status(tv_status status, const char* entry) {
  raise_call(status, entry, {});
}
// The runtime's message for the calling thread's last failure, or "".
std::string last_error();

// How an argument of a failed call is shown; formatted only once the call has failed.
template <typename T>
std::string describe_arg(const T& v) {
  using U = std::decay_t<T>;
  if constexpr (std::is_same_v<U, const char*>) {  // a name or a path; char* is a buffer
    return v ? "\"" + std::string(v) + "\"" : "NULL";
  } else if constexpr (std::is_same_v<U, tv_memcpy_kind>) {
    switch (v) {
      case TV_MEMCPY_HOST_TO_DEVICE: return "TV_MEMCPY_HOST_TO_DEVICE";
      case TV_MEMCPY_DEVICE_TO_HOST: return "TV_MEMCPY_DEVICE_TO_HOST";
      case TV_MEMCPY_DEVICE_TO_DEVICE: return "TV_MEMCPY_DEVICE_TO_DEVICE";
      case TV_MEMCPY_HOST_TO_HOST: return "TV_MEMCPY_HOST_TO_HOST";
    }
    return std::to_string(static_cast<int>(v));
  } else if constexpr (std::is_pointer_v<U>) {
    if (v == nullptr) return "NULL";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%p", static_cast<const void*>(v));
    return buf;
  } else {
    return std::to_string(v);
  }
}

// Calls a runtime entry; on failure raises naming the entry and its arguments. Each argument
// is evaluated once: TV_CALL(memcpy, dst, src, n, kind).
template <typename Fn, typename... A>
inline void call_entry(const char* entry, Fn fn, const A&... args) {
  const tv_status s = fn(args...);
  if (s != TV_SUCCESS) raise_call(s, entry, {describe_arg(args)...});
}
#define TV_CALL(entry, ...) ::torchvendor::call_entry(#entry, ::torchvendor::rt().entry, __VA_ARGS__)
// For statuses checked by hand (queries, where TV_ERROR_NOT_READY is an answer).
inline void check(tv_status status, const char* entry) {
  if (status != TV_SUCCESS) raise_status(status, entry);
}

std::string backend_name();  // "acme" once renamed
int device_count() noexcept;
void check_device_index(int64_t index);  // ValueError naming the range
c10::DeviceIndex current_device();
void set_device(c10::DeviceIndex index);

// Streams. A c10::Stream id maps to a runtime tv_stream: id 0 is the device's default stream,
// ids 1..kPoolSize are the low-priority pool, kPoolSize+1..2*kPoolSize the high-priority pool,
// larger ids are streams made by getNewStream. All handles are created lazily and live until
// process exit (streams are shared freely by torch; see DeviceGuardImplInterface::getNewStream).
constexpr int kPoolSize = 8;
tv_stream native_stream(c10::Stream stream);
c10::Stream current_stream(c10::DeviceIndex device);
c10::Stream default_stream(c10::DeviceIndex device);
c10::Stream pool_stream(c10::DeviceIndex device, bool high_priority);
c10::Stream new_stream(c10::DeviceIndex device, int priority);
c10::Stream exchange_stream(c10::Stream stream);  // sets the thread's current stream
int stream_priority(c10::Stream stream);

// Copies `n` bytes ordered on `stream` (memcpy_async when provided); blocks until done unless
// `non_blocking`.
void copy_bytes(void* dst, const void* src, size_t n, tv_memcpy_kind kind, c10::Stream stream,
                bool non_blocking);

// ---- allocator.cpp -------------------------------------------------------------------------

c10::DeviceAllocator* device_allocator();
c10::Allocator* pinned_allocator();
bool is_pinned_ptr(const void* ptr);
// Keeps pinned host memory alive until the work now enqueued on `stream` has run.
void record_pinned_use(const void* ptr, c10::Stream stream);
c10::DeviceIndex device_of_ptr(const void* ptr);  // -1 if not ours
// Flattened like torch.cuda.memory_stats(): "allocated_bytes.all.current", ...
std::map<std::string, int64_t> memory_stats(c10::DeviceIndex device);
void reset_peak_stats(c10::DeviceIndex device);
void reset_accumulated_stats(c10::DeviceIndex device);
void empty_cache();
// After a late registration: each thread's first device allocation turns autograd
// multithreading off in that thread (torch's engine has no worker queue for the device).
void run_autograd_on_calling_threads();
void install_allocators();  // SetAllocator(PrivateUse1, ...)

// ---- guard.cpp -----------------------------------------------------------------------------

void install_guard_and_hooks();  // throws if another package owns the guard or the hooks

// ---- profiler.cpp --------------------------------------------------------------------------

// Routes the table's launch, copy, memset, collective and module_get_function entries through
// the profiler's activity recorder (a pass-through while no trace records); load_runtime calls it.
void wrap_activity_entries(tv_runtime& table);
const void* default_generator_ptr(c10::DeviceIndex device);  // const at::Generator*

// ---- fallback.cpp --------------------------------------------------------------------------

// Installs everything (allocators, guard, hooks, kernels, fallback, autocast). Idempotent.
void install();
std::map<std::string, int64_t> fallback_counts();
void reset_fallback_counts();
// Per operator, since the process started: {calls, bytes to host, bytes to device, nanoseconds}.
std::map<std::string, std::vector<int64_t>> fallback_costs();
std::vector<std::string> registered_pieces();  // for diagnose()
// Counts one call of `name` computed on the CPU (and warns once), as the boxed fallback does.
void count_cpu_fallback(const std::string& name);
// Adds one call of `name` computed on CPU copies outside the boxed fallback to fallback_costs()
// (priced_call.h's PricedCall calls it).
void record_cpu_call(const std::string& name, int64_t to_host, int64_t to_device, int64_t nanos);
// Runs `op` on `stack` (its arguments) through the counted, priced boxed CPU fallback: what the
// device does for an operator without a kernel. The kernel API's fallback entry calls it.
void run_boxed_fallback(const c10::OperatorHandle& op, std::vector<c10::IValue>* stack);

// ---- kernels.cpp ---------------------------------------------------------------------------

// Loads a vendor kernel library (torchvendor/kernel_api.h) after checking its marker, checks
// what it registered (operators that exist, none served by another library), calls its init;
// on any problem unloads it, so nothing stays registered, and throws. Returns its operators.
std::vector<std::string> load_kernel_library(const std::string& path);
std::map<std::string, int64_t> native_counts();
void reset_native_counts();
void set_checked_mode(bool on);
bool checked_mode();

// ---- collectives.cpp ----------------------------------------------------------------------

// True when the runtime provides every collective entry (runtime.h minor 1; comm_create or
// minor 2's comm_token + comm_create_from_token).
bool has_collectives();
// [blocks] Joins communicator `id` as `rank` of `nranks` on `device`; returns the tv_comm.
uintptr_t comm_create(const std::string& id, int nranks, int rank, c10::DeviceIndex device);
void comm_destroy(uintptr_t comm);
// True when the runtime joins communicators from a token (runtime.h minor 2), which rank 0 makes
// with comm_token and the process group hands to every rank through its c10d store.
bool has_token_bootstrap();
std::string comm_token(c10::DeviceIndex device);
// [blocks] Joins the communicator of `token` as `rank` of `nranks` on `device`.
uintptr_t comm_create_from_token(const std::string& token, int nranks, int rank,
                                 c10::DeviceIndex device);
// Enqueues collective `kind` ("all_reduce", "broadcast", "all_gather", "reduce_scatter", "send",
// "recv") on `stream`. `count` is the entry's count (sendcount for all_gather, recvcount for
// reduce_scatter); `op` a tv_reduce_op; `peer` the root of broadcast or the other rank of
// send/recv. A dtype without a tv_dtype is a TypeError; what the runtime refuses raises as
// raise_call does (TV_ERROR_NOT_SUPPORTED: NotImplementedError).
void collective(const std::string& kind, uintptr_t comm, const void* send, void* recv,
                size_t count, c10::ScalarType dtype, int op, int peer, c10::Stream stream);

// ---- process_group.cpp ---------------------------------------------------------------------

// Registers, for the device type of `group` (a Python torch.distributed.ProcessGroup), a c10d
// backend named `name` that hands every collective back to the group's Python method of the same
// name: what c10d dispatches per device type (functional collectives, DTensor, FSDP2) then runs
// on the group's own paths instead of reaching gloo with device pointers.
void attach_device_backend(const pybind11::object& group, const std::string& name);

// ---- ops.cpp -------------------------------------------------------------------------------

void register_native_kernels(void* library);  // torch::Library* for (aten, PrivateUse1)

// ---- rnn_cells.cpp / fallback.cpp --------------------------------------------------------------

}  // namespace torchvendor
namespace torch { class Library; }
namespace torchvendor {
// The fused LSTM/GRU cells (and backward) that ATen's recurrent layers call off the CPU.
void register_rnn_cell_kernels(torch::Library& m);
// Counts `name` as one operator run on the CPU outside the boxed fallback (warns once).
void count_fallback_op(const std::string& name);
// Grows or shrinks a device storage (copying the old bytes on the device).
void resize_storage_bytes(c10::StorageImpl* storage, size_t nbytes);

}  // namespace torchvendor
