// Loading the vendor runtime (dlopen + ABI negotiation), error mapping, devices and streams.
#include "tv_device.h"

#include <c10/core/impl/PyInterpreter.h>
#include <c10/util/Exception.h>

#include <dlfcn.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <sstream>
#include <unordered_map>

namespace torchvendor {
namespace {

tv_runtime g_table{};   // negotiated copy: missing entries are NULL
RuntimeInfo g_info;
bool g_loaded = false;
std::mutex g_load_mutex;

struct Entry {
  const char* name;
  size_t offset;
  bool required;
};
#define TV_ENTRY(field, req) Entry{#field, offsetof(tv_runtime, field), req}
// Required: what the device layer cannot work without. Optional entries degrade one feature
// each (named in diagnose()): pinned memory, async copies, timing, modules and launches, and
// error details (without them messages carry only the status code), native collectives
// (without them torchvendor.sdk.device.distributed stages collectives through host memory).
const Entry kEntries[] = {
    TV_ENTRY(device_count, true),        TV_ENTRY(get_device_properties, true),
    TV_ENTRY(set_device, true),          TV_ENTRY(get_device, true),
    TV_ENTRY(device_synchronize, true),  TV_ENTRY(malloc, true),
    TV_ENTRY(free, true),                TV_ENTRY(host_malloc, false),
    TV_ENTRY(host_free, false),          TV_ENTRY(memcpy, true),
    TV_ENTRY(memcpy_async, false),       TV_ENTRY(memset, false),
    TV_ENTRY(memset_async, false),       TV_ENTRY(stream_create, true),
    TV_ENTRY(stream_destroy, true),      TV_ENTRY(stream_query, true),
    TV_ENTRY(stream_synchronize, true),  TV_ENTRY(stream_priority_range, false),
    TV_ENTRY(event_create, true),        TV_ENTRY(event_destroy, true),
    TV_ENTRY(event_record, true),        TV_ENTRY(event_query, true),
    TV_ENTRY(event_synchronize, true),   TV_ENTRY(stream_wait_event, true),
    TV_ENTRY(event_elapsed_time, false), TV_ENTRY(module_load_file, false),
    TV_ENTRY(module_load_data, false),   TV_ENTRY(module_unload, false),
    TV_ENTRY(module_get_function, false), TV_ENTRY(launch, false),
    TV_ENTRY(get_error_string, false),   TV_ENTRY(last_error_message, false),
    TV_ENTRY(comm_create, false),        TV_ENTRY(comm_destroy, false),
    TV_ENTRY(all_reduce, false),         TV_ENTRY(broadcast, false),
    TV_ENTRY(all_gather, false),         TV_ENTRY(reduce_scatter, false),
    TV_ENTRY(send, false),               TV_ENTRY(recv, false),
    TV_ENTRY(comm_token, false),         TV_ENTRY(comm_create_from_token, false),
};
#undef TV_ENTRY

const char* status_name(tv_status s) {
  switch (s) {
    case TV_ERROR_INVALID_VALUE: return "TV_ERROR_INVALID_VALUE";
    case TV_ERROR_INVALID_DEVICE: return "TV_ERROR_INVALID_DEVICE";
    case TV_ERROR_OUT_OF_MEMORY: return "TV_ERROR_OUT_OF_MEMORY";
    case TV_ERROR_NOT_READY: return "TV_ERROR_NOT_READY";
    case TV_ERROR_NOT_FOUND: return "TV_ERROR_NOT_FOUND";
    case TV_ERROR_INVALID_IMAGE: return "TV_ERROR_INVALID_IMAGE";
    case TV_ERROR_LAUNCH_FAILED: return "TV_ERROR_LAUNCH_FAILED";
    case TV_ERROR_NOT_SUPPORTED: return "TV_ERROR_NOT_SUPPORTED";
    case TV_ERROR_INVALID_HANDLE: return "TV_ERROR_INVALID_HANDLE";
    default: return "TV_ERROR_UNKNOWN";
  }
}

}  // namespace

const tv_runtime& rt() {
  TORCH_CHECK(g_loaded, "torchvendor: no vendor runtime is loaded. Call "
              "torchvendor.sdk.register_device(name, runtime=...) first.");
  return g_table;
}
bool runtime_loaded() { return g_loaded; }
const RuntimeInfo& runtime_info() { return g_info; }

const RuntimeInfo& load_runtime(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_load_mutex);
  if (g_loaded) {
    TORCH_CHECK(path == g_info.path, "torchvendor: the runtime '", g_info.path,
                "' is already loaded in this process; one process serves one vendor runtime "
                "(PrivateUse1 is a single key). Cannot also load '", path, "'.");
    return g_info;
  }
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    TORCH_CHECK(false, "torchvendor: cannot load the vendor runtime library '", path,
                "': ", err ? err : "unknown dlopen error",
                ". Pass the path of a shared library that exports `" TV_RUNTIME_ENTRY_SYMBOL
                "` (see torchvendor/runtime.h).");
  }
  auto get = reinterpret_cast<tv_get_runtime_fn>(dlsym(handle, TV_RUNTIME_ENTRY_SYMBOL));
  if (get == nullptr) {
    dlclose(handle);
    TORCH_CHECK(false, "torchvendor: '", path, "' does not export `" TV_RUNTIME_ENTRY_SYMBOL
                "`. A vendor runtime library must define `TV_EXPORT tv_status "
                TV_RUNTIME_ENTRY_SYMBOL "(uint32_t requested_major, const tv_runtime** out)` "
                "(torchvendor/runtime.h); is this the right library?");
  }
  const tv_runtime* table = nullptr;
  tv_status s = get(TV_RUNTIME_ABI_MAJOR, &table);
  if (s != TV_SUCCESS || table == nullptr) {
    dlclose(handle);
    TORCH_CHECK(false, "torchvendor: '", path, "': " TV_RUNTIME_ENTRY_SYMBOL "(",
                TV_RUNTIME_ABI_MAJOR, ") returned ", status_name(s), " (", s, ")",
                table == nullptr && s == TV_SUCCESS ? " and no table" : "",
                ": the library cannot serve runtime ABI major ", TV_RUNTIME_ABI_MAJOR,
                ". Rebuild it against torchvendor's runtime.h.");
  }
  if (table->abi_major != TV_RUNTIME_ABI_MAJOR) {
    uint32_t major = table->abi_major;
    dlclose(handle);
    TORCH_CHECK(false, "torchvendor: '", path, "' implements runtime ABI major ", major,
                ", but this torchvendor speaks major ", TV_RUNTIME_ABI_MAJOR,
                ". Rebuild the library against this torchvendor's runtime.h "
                "(TV_RUNTIME_ABI_MAJOR ", TV_RUNTIME_ABI_MAJOR,
                ") or install a torchvendor release that supports major ", major, ".");
  }
  const uint64_t header = offsetof(tv_runtime, device_count);
  if (table->struct_size < header) {
    dlclose(handle);
    TORCH_CHECK(false, "torchvendor: '", path, "' returned a table with struct_size ",
                table->struct_size, ", smaller than the table header (", header,
                " bytes). Set struct_size = sizeof(tv_runtime).");
  }
  // An older minor has a shorter table: read only what lies inside its struct_size. A newer
  // minor has a longer one: read only the entries this torchvendor knows.
  std::memset(&g_table, 0, sizeof g_table);
  std::memcpy(&g_table, table,
              std::min<uint64_t>(table->struct_size, sizeof(tv_runtime)));
  std::vector<std::string> missing_required, missing_optional;
  for (const Entry& e : kEntries) {
    void* fn = nullptr;
    if (e.offset + sizeof(void*) <= table->struct_size)
      std::memcpy(&fn, reinterpret_cast<const char*>(&g_table) + e.offset, sizeof fn);
    else
      std::memset(reinterpret_cast<char*>(&g_table) + e.offset, 0, sizeof fn);
    if (fn == nullptr) (e.required ? missing_required : missing_optional).push_back(e.name);
  }
  std::string rt_name = table->name ? table->name : "(unnamed runtime)";
  if (!missing_required.empty()) {
    std::ostringstream names;
    for (size_t i = 0; i < missing_required.size(); ++i)
      names << (i ? ", " : "") << missing_required[i];
    dlclose(handle);
    TORCH_CHECK(false, "torchvendor: the runtime '", rt_name, "' (", path,
                ") lacks required table entries: ", names.str(),
                ". Implement them in the tv_runtime table your " TV_RUNTIME_ENTRY_SYMBOL
                " returns (torchvendor/runtime.h lists each entry's contract).");
  }
  int32_t count = 0;
  s = g_table.device_count(&count);
  if (s != TV_SUCCESS) count = 0;  // "must not fail"; treat as no devices
  g_info.path = path;
  g_info.name = rt_name;
  g_info.abi_major = table->abi_major;
  g_info.abi_minor = table->abi_minor;
  g_info.struct_size = table->struct_size;
  g_info.device_count = std::clamp<int32_t>(count, 0, 127);
  g_info.missing_optional = std::move(missing_optional);
  wrap_activity_entries(g_table);  // kernels, copies, ... on the profiler's device timeline
  g_loaded = true;  // the handle stays open for the life of the process
  return g_info;
}

