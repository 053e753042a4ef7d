// torchvendor._C.TritonLaunch, ExternCall and EmptyStrided: the Triton level's per-call work in C++
// (ir/compat/triton_api.py and sdk/compile/triton_level.py build them).
//
// TritonLaunch is one compiled configuration of one Triton kernel: its function handle and a
// compact argument spec fixed when the launcher is built (per non-constexpr argument a code:
// pointer, integer of a width, float of a width; then the scratch pointers the target's kernels
// take). A call `launch(gx, gy, gz, *values)` reads each tensor's data pointer, packs the values
// at their C alignment, allocates the global scratch, and calls the runtime table's launch on the
// current stream of the current device: what the Python launcher did with struct.pack and
// torch.<device>.launch, without per-argument Python. With `null_default_stream`, a launch on
// the device's default stream passes the runtime's NULL stream instead (the reference CUDA
// runtime's: CUDA's legacy default stream, where torch's `cuda` runs the extern kernels, so a
// graph's kernels and externs share one stream, with no cross-stream dependency between them).
//
// ExternCall runs a library function of another torch device (cuBLAS behind `torch.mm` on
// `cuda`) on aliases of the vendor device's operands: where the two devices address the same
// memory (the reference GPU device over the CUDA runtime), each operand becomes a tensor of the
// library's device over the same bytes, no copy (cached, owning nothing); a result that lies in
// an operand's memory comes back as that operand (or a view of its storage), any other result as
// a vendor tensor over the library's memory, which keeps it alive. Streams: when either side's
// current stream is not its default stream, the vendor device is synchronized before and the
// library's stream after (and such a result is copied into vendor memory).
#include <ATen/EmptyTensor.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/TensorOptions.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/python.h>

#include <cstring>
#include <unordered_map>

#include "tv_device.h"

namespace py = pybind11;

namespace torchvendor {
namespace {

// ---- TritonLaunch -------------------------------------------------------------------------------

// Argument codes (struct-module letters): p pointer (a tensor, an int address or None), b h i q
// signed and B H I Q unsigned integers, f d e floats of 4, 8, 2 bytes, E bfloat16; then s (the
// global scratch, allocated per call) and z (a scratch pointer passed as NULL), which take no value.
size_t code_size(char c) {
  switch (c) {
    case 'b': case 'B': return 1;
    case 'h': case 'H': case 'e': case 'E': return 2;
    case 'i': case 'I': case 'f': return 4;
    case 'q': case 'Q': case 'd': case 'p': case 's': case 'z': return 8;
    default: TORCH_CHECK_VALUE(false, "TritonLaunch: unknown argument code '", c, "'");
  }
  return 0;
}

int64_t as_int(PyObject* o) {
  long long v = PyLong_AsLongLong(o);
  if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
  return v;
}

double as_double(PyObject* o) {
  double v = PyFloat_AsDouble(o);
  if (v == -1.0 && PyErr_Occurred()) throw py::error_already_set();
  return v;
}

uint64_t as_pointer(PyObject* o) {
  if (THPVariable_Check(o)) return reinterpret_cast<uint64_t>(THPVariable_Unpack(o).data_ptr());
  if (o == Py_None) return 0;
  if (PyLong_Check(o)) {
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (PyErr_Occurred()) throw py::error_already_set();
    return v;
  }
  throw py::type_error(std::string("TritonLaunch: a pointer argument must be a tensor, an int or None, got ") +
                       Py_TYPE(o)->tp_name);
}

class TritonLaunch {
 public:
  // keep: an object held as long as the launcher (the loaded module).
  TritonLaunch(uintptr_t function, std::string codes, const std::vector<int64_t>& block,
               uint32_t shared_memory_bytes, int64_t scratch_bytes, py::object keep, bool null_default_stream)
      : fn_(function), codes_(std::move(codes)), shared_(shared_memory_bytes),
        scratch_bytes_(scratch_bytes), keep_(std::move(keep)), null_default_(null_default_stream) {
    TORCH_CHECK_VALUE(fn_ != 0, "TritonLaunch: the function handle is 0");
    TORCH_CHECK_VALUE(block.size() <= 3, "TritonLaunch: block has 1 to 3 entries");
    for (size_t k = 0; k < 3; ++k) block_[k] = k < block.size() ? static_cast<uint32_t>(block[k]) : 1;
    size_t offset = 0;
    for (char c : codes_) {
      size_t size = code_size(c);
      offset += -offset % size;
      offsets_.push_back(static_cast<uint32_t>(offset));
      if (c == 'p' || c == 's' || c == 'z') pointers_.push_back(static_cast<uint32_t>(offset));
      if (c != 's' && c != 'z') ++n_values_;
      offset += size;
    }
    size_ = offset;
  }

