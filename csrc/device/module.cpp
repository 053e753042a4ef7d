// torchvendor._C: Python bindings of the device layer. The only TU that sees pybind11; the
// Python API in torchvendor/sdk/device.py wraps these (private, underscore-free names here are
// still internal: vendors use torch.<name> and torchvendor.sdk).
#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/device_lazy_init.h>
#include <torch/python.h>

#include "tv_device.h"

namespace py = pybind11;
using namespace torchvendor;

namespace {

py::dict info_dict(const RuntimeInfo& info) {
  py::dict d;
  d["path"] = info.path;
  d["name"] = info.name;
  d["abi_major"] = info.abi_major;
  d["abi_minor"] = info.abi_minor;
  d["struct_size"] = info.struct_size;
  d["device_count"] = info.device_count;
  d["missing_optional"] = info.missing_optional;
  return d;
}

c10::DeviceIndex resolve(int64_t device) {
  if (device < 0) return current_device();
  check_device_index(device);
  return static_cast<c10::DeviceIndex>(device);
}

void require(const void* entry, const char* name, const char* feature) {
  TORCH_CHECK_NOT_IMPLEMENTED(entry != nullptr, "the ", backend_name(), " runtime '",
                              runtime_info().name, "' does not provide `", name, "`, so ",
                              feature, " is unavailable. Implement it in the runtime table.");
}

std::array<uint32_t, 3> dims(const std::vector<int64_t>& v, const char* what) {
  TORCH_CHECK_VALUE(!v.empty() && v.size() <= 3, what, " must have 1 to 3 entries, got ",
                    v.size());
  std::array<uint32_t, 3> out{1, 1, 1};
  for (size_t i = 0; i < v.size(); ++i) {
    TORCH_CHECK_VALUE(v[i] >= 1 && v[i] <= UINT32_MAX, what, "[", i, "] must be >= 1, got ",
                      v[i]);
    out[i] = static_cast<uint32_t>(v[i]);
  }
  return out;
}

// ---- one function per concern ---------------------------------------------------------------

using release = py::call_guard<py::gil_scoped_release>;

// Loading the runtime, installing the device, what is registered, fork handling, fallback.
void bind_info(py::module_& m) {
  m.def("load_runtime", [](const std::string& path) { return info_dict(load_runtime(path)); },
        py::arg("path"));
  m.def("runtime_info", [] {
    return runtime_loaded() ? py::object(info_dict(runtime_info())) : py::object(py::none());
  });
  m.def("install", &install);
  m.def("run_autograd_on_calling_threads", &run_autograd_on_calling_threads);
  m.def("registered_pieces", &registered_pieces);
  m.def("lazy_init", [] {
    torch::utils::register_fork_handler_for_device_init(at::kPrivateUse1);
  });
  m.def("is_in_bad_fork", [] { return torch::utils::is_device_in_bad_fork(at::kPrivateUse1); });
  m.def("fallback_counts", &fallback_counts);
  m.def("reset_fallback_counts", &reset_fallback_counts);
  m.def("fallback_costs", &fallback_costs);
}

// Devices, their properties and their default generators.
void bind_devices(py::module_& m) {
  m.def("device_count", [] { return device_count(); });
  m.def("current_device", [] { return int(current_device()); });
  m.def("set_device", [](int64_t d) { set_device(static_cast<c10::DeviceIndex>(d < 0 ? -1 : d)); },
        py::arg("device"));
  m.def("exchange_device", [](int64_t d) {
    int old = current_device();
    if (d >= 0 && d != old) set_device(static_cast<c10::DeviceIndex>(d));
    return old;
  });
  m.def("synchronize", [](int64_t d) { TV_CALL(device_synchronize, resolve(d)); },
        py::arg("device") = -1, release());
  m.def("get_device_properties", [](int64_t d) {
    tv_device_properties p{};
    p.struct_size = sizeof p;
    TV_CALL(get_device_properties, resolve(d), &p);
    py::dict out;
    out["name"] = std::string(p.name, strnlen(p.name, sizeof p.name));
    out["total_memory"] = p.total_memory;
    out["major"] = p.capability_major;
    out["minor"] = p.capability_minor;
    out["multi_processor_count"] = p.multiprocessor_count;
    return out;
  }, py::arg("device") = -1);
  m.def("default_generator", [](int64_t d) {
    auto* gen = static_cast<const at::Generator*>(default_generator_ptr(resolve(d)));
    return py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(*gen));
  }, py::arg("device") = -1);
}