std::string last_error() {
  if (!g_loaded || g_table.last_error_message == nullptr) return "";
  const char* m = g_table.last_error_message();
  return m ? m : "";
}

namespace {

// Each entry's parameter names, as runtime.h spells them; out-parameters start with '&' and
// are not shown (their value is an address on the caller's stack).
const std::unordered_map<std::string, std::vector<const char*>>& parameter_names() {
  static const std::unordered_map<std::string, std::vector<const char*>> table = {
      {"device_count", {"&count"}},
      {"get_device_properties", {"device", "&props"}},
      {"set_device", {"device"}},
      {"get_device", {"&device"}},
      {"device_synchronize", {"device"}},
      {"malloc", {"device", "size", "&ptr"}},
      {"free", {"device", "ptr"}},
      {"host_malloc", {"size", "&ptr"}},
      {"host_free", {"ptr"}},
      {"memcpy", {"dst", "src", "n", "kind"}},
      {"memcpy_async", {"dst", "src", "n", "kind", "stream"}},
      {"memset", {"dst", "value", "n"}},
      {"memset_async", {"dst", "value", "n", "stream"}},
      {"stream_create", {"device", "priority", "&stream"}},
      {"stream_destroy", {"stream"}},
      {"stream_query", {"stream"}},
      {"stream_synchronize", {"stream"}},
      {"stream_priority_range", {"&least", "&greatest"}},
      {"event_create", {"device", "flags", "&event"}},
      {"event_destroy", {"event"}},
      {"event_record", {"event", "stream"}},
      {"event_query", {"event"}},
      {"event_synchronize", {"event"}},
      {"stream_wait_event", {"stream", "event"}},
      {"event_elapsed_time", {"start", "end", "&milliseconds"}},
      {"module_load_file", {"device", "path", "&module"}},
      {"module_load_data", {"device", "image", "size", "&module"}},
      {"module_unload", {"module"}},
      {"module_get_function", {"module", "name", "&function"}},
      {"launch", {"function", "config", "args", "args_size", "stream"}},
      {"comm_create", {"id", "nranks", "rank", "device", "&comm"}},
      {"comm_destroy", {"comm"}},
      {"all_reduce", {"sendbuf", "recvbuf", "count", "dtype", "op", "comm", "stream"}},
      {"broadcast", {"sendbuf", "recvbuf", "count", "dtype", "root", "comm", "stream"}},
      {"all_gather", {"sendbuf", "recvbuf", "sendcount", "dtype", "comm", "stream"}},
      {"reduce_scatter", {"sendbuf", "recvbuf", "recvcount", "dtype", "op", "comm", "stream"}},
      {"send", {"buf", "count", "dtype", "peer", "comm", "stream"}},
      {"recv", {"buf", "count", "dtype", "peer", "comm", "stream"}},
      {"comm_token", {"device", "token", "&size"}},
      {"comm_create_from_token", {"token", "size", "nranks", "rank", "device", "&comm"}},
  };
  return table;
}

std::string format_call(const char* entry, const std::vector<std::string>& args) {
  std::ostringstream out;
  out << entry << "(";
  const auto& names = parameter_names();
  auto it = names.find(entry);
  bool first = true;
  for (size_t i = 0; i < args.size(); ++i) {
    const char* name = it != names.end() && i < it->second.size() ? it->second[i] : "?";
    if (name[0] == '&') continue;
    out << (first ? "" : ", ") << name << "=" << args[i];
    first = false;
  }
  out << ")";
  return out.str();
}

// What the caller can do about a failed call.
std::string advice(tv_status status, const std::string& entry) {
  const std::string dev = backend_name();
  switch (status) {
    case TV_ERROR_NOT_FOUND:
      if (entry == "module_get_function")
        return "The module exports no function of that name: check the kernel's symbol (declared "
               "extern \"C\" and exported) and that the right module was loaded.";
      return "Check that the file exists and the path is right.";
    case TV_ERROR_INVALID_VALUE:
      return "The runtime rejected an argument (its message says which); runtime.h gives " +
             entry + "'s contract.";
    case TV_ERROR_INVALID_DEVICE:
      return "Use a device index below torch." + dev + ".device_count().";
    case TV_ERROR_OUT_OF_MEMORY:
      return "Free tensors you no longer need, or call torch." + dev + ".empty_cache().";
    case TV_ERROR_INVALID_IMAGE:
      return "The module is not in this runtime's binary format, or was built for another "
             "device or runtime version: rebuild it for this runtime.";
    case TV_ERROR_LAUNCH_FAILED:
      return "A kernel launched earlier on this stream failed, or a collective gave up (the "
             "runtime's message names it); the error stays with the stream. To find the failing launch, synchronize after "
             "each launch (torch." + dev + ".synchronize()).";
    case TV_ERROR_INVALID_HANDLE:
      return "The stream, event, module or function was destroyed or unloaded, or was not made "
             "by this runtime.";
    case TV_ERROR_NOT_SUPPORTED:
      return "The runtime does not implement this; implement " + entry +
             " in the runtime table or avoid the feature.";
    default:
      return "See the runtime's message; runtime.h gives " + entry + "'s contract.";
  }
}

}  // namespace