  // launch(gx, gy, gz, *values); a grid with an empty dimension launches nothing.
  void call(const py::args& args) const {
    PyObject* tuple = args.ptr();
    const Py_ssize_t n = PyTuple_GET_SIZE(tuple);
    TORCH_CHECK_VALUE(n == static_cast<Py_ssize_t>(3 + n_values_), "TritonLaunch: takes the grid and ",
                      n_values_, " values, got ", n, " arguments");
    tv_launch_config config{};
    for (int k = 0; k < 3; ++k) {
      int64_t g = as_int(PyTuple_GET_ITEM(tuple, k));
      if (g <= 0) return;
      TORCH_CHECK_VALUE(g <= UINT32_MAX, "TritonLaunch: grid[", k, "] = ", g, " is too large");
      config.grid[k] = static_cast<uint32_t>(g);
      config.block[k] = block_[k];
    }
    alignas(16) unsigned char local[512];
    std::vector<unsigned char> heap;
    unsigned char* buf = local;
    if (size_ > sizeof local) {
      heap.resize(size_);
      buf = heap.data();
    }
    std::memset(buf, 0, size_);
    c10::DataPtr scratch;
    Py_ssize_t next = 3;
    for (size_t i = 0; i < codes_.size(); ++i) {
      unsigned char* at = buf + offsets_[i];
      const char c = codes_[i];
      if (c == 's') {
        if (scratch_bytes_ > 0) {
          size_t bytes = static_cast<size_t>(scratch_bytes_) * config.grid[0] * config.grid[1] * config.grid[2];
          scratch = device_allocator()->allocate(bytes);
          uint64_t p = reinterpret_cast<uint64_t>(scratch.get());
          std::memcpy(at, &p, 8);
        }
        continue;
      }
      if (c == 'z') continue;
      pack(c, PyTuple_GET_ITEM(tuple, next++), at);
    }
    config.shared_memory_bytes = shared_;
    config.pointer_offsets = pointers_.data();
    config.num_pointer_offsets = static_cast<uint32_t>(pointers_.size());
    const c10::Stream current = current_stream(current_device());
    tv_stream stream = null_default_ && current.id() == 0 ? nullptr : native_stream(current);
    py::gil_scoped_release no_gil;  // as torch.<device>.launch: a runtime's launch may block
    TV_CALL(launch, reinterpret_cast<tv_function>(fn_), static_cast<const tv_launch_config*>(&config),
            static_cast<const void*>(buf), size_, stream);
  }

  size_t size() const { return size_; }
  bool null_default_stream() const { return null_default_; }
  const std::vector<uint32_t>& pointer_offsets() const { return pointers_; }

 private:
  static void pack(char c, PyObject* o, unsigned char* at) {
    auto put = [at](auto v) { std::memcpy(at, &v, sizeof v); };
    switch (c) {
      case 'p': put(as_pointer(o)); break;
      case 'b': put(static_cast<int8_t>(as_int(o))); break;
      case 'B': put(static_cast<uint8_t>(as_int(o))); break;
      case 'h': put(static_cast<int16_t>(as_int(o))); break;
      case 'H': put(static_cast<uint16_t>(as_int(o))); break;
      case 'i': put(static_cast<int32_t>(as_int(o))); break;
      case 'I': put(static_cast<uint32_t>(as_int(o))); break;
      case 'q': put(static_cast<int64_t>(as_int(o))); break;
      case 'Q': {
        unsigned long long v = PyLong_AsUnsignedLongLong(o);
        if (PyErr_Occurred()) throw py::error_already_set();
        put(static_cast<uint64_t>(v));
        break;
      }
      case 'f': put(static_cast<float>(as_double(o))); break;
      case 'd': put(as_double(o)); break;
      case 'e': put(c10::Half(static_cast<float>(as_double(o))).x); break;
      case 'E': put(c10::BFloat16(static_cast<float>(as_double(o))).x); break;
      default: TORCH_CHECK_VALUE(false, "TritonLaunch: unknown argument code '", c, "'");
    }
  }