// Streams (events are torch.Event objects served by the device guard).
void bind_streams(py::module_& m) {
  m.def("current_stream", [](int64_t d) { return current_stream(resolve(d)); },
        py::arg("device") = -1);
  m.def("default_stream", [](int64_t d) { return default_stream(resolve(d)); },
        py::arg("device") = -1);
  m.def("set_stream", [](c10::Stream s) { exchange_stream(s); }, py::arg("stream"));
  m.def("stream_priority", [](c10::Stream s) { return stream_priority(s); });
  m.def("stream_priority_range", [] {
    int32_t least = 0, greatest = 0;
    if (rt().stream_priority_range) TV_CALL(stream_priority_range, &least, &greatest);
    return py::make_tuple(least, greatest);
  });
}

// The caching allocator's statistics and cache.
void bind_memory(py::module_& m) {
  m.def("memory_stats", [](int64_t d) { return memory_stats(resolve(d)); },
        py::arg("device") = -1);
  m.def("reset_peak_memory_stats", [](int64_t d) { reset_peak_stats(resolve(d)); },
        py::arg("device") = -1);
  m.def("reset_accumulated_memory_stats", [](int64_t d) { reset_accumulated_stats(resolve(d)); },
        py::arg("device") = -1);
  m.def("empty_cache", &empty_cache, release());
  m.def("mem_get_info", [](int64_t d) {
    auto* alloc = device_allocator();
    return alloc->getMemoryInfo(resolve(d));
  }, py::arg("device") = -1);
}

uintptr_t load_module_image(const py::object& image, int64_t d) {
  c10::DeviceIndex device = resolve(d);
  tv_module mod = nullptr;
  if (py::isinstance<py::bytes>(image) || py::isinstance<py::bytearray>(image)) {
    require(reinterpret_cast<void*>(rt().module_load_data), "module_load_data",
            "loading a module from bytes");
    std::string data = py::bytes(image);
    py::gil_scoped_release no_gil;
    TV_CALL(module_load_data, device, static_cast<const void*>(data.data()), data.size(), &mod);
  } else {
    require(reinterpret_cast<void*>(rt().module_load_file), "module_load_file",
            "loading a module from a file");
    std::string path = py::str(py::module_::import("os").attr("fspath")(image));
    py::gil_scoped_release no_gil;
    TV_CALL(module_load_file, device, path.c_str(), &mod);
  }
  return reinterpret_cast<uintptr_t>(mod);
}

void launch_function(uintptr_t fn, const std::vector<int64_t>& grid,
                     const std::vector<int64_t>& block, const py::bytes& args,
                     const std::vector<uint32_t>& pointer_offsets, c10::Stream stream,
                     uint32_t shared_memory_bytes) {
  require(reinterpret_cast<void*>(rt().launch), "launch", "launching kernels");
  TORCH_CHECK_VALUE(fn != 0, "launch: function handle is 0; use get_function()'s result");
  TORCH_CHECK_VALUE(stream.device_type() == c10::DeviceType::PrivateUse1, "launch: stream "
                    "must be a ", backend_name(), " stream, got one on ", stream.device());
  std::string buffer = args;
  for (uint32_t off : pointer_offsets)
    TORCH_CHECK_VALUE(off + sizeof(void*) <= buffer.size(), "launch: pointer offset ", off,
                      " lies outside the ", buffer.size(), "-byte argument buffer");
  tv_launch_config config{};
  auto g = dims(grid, "grid");
  auto b = dims(block, "block");
  std::copy(g.begin(), g.end(), config.grid);
  std::copy(b.begin(), b.end(), config.block);
  config.shared_memory_bytes = shared_memory_bytes;
  config.pointer_offsets = pointer_offsets.data();
  config.num_pointer_offsets = static_cast<uint32_t>(pointer_offsets.size());
  tv_stream s = native_stream(stream);
  py::gil_scoped_release no_gil;
  TV_CALL(launch, reinterpret_cast<tv_function>(fn), static_cast<const tv_launch_config*>(&config),
          static_cast<const void*>(buffer.data()), buffer.size(), s);
}