void raise_call(tv_status status, const char* entry, const std::vector<std::string>& args) {
  // Read the message first: any other runtime call may replace it.
  std::string detail = last_error();
  const char* sname = g_loaded && g_table.get_error_string ? g_table.get_error_string(status)
                                                           : nullptr;
  std::ostringstream msg;
  msg << backend_name() << " runtime '" << g_info.name << "': " << format_call(entry, args)
      << " failed with " << (sname ? sname : status_name(status)) << " (" << status << ")";
  if (!detail.empty()) msg << ": " << detail;
  msg << ". " << advice(status, entry);
  switch (status) {
    case TV_ERROR_OUT_OF_MEMORY:
      TORCH_CHECK_WITH(OutOfMemoryError, false, msg.str());
    case TV_ERROR_INVALID_VALUE:
    case TV_ERROR_INVALID_DEVICE:
      TORCH_CHECK_VALUE(false, msg.str());
    case TV_ERROR_NOT_SUPPORTED:
      TORCH_CHECK_NOT_IMPLEMENTED(false, msg.str());
    default:
      TORCH_CHECK(false, msg.str());
  }
}

std::string backend_name() { return c10::get_privateuse1_backend(/*lower_case=*/true); }

int device_count() noexcept { return g_loaded ? g_info.device_count : 0; }