  uintptr_t fn_;
  std::string codes_;
  uint32_t block_[3] = {1, 1, 1};
  uint32_t shared_;
  int64_t scratch_bytes_;  // global scratch per program (times the grid), 0: none
  py::object keep_;
  bool null_default_ = false;
  std::vector<uint32_t> offsets_, pointers_;
  size_t n_values_ = 0, size_ = 0;
};

// ---- ExternCall ---------------------------------------------------------------------------------

// A tensor of `device` over the storage of `t` (the whole storage, so views of it stay in bounds),
// with the geometry of `t`; with `keep`, it keeps that storage alive.
at::Tensor alias_on(const at::Tensor& t, c10::Device device, bool keep = true) {
  const c10::Storage& s = t.storage();
  void* bytes = const_cast<void*>(s.data());
  c10::DataPtr data = keep ? c10::DataPtr(bytes, new c10::Storage(s),
                                          [](void* p) { delete static_cast<c10::Storage*>(p); }, device)
                           : c10::DataPtr(bytes, device);
  c10::Storage storage(c10::Storage::use_byte_size_t(), s.nbytes(), std::move(data), nullptr, false);
  auto keys = c10::DispatchKeySet(c10::computeDispatchKey(t.scalar_type(), c10::kStrided, device));
  at::Tensor a = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), keys, t.dtype());
  a.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  return a;
}

py::object wrap(at::Tensor t) { return py::reinterpret_steal<py::object>(THPVariable_Wrap(std::move(t))); }

// Operand aliases by (device, storage bytes and size, dtype, geometry): an operand's alias owns
// nothing, so the one made for an earlier tensor of the same memory and layout serves a later one
// (an extern's operands are the same buffers at every call). Used under the GIL only.
struct AliasKey {
  std::vector<int64_t> v;
  bool operator==(const AliasKey& o) const { return v == o.v; }
};
struct AliasKeyHash {
  size_t operator()(const AliasKey& k) const {
    size_t h = 0;
    for (int64_t x : k.v) h = h * 1000003u ^ std::hash<int64_t>()(x);
    return h;
  }
};

AliasKey alias_key(const at::Tensor& t, c10::Device device) {
  AliasKey k;
  k.v.reserve(7 + 2 * t.dim());
  k.v = {static_cast<int64_t>(device.type()), device.index(),
         reinterpret_cast<int64_t>(t.storage().data()), static_cast<int64_t>(t.storage().nbytes()),
         static_cast<int64_t>(t.scalar_type()), t.storage_offset(), t.dim()};
  for (int64_t x : t.sizes()) k.v.push_back(x);
  for (int64_t x : t.strides()) k.v.push_back(x);
  return k;
}

std::unordered_map<AliasKey, py::object, AliasKeyHash>& operand_aliases() {
  static auto* cache = new std::unordered_map<AliasKey, py::object, AliasKeyHash>();  // never freed: no
  return *cache;                                                                    // Python at exit
}

py::object operand_alias(const at::Tensor& t, c10::Device device) {
  auto& cache = operand_aliases();
  AliasKey key = alias_key(t, device);
  auto found = cache.find(key);
  if (found != cache.end()) return found->second;
  if (cache.size() >= 4096) cache.clear();
  py::object alias = wrap(alias_on(t, device, false));
  cache.emplace(std::move(key), alias);
  return alias;
}