// Modules of compiled device code, their functions, and launches.
void bind_modules(py::module_& m) {
  m.def("load_module", &load_module_image, py::arg("image"), py::arg("device") = -1);
  m.def("unload_module", [](uintptr_t mod) {
    require(reinterpret_cast<void*>(rt().module_unload), "module_unload", "unloading modules");
    TV_CALL(module_unload, reinterpret_cast<tv_module>(mod));
  });
  m.def("get_function", [](uintptr_t mod, const std::string& name) {
    require(reinterpret_cast<void*>(rt().module_get_function), "module_get_function",
            "looking up kernels");
    TORCH_CHECK_VALUE(mod != 0, "get_function: module handle is 0; use load_module()'s result");
    tv_function fn = nullptr;
    TV_CALL(module_get_function, reinterpret_cast<tv_module>(mod), name.c_str(), &fn);
    return reinterpret_cast<uintptr_t>(fn);
  });
  m.def("launch", &launch_function, py::arg("function"), py::arg("grid"), py::arg("block"),
        py::arg("args"), py::arg("pointer_offsets"), py::arg("stream"),
        py::arg("shared_memory_bytes") = 0);
}

// Vendor kernel libraries on torch's stable ABI, their native-call counts and checked mode.
void bind_kernels(py::module_& m) {
  m.def("load_kernel_library", &load_kernel_library, py::arg("path"));
  m.def("native_counts", &native_counts);
  m.def("reset_native_counts", &reset_native_counts);
  m.def("set_checked_mode", &set_checked_mode, py::arg("on"));
  m.def("checked_mode", &checked_mode);
}

// The runtime's collectives on device tensors (sdk/device/distributed.py picks them over staging).
void bind_collectives(py::module_& m) {
  m.def("has_collectives", &has_collectives);
  m.def("comm_create", [](const std::string& id, int nranks, int rank, int64_t device) {
    return comm_create(id, nranks, rank, resolve(device));
  }, py::arg("id"), py::arg("nranks"), py::arg("rank"), py::arg("device"), release());
  m.def("comm_destroy", &comm_destroy, py::arg("comm"));
  m.def("has_token_bootstrap", &has_token_bootstrap);
  m.def("comm_token", [](int64_t device) { return py::bytes(comm_token(resolve(device))); },
        py::arg("device"));
  m.def("comm_create_from_token", [](const std::string& token, int nranks, int rank, int64_t device) {
    return comm_create_from_token(token, nranks, rank, resolve(device));
  }, py::arg("token"), py::arg("nranks"), py::arg("rank"), py::arg("device"), release());
  // send and recv are contiguous tensors of one device (or None where the entry has no such
  // buffer); the collective is enqueued on that device's current stream.
  m.def("collective", [](const std::string& kind, uintptr_t comm, const std::optional<at::Tensor>& send,
                         const std::optional<at::Tensor>& recv, int64_t count, int op, int peer) {
    const at::Tensor& any = send ? *send : *recv;
    for (const auto* t : {&send, &recv})
      TORCH_CHECK_VALUE(!*t || ((*t)->is_contiguous() && (*t)->device() == any.device()),
                        "collective: buffers must be contiguous tensors of one device");
    c10::Stream stream = current_stream(any.device().index());
    const void* src = send ? send->const_data_ptr() : nullptr;
    void* dst = recv ? recv->mutable_data_ptr() : nullptr;
    py::gil_scoped_release no_gil;
    collective(kind, comm, src, dst, static_cast<size_t>(count), any.scalar_type(), op, peer,
               stream);
  }, py::arg("kind"), py::arg("comm"), py::arg("send"), py::arg("recv"), py::arg("count"),
     py::arg("op") = 0, py::arg("peer") = 0);
  m.def("attach_device_backend", &attach_device_backend, py::arg("group"), py::arg("name"));
}

}  // namespace

namespace torchvendor {
void bind_replay(py::module_& m);  // replay.cpp: a LOOP partition's call without per-call Python
void bind_process_group(py::module_& m);  // process_group.cpp: native collectives without Python
void bind_triton_launch(py::module_& m);  // triton_launch.cpp: the Triton level's launches and externs
}  // namespace torchvendor

PYBIND11_MODULE(_C, m) {
  py::module_::import("torch");  // torch's pybind11 types must exist before ours
  m.doc() = "torchvendor device layer (internal; use torchvendor.sdk and torch.<device>)";
  bind_info(m);
  bind_devices(m);
  bind_streams(m);
  bind_memory(m);
  bind_modules(m);
  bind_kernels(m);
  bind_collectives(m);
  torchvendor::bind_replay(m);
  torchvendor::bind_process_group(m);
  torchvendor::bind_triton_launch(m);
}