void check_device_index(int64_t index) {
  const int n = device_count();
  TORCH_CHECK_VALUE(index >= 0 && index < n, backend_name(), " device index ", index,
                    " is out of range: this runtime has ", n, " device", n == 1 ? "" : "s",
                    n > 0 ? " (valid: 0.." + std::to_string(n - 1) + ")" : "",
                    ". Check torch.", backend_name(), ".device_count().");
}

c10::DeviceIndex current_device() {
  int32_t d = 0;
  TV_CALL(get_device, &d);
  return static_cast<c10::DeviceIndex>(d);
}

void set_device(c10::DeviceIndex index) {
  check_device_index(index);
  TV_CALL(set_device, index);
}

// ---- streams -------------------------------------------------------------------------------
namespace {

struct StreamEntry {
  tv_stream handle = nullptr;
  int priority = 0;
};
std::mutex g_stream_mutex;
std::vector<std::unordered_map<c10::StreamId, StreamEntry>> g_streams;  // per device
std::vector<uint32_t> g_pool_next[2];
c10::StreamId g_next_new_id = 1 << 20;
thread_local std::vector<c10::StreamId> tls_current;

std::pair<int, int> priority_range() {  // (least, greatest); greatest <= least
  int32_t least = 0, greatest = 0;
  if (rt().stream_priority_range) TV_CALL(stream_priority_range, &least, &greatest);
  return {least, std::min(least, greatest)};
}

void ensure_tables() {  // g_stream_mutex held
  if (g_streams.empty()) {
    g_streams.resize(device_count());
    g_pool_next[0].assign(device_count(), 0);
    g_pool_next[1].assign(device_count(), 0);
  }
}

// Returns the entry for (device, id), creating the runtime stream on first use.
StreamEntry& entry(c10::DeviceIndex device, c10::StreamId id) {  // g_stream_mutex held
  ensure_tables();
  auto& table = g_streams.at(device);
  auto it = table.find(id);
  if (it != table.end()) return it->second;
  TORCH_CHECK(id >= 0 && id <= 2 * kPoolSize, "torchvendor: unknown ", backend_name(),
              " stream id ", id, " on device ", int(device),
              ". Streams must come from torch.", backend_name(),
              ".Stream(), current_stream() or default_stream().");
  auto [least, greatest] = priority_range();
  int priority = id > kPoolSize ? greatest : least;
  tv_stream handle = nullptr;
  TV_CALL(stream_create, device, priority, &handle);
  return table[id] = StreamEntry{handle, priority};
}

}  // namespace