class ExternCall {
 public:
  ExternCall(py::object fn, c10::DeviceType vendor, c10::DeviceType library)
      : fn_(std::move(fn)), vendor_(vendor), library_(library) {
    TORCH_CHECK_VALUE(c10::impl::hasDeviceGuardImpl(library_), "ExternCall: torch has no ",
                      c10::DeviceTypeName(library_), " device in this build");
  }

  py::object call(const py::args& args, const py::kwargs& kwargs) const { return call_raw(args.ptr(), kwargs.ptr()); }

  // args: a tuple, kwargs: a dict or NULL (as CPython passes them to a builtin)
  py::object call_raw(PyObject* args, PyObject* kwargs) const {
    Call c{this};
    c.made.reserve(4);
    py::object cargs = c.to(args);
    py::object ckwargs;
    if (kwargs != nullptr && PyDict_GET_SIZE(kwargs) > 0) {
      PyObject *key, *value;
      Py_ssize_t pos = 0;
      py::dict d;
      while (PyDict_Next(kwargs, &pos, &key, &value))
        if (PyDict_SetItem(d.ptr(), key, c.to(value).ptr()) != 0) throw py::error_already_set();
      ckwargs = std::move(d);
    }
    if (c.made.empty()) return invoke(args, kwargs);
    const c10::DeviceIndex index = c.made.front().original.device().index();
    std::optional<c10::Stream> library_stream = other_stream(index);
    if (library_stream) TV_CALL(device_synchronize, index);
    py::object out = invoke(cargs.ptr(), ckwargs ? ckwargs.ptr() : nullptr);
    if (library_stream) c10::impl::getDeviceGuardImpl(library_)->synchronizeStream(*library_stream);
    c.sync = library_stream.has_value();
    return c.back(out);
  }

 private:
  struct Made {
    c10::StorageImpl* storage;  // the alias's
    py::object object;          // the operand, as passed
    at::Tensor original;
  };

  // One call's aliases; `to` makes them, `back` maps results.
  struct Call {
    const ExternCall* self;
    std::vector<Made> made;
    bool sync = false;

    py::object to(py::handle v) {
      PyObject* o = v.ptr();
      if (THPVariable_Check(o)) {
        const at::Tensor& t = THPVariable_Unpack(o);
        if (!t.defined() || t.device().type() != self->vendor_ || t.layout() != c10::kStrided || !t.has_storage())
          return py::reinterpret_borrow<py::object>(v);
        py::object a = operand_alias(t, self->library_device(t.device().index()));
        made.push_back({THPVariable_Unpack(a.ptr()).storage().unsafeGetStorageImpl(),
                        py::reinterpret_borrow<py::object>(v), t});
        return a;
      }
      return map(v, [this](py::handle x) { return to(x); });
    }

    py::object back(py::handle v) {
      PyObject* o = v.ptr();
      if (THPVariable_Check(o)) {
        const at::Tensor& r = THPVariable_Unpack(o);
        if (!r.defined() || !r.has_storage() || r.layout() != c10::kStrided) return py::reinterpret_borrow<py::object>(v);
        for (const Made& m : made)
          if (m.storage == r.storage().unsafeGetStorageImpl()) return in_operand(r, m);
        if (r.device().type() != self->library_) return py::reinterpret_borrow<py::object>(v);
        c10::Device vendor(self->vendor_, self->made_index(made));
        if (!sync) return wrap(alias_on(r, vendor));
        // another stream is in use: a copy in vendor memory, not the library allocator's block
        at::Tensor out = at::empty_strided(r.sizes(), r.strides(), r.options().device(vendor));
        alias_on(out, r.device()).copy_(r);
        return wrap(out);
      }
      return map(v, [this](py::handle x) { return back(x); });
    }

    static py::object in_operand(const at::Tensor& r, const Made& m) {
      const at::Tensor& op = m.original;
      if (r.dtype() == op.dtype() && r.sizes().equals(op.sizes()) && r.strides().equals(op.strides()) &&
          r.storage_offset() == op.storage_offset())
        return m.object;
      at::Tensor view = at::detail::make_tensor<c10::TensorImpl>(c10::Storage(op.storage()), op.key_set(), r.dtype());
      view.unsafeGetTensorImpl()->set_sizes_and_strides(r.sizes(), r.strides(), r.storage_offset());
      return wrap(std::move(view));
    }

    template <typename F>
    static py::object map(py::handle v, F f) {
      PyObject* o = v.ptr();
      if (PyTuple_CheckExact(o)) {
        py::tuple out(PyTuple_GET_SIZE(o));
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o); ++i) out[i] = f(PyTuple_GET_ITEM(o, i));
        return std::move(out);
      }
      if (PyList_CheckExact(o)) {
        py::list out(PyList_GET_SIZE(o));
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(o); ++i) out[i] = f(PyList_GET_ITEM(o, i));
        return std::move(out);
      }
      return py::reinterpret_borrow<py::object>(v);
    }
  };

  py::object invoke(PyObject* args, PyObject* kwargs) const {
    PyObject* out = PyObject_Call(fn_.ptr(), args, kwargs);
    if (out == nullptr) throw py::error_already_set();
    return py::reinterpret_steal<py::object>(out);
  }

  c10::Device library_device(c10::DeviceIndex index) const {
    return library_ == c10::DeviceType::CPU ? c10::Device(library_) : c10::Device(library_, index);
  }

  c10::DeviceIndex made_index(const std::vector<Made>& made) const {
    return made.front().original.device().index();
  }

  // The library's current stream where it or the vendor device's is not the default one.
  std::optional<c10::Stream> other_stream(c10::DeviceIndex index) const {
    bool vendor_other = current_stream(index).id() != 0;
    if (library_ == c10::DeviceType::CPU) {
      if (vendor_other) return c10::Stream(c10::Stream::DEFAULT, c10::Device(library_));
      return std::nullopt;
    }
    const auto* impl = c10::impl::getDeviceGuardImpl(library_);
    c10::Device device = library_device(index);
    c10::Stream s = impl->getStream(device);
    if (vendor_other || s != impl->getDefaultStream(device)) return s;
    return std::nullopt;
  }

  py::object fn_;
  c10::DeviceType vendor_, library_;
};

// ---- EmptyStrided ---------------------------------------------------------------------------------

// Inductor's allocation call in a generated wrapper, `empty_strided(size, stride, device='<name>',
// dtype=torch.float32)`: for the device by name (its current index, as torch.empty_strided with
// that string), the device allocator straight away, as Inductor's empty_strided_cuda does for
// cuda; any other call goes to `fallback` (torch.empty_strided).
class EmptyStrided {
 public:
  EmptyStrided(py::object fallback, std::string name) : fallback_(std::move(fallback)), name_(std::move(name)) {}