tv_stream native_stream(c10::Stream stream) {
  // Every op on the device asks for its stream (each copy, each kernel launch): a per-thread
  // memo of the last stream per device spares the registry's lock and hash lookup. Stream
  // handles live until process exit, so a remembered one never dangles.
  struct Last {
    c10::StreamId id = -1;
    tv_stream handle = nullptr;
  };
  thread_local std::vector<Last> last;
  const c10::DeviceIndex device = stream.device_index();
  if (device >= 0 && static_cast<size_t>(device) < last.size() &&
      last[device].id == stream.id() && last[device].handle != nullptr)
    return last[device].handle;
  check_device_index(device);
  tv_stream handle;
  {
    std::lock_guard<std::mutex> lock(g_stream_mutex);
    handle = entry(device, stream.id()).handle;
  }
  if (last.empty()) last.resize(device_count());
  last[device] = Last{stream.id(), handle};
  return handle;
}

int stream_priority(c10::Stream stream) {
  check_device_index(stream.device_index());
  std::lock_guard<std::mutex> lock(g_stream_mutex);
  return entry(stream.device_index(), stream.id()).priority;
}

static c10::Stream make_stream(c10::DeviceIndex device, c10::StreamId id) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, device), id);
}

c10::Stream default_stream(c10::DeviceIndex device) {
  check_device_index(device);
  return make_stream(device, 0);
}

c10::Stream current_stream(c10::DeviceIndex device) {
  if (device < 0) device = current_device();
  check_device_index(device);
  if (tls_current.empty()) tls_current.assign(device_count(), 0);
  return make_stream(device, tls_current[device]);
}

c10::Stream pool_stream(c10::DeviceIndex device, bool high_priority) {
  check_device_index(device);
  std::lock_guard<std::mutex> lock(g_stream_mutex);
  ensure_tables();
  uint32_t slot = g_pool_next[high_priority][device]++ % kPoolSize;
  c10::StreamId id = 1 + slot + (high_priority ? kPoolSize : 0);
  entry(device, id);
  return make_stream(device, id);
}

c10::Stream new_stream(c10::DeviceIndex device, int priority) {
  check_device_index(device);
  std::lock_guard<std::mutex> lock(g_stream_mutex);
  ensure_tables();
  auto [least, greatest] = priority_range();
  priority = std::clamp(priority, greatest, least);
  tv_stream handle = nullptr;
  TV_CALL(stream_create, device, priority, &handle);
  c10::StreamId id = g_next_new_id++;
  g_streams[device][id] = StreamEntry{handle, priority};
  return make_stream(device, id);
}

c10::Stream exchange_stream(c10::Stream stream) {
  auto device = stream.device_index();
  check_device_index(device);
  native_stream(stream);  // validates the id
  c10::Stream previous = current_stream(device);
  tls_current[device] = stream.id();
  return previous;
}

void copy_bytes(void* dst, const void* src, size_t n, tv_memcpy_kind kind, c10::Stream stream,
                bool non_blocking) {
  if (n == 0) return;
  tv_stream s = native_stream(stream);
  if (non_blocking && rt().memcpy_async) {
    TV_CALL(memcpy_async, dst, src, n, kind, s);
  } else {
    // A blocking copy waits for the stream, then copies on this thread: for the small copies of
    // the CPU fallback this avoids a round trip through the stream's queue (about 3x faster on
    // the simulator), and the result is the same.
    TV_CALL(stream_synchronize, s);
    TV_CALL(memcpy, dst, src, n, kind);
  }
}

}  // namespace torchvendor