  py::object call(const py::handle& size, const py::handle& stride, const py::handle& device,
                  const py::handle& dtype) const {
    if (PyUnicode_Check(device.ptr()) && PyUnicode_CompareWithASCIIString(device.ptr(), name_.c_str()) == 0 &&
        THPDtype_Check(dtype.ptr()) && PyTuple_Check(size.ptr()) && PyTuple_Check(stride.ptr())) {
      std::vector<int64_t> sizes = ints(size), strides = ints(stride);
      if (sizes.size() == strides.size()) {
        at::Tensor t = at::detail::empty_strided_generic(
            sizes, strides, device_allocator(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
            reinterpret_cast<THPDtype*>(dtype.ptr())->scalar_type);
        return wrap(std::move(t));
      }
    }
    return fallback_(size, stride, py::arg("device") = device, py::arg("dtype") = dtype);
  }

  // The call as CPython passes it to a builtin: (size, stride, device=..., dtype=...) here, any
  // other form to the fallback.
  py::object call_raw(PyObject* args, PyObject* kwargs) const {
    static PyObject* k_device = PyUnicode_InternFromString("device");
    static PyObject* k_dtype = PyUnicode_InternFromString("dtype");
    PyObject* device = kwargs ? PyDict_GetItem(kwargs, k_device) : nullptr;  // borrowed
    PyObject* dtype = kwargs ? PyDict_GetItem(kwargs, k_dtype) : nullptr;
    if (PyTuple_GET_SIZE(args) == 2 && device && dtype && PyDict_GET_SIZE(kwargs) == 2)
      return call(PyTuple_GET_ITEM(args, 0), PyTuple_GET_ITEM(args, 1), device, dtype);
    PyObject* out = PyObject_Call(fallback_.ptr(), args, kwargs);
    if (out == nullptr) throw py::error_already_set();
    return py::reinterpret_steal<py::object>(out);
  }

 private:
  static std::vector<int64_t> ints(const py::handle& tuple) {
    std::vector<int64_t> out(PyTuple_GET_SIZE(tuple.ptr()));
    for (size_t i = 0; i < out.size(); ++i) out[i] = as_int(PyTuple_GET_ITEM(tuple.ptr(), i));
    return out;
  }

  py::object fallback_;
  std::string name_;
};

// ---- builtins ------------------------------------------------------------------------------------

// `function` of an ExternCall or EmptyStrided: a builtin function over the object (kept alive by
// the builtin), which the generated wrapper calls as CPython calls any builtin: pybind11's
// argument matching (py::args, keyword arguments) cost about 2 us a call on the simulator.
template <typename T>
PyObject* raw_entry(PyObject* capsule, PyObject* args, PyObject* kwargs) {
  HANDLE_TH_ERRORS
  const T* self = static_cast<const T*>(PyCapsule_GetPointer(capsule, nullptr));
  if (self == nullptr) return nullptr;
  return self->call_raw(args, kwargs).release().ptr();
  END_HANDLE_TH_ERRORS
}

template <typename T>
py::object builtin(py::object owner, const char* name) {
  static PyMethodDef def = {name, reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(&raw_entry<T>)),
                            METH_VARARGS | METH_KEYWORDS, nullptr};
  PyObject* capsule = PyCapsule_New(py::cast<T*>(owner), nullptr,
                                    [](PyObject* c) { Py_XDECREF(static_cast<PyObject*>(PyCapsule_GetContext(c))); });
  if (capsule == nullptr) throw py::error_already_set();
  PyCapsule_SetContext(capsule, owner.release().ptr());  // the builtin keeps the object alive
  PyObject* f = PyCFunction_NewEx(&def, capsule, nullptr);
  Py_DECREF(capsule);
  if (f == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(f);
}

}  // namespace

void bind_triton_launch(py::module_& m) {
  py::class_<EmptyStrided>(m, "EmptyStrided")
      .def(py::init<py::object, std::string>(), py::arg("fallback"), py::arg("device"))
      .def("__call__", &EmptyStrided::call, py::arg("size"), py::arg("stride"), py::kw_only(),
           py::arg("device") = py::none(), py::arg("dtype") = py::none())
      .def_property_readonly("function", [](py::object self) { return builtin<EmptyStrided>(self, "empty_strided"); });
  py::class_<TritonLaunch>(m, "TritonLaunch")
      .def(py::init<uintptr_t, std::string, const std::vector<int64_t>&, uint32_t, int64_t, py::object, bool>(),
           py::arg("function"), py::arg("codes"), py::arg("block"), py::arg("shared_memory_bytes"),
           py::arg("scratch_bytes"), py::arg("keep") = py::none(), py::kw_only(),
           py::arg("null_default_stream") = false)
      .def("__call__", &TritonLaunch::call)
      .def_property_readonly("size", &TritonLaunch::size)
      .def_property_readonly("null_default_stream", &TritonLaunch::null_default_stream)
      .def_property_readonly("pointer_offsets", &TritonLaunch::pointer_offsets);
  py::class_<ExternCall>(m, "ExternCall")
      .def(py::init([](py::object fn, const std::string& vendor, const std::string& library) {
             return ExternCall(std::move(fn), c10::Device(vendor).type(), c10::Device(library).type());
           }),
           py::arg("fn"), py::arg("vendor"), py::arg("library"))
      .def("__call__", &ExternCall::call)
      .def_property_readonly("function", [](py::object self) { return builtin<ExternCall>(self, "extern_call"); });
}

}  // namespace torchvendor
