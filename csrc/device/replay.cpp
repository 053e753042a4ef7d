// torchvendor._C.Replay: a LOOP partition's call without per-call Python (the SDK's loop runner,
// sdk/compile/runner_replay.py, builds one per partition whose program has no size symbol).
//
// The runner's generated Python call (sdk/compile/runner_source.py) checks each input's layout,
// allocates buffers, makes views, launches kernels and calls extern kernels; a small partition
// spends most of its call in that Python. A Replay does the same from a table built once: the
// guard (each input an exact Tensor/Parameter of the dtype, device, sizes and strides the
// program was planned for) and the layout check in C++, allocation with the device's allocator,
// views as Inductor's reinterpret_tensor makes them, storage reuse as planned, and each kernel
// either launched through the runtime table's `launch` (or called, for a host kernel, as
// `int32_t fn(const void*, void* args)`) with its packed argument block, or, where it has no
// native form, called through Python like an extern kernel. A guard that fails returns None:
// the caller runs the Python call, which restrides or binds sizes as it always did. On torch's
// `cuda` device a kernel launches through the CUDA driver's cuLaunchKernel (a partition too large
// for a CUDA graph). `boxed(list)` is AOTAutograd's boxed convention: the call owns the list's
// inputs, clears it past the guard, and the table's drops free each input at its last use.
#include <ATen/EmptyTensor.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <dlfcn.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/python.h>

#include "tv_device.h"

namespace py = pybind11;

namespace torchvendor {
namespace {

using host_kernel = int32_t (*)(const void*, void*);

// torch's `cuda` device: kernels launched through the CUDA driver's cuLaunchKernel (resolved from the
// libcuda.so.1 torch already loaded: this library links no CUDA), arguments as one packed block
// (CU_LAUNCH_PARAM_BUFFER_POINTER), on the current stream torch's CUDA guard reports.
using cu_launch_kernel = int (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*,
                                 void**, void**);

cu_launch_kernel cuda_launch_kernel() {
  static cu_launch_kernel fn = [] {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!lib) lib = dlopen("libcuda.so.1", RTLD_NOW);
    return lib ? reinterpret_cast<cu_launch_kernel>(dlsym(lib, "cuLaunchKernel")) : nullptr;
  }();
  TORCH_CHECK(fn, "Replay: cuLaunchKernel not found in libcuda.so.1");
  return fn;
}

// One launch of a kernel: a runtime function handle, or the address of a host function (no grid).
struct Launch {
  uintptr_t fn = 0;
  bool host = false;
  tv_launch_config config{};
  std::vector<int> scratch;             // positions in the kernel's scratch list, after the sizes
  std::vector<int> aligned;             // buffer positions whose pointers must be multiples of...
  int64_t alignment = 0;                // ... this, else `otherwise` runs
  std::shared_ptr<Launch> otherwise;
  py::object on_error;                  // host: called with a nonzero status (raises)
};

enum class Kind { Alloc, Alias, Move, Drop, Launch, Call };

struct Op {
  Op() = default;
  Kind kind = Kind::Drop;
  int slot = -1, src = -1;
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;
  c10::ScalarType dtype = c10::ScalarType::Float;
  std::optional<c10::Device> device;    // Alloc: another device than the program's
  std::vector<int> slots;               // Drop: the slots; Launch/Call: the arguments
  std::vector<int64_t> ints;            // Launch: the size arguments
  std::vector<Launch> launches;
  std::vector<std::pair<int64_t, c10::ScalarType>> scratch;  // Launch: per-call workspaces
  py::object fn;                        // Call: fn(*slots, *extra) -> tuple of `outs` (or None)
  py::tuple extra;
  std::vector<int> outs;
};

struct Guard {
  c10::ScalarType dtype;
  std::vector<int64_t> sizes, strides;
  c10::Device device;
  bool scalar = false;  // a scalar input (a size symbol's value): an exact int equal to `value`
  int64_t value = 0;
};

struct Slot {
  at::Tensor t;
  py::object o;  // a non-tensor value, or a tensor whose Python object must be kept (a subclass)
};

std::vector<int64_t> ints_of(const py::handle& seq) { return seq.cast<std::vector<int64_t>>(); }

Launch parse_launch(const py::handle& spec, size_t n_buffers, size_t n_sizes) {
  // (function, grid, block, shared_memory_bytes, scratch, aligned, alignment, otherwise, on_error)
  auto t = spec.cast<py::tuple>();
  TORCH_CHECK_VALUE(t.size() == 9, "Replay: a launch is a NativeLaunch of 9 fields, got ", t.size());
  Launch l;
  l.fn = t[0].cast<uintptr_t>();
  auto grid = ints_of(t[1]), block = ints_of(t[2]);
  l.host = grid.empty();
  TORCH_CHECK_VALUE(l.fn != 0, "Replay: a launch's function is 0");
  TORCH_CHECK_VALUE(grid.size() <= 3 && block.size() <= 3, "Replay: grid and block have 1 to 3 entries");
  for (int k = 0; k < 3; ++k) {
    l.config.grid[k] = k < (int)grid.size() ? static_cast<uint32_t>(grid[k]) : 1;
    l.config.block[k] = k < (int)block.size() ? static_cast<uint32_t>(block[k]) : 1;
  }
  l.config.shared_memory_bytes = t[3].cast<uint32_t>();
  for (auto s : ints_of(t[4])) l.scratch.push_back(static_cast<int>(s));
  for (auto a : ints_of(t[5])) {
    TORCH_CHECK_VALUE(a >= 0 && a < (int64_t)n_buffers, "Replay: aligned position ", a, " is no buffer");
    l.aligned.push_back(static_cast<int>(a));
  }
  l.alignment = t[6].cast<int64_t>();
  if (!t[7].is_none()) l.otherwise = std::make_shared<Launch>(parse_launch(t[7], n_buffers, n_sizes));
  l.on_error = py::reinterpret_borrow<py::object>(t[8]);
  return l;
}

class Replay {
 public:
  // guards: per input (dtype, sizes, strides, device), or ("int", value) for a scalar input (a size
  // symbol's value the call was written for); ops: tuples (see parse); outputs: per
  // output a slot index or ("value", object); form: 0 list, 1 tuple, 2 the single output.
  Replay(const py::list& guards, int n_slots, const py::list& ops, const py::list& outputs, int form,
         const py::tuple& exact_types, c10::Device device)
      : n_slots_(n_slots), form_(form), device_(device) {
    for (const auto& g : guards) {
      auto t = g.cast<py::tuple>();
      if (py::isinstance<py::str>(t[0])) {  // ("int", value)
        TORCH_CHECK_VALUE(t[0].cast<std::string>() == "int", "Replay: a scalar guard is (\"int\", value)");
        guards_.push_back({c10::ScalarType::Long, {}, {}, c10::Device(c10::DeviceType::CPU), true,
                           t[1].cast<int64_t>()});
        continue;
      }
      guards_.push_back({t[0].cast<c10::ScalarType>(), ints_of(t[1]), ints_of(t[2]), t[3].cast<c10::Device>()});
    }
    for (const auto& type : exact_types) types_.push_back(type.ptr());
    for (const auto& o : ops) ops_.push_back(parse(o.cast<py::tuple>()));
    for (const auto& o : outputs) {
      if (py::isinstance<py::int_>(o)) {
        outputs_.push_back({check_slot(o.cast<int>()), py::object()});
      } else {
        outputs_.push_back({-1, py::reinterpret_borrow<py::object>(o.cast<py::tuple>()[1])});
      }
    }
    TORCH_CHECK_VALUE(form_ != 2 || outputs_.size() == 1, "Replay: form 2 returns one output");
  }

  // The program's outputs, or None where an input does not pass the guard.
  py::object call(const py::args& args) {
    if (args.size() != guards_.size()) return py::none();
    std::vector<Slot> slots(n_slots_);
    for (size_t i = 0; i < guards_.size(); ++i)
      if (!take(args[i].ptr(), i, slots)) return py::none();
    return run_all(slots);
  }

  // AOTAutograd's boxed convention: the inputs in `box`, which the call owns. Past the guard the
  // list is cleared, so the table's drops of inputs (at their last use) free them there; None
  // (the list untouched) where an input does not pass the guard.
  py::object call_boxed(const py::list& box) {
    if (box.size() != guards_.size()) return py::none();
    std::vector<Slot> slots(n_slots_);
    for (size_t i = 0; i < guards_.size(); ++i)
      if (!take(PyList_GET_ITEM(box.ptr(), i), i, slots)) return py::none();
    if (PyList_SetSlice(box.ptr(), 0, PyList_GET_SIZE(box.ptr()), nullptr) != 0) throw py::error_already_set();
    return run_all(slots);
  }

  size_t n_ops() const { return ops_.size(); }

 private:
  // Input i into its slot where it passes its guard.
  bool take(PyObject* obj, size_t i, std::vector<Slot>& slots) const {
    if (guards_[i].scalar) {  // the written call baked this value in: any other takes the Python call
      if (!PyLong_CheckExact(obj)) return false;
      int overflow = 0;
      if (PyLong_AsLongLongAndOverflow(obj, &overflow) != guards_[i].value || overflow) return false;
      slots[i].o = py::reinterpret_borrow<py::object>(obj);
      return true;
    }
    if (!exact(obj)) return false;
    const at::Tensor& t = THPVariable_Unpack(obj);
    if (!matches(t, guards_[i])) return false;
    slots[i].t = t;
    return true;
  }

  py::object run_all(std::vector<Slot>& slots) const {
    c10::OptionalDeviceGuard guard;
    if (device_.type() != c10::DeviceType::CPU) guard.reset_device(device_);
    for (const Op& op : ops_) run(op, slots);
    return results(slots);
  }

  int check_slot(int s) const {
    TORCH_CHECK_VALUE(s >= 0 && s < n_slots_, "Replay: slot ", s, " outside 0..", n_slots_ - 1);
    return s;
  }

  std::vector<int> slots_of(const py::handle& seq) const {
    std::vector<int> out;
    for (auto s : ints_of(seq)) out.push_back(check_slot(static_cast<int>(s)));
    return out;
  }

  Op parse(const py::tuple& t) {
    auto what = t[0].cast<std::string>();
    Op op;
    if (what == "alloc") {  // ("alloc", slot, sizes, strides, dtype, device or None)
      op.kind = Kind::Alloc;
      op.slot = check_slot(t[1].cast<int>());
      op.sizes = ints_of(t[2]);
      op.strides = ints_of(t[3]);
      op.dtype = t[4].cast<c10::ScalarType>();
      if (!t[5].is_none()) op.device = t[5].cast<c10::Device>();
    } else if (what == "alias") {  // ("alias", slot, base slot, sizes, strides, offset from the base's)
      op.kind = Kind::Alias;
      op.slot = check_slot(t[1].cast<int>());
      op.src = check_slot(t[2].cast<int>());
      op.sizes = ints_of(t[3]);
      op.strides = ints_of(t[4]);
      op.offset = t[5].cast<int64_t>();
    } else if (what == "move") {  // ("move", slot, from slot)
      op.kind = Kind::Move;
      op.slot = check_slot(t[1].cast<int>());
      op.src = check_slot(t[2].cast<int>());
    } else if (what == "drop") {  // ("drop", slots)
      op.kind = Kind::Drop;
      op.slots = slots_of(t[1]);
    } else if (what == "launch") {  // ("launch", buffer slots, sizes, launches, scratch, the kernel)
      op.kind = Kind::Launch;
      op.fn = py::reinterpret_borrow<py::object>(t[5]);  // keeps its module or library loaded
      op.slots = slots_of(t[1]);
      op.ints = ints_of(t[2]);
      for (const auto& l : t[3]) op.launches.push_back(parse_launch(l, op.slots.size(), op.ints.size()));
      for (const auto& s : t[4]) {
        auto pair = s.cast<py::tuple>();
        op.scratch.emplace_back(pair[0].cast<int64_t>(), pair[1].cast<c10::ScalarType>());
      }
      for (const auto& l : op.launches)
        for (const Launch* v = &l; v; v = v->otherwise.get())
          for (int s : v->scratch)
            TORCH_CHECK_VALUE(s >= 0 && s < (int)op.scratch.size(), "Replay: scratch ", s, " not declared");
    } else if (what == "call") {  // ("call", fn, argument slots, extra arguments, result slots)
      op.kind = Kind::Call;
      op.fn = py::reinterpret_borrow<py::object>(t[1]);
      op.slots = slots_of(t[2]);
      op.extra = t[3].cast<py::tuple>();
      op.outs = slots_of(t[4]);
    } else {
      TORCH_CHECK_VALUE(false, "Replay: unknown operation ", what);
    }
    return op;
  }

  bool exact(PyObject* obj) const {
    for (PyObject* type : types_)
      if (reinterpret_cast<PyObject*>(Py_TYPE(obj)) == type) return true;
    return false;
  }

  static bool matches(const at::Tensor& t, const Guard& g) {
    if (t.scalar_type() != g.dtype || t.device() != g.device) return false;
    auto sizes = t.sizes();
    if (sizes.size() != g.sizes.size()) return false;
    auto strides = t.strides();
    for (size_t d = 0; d < sizes.size(); ++d) {
      if (sizes[d] != g.sizes[d]) return false;
      if (sizes[d] > 1 && strides[d] != g.strides[d]) return false;
    }
    return true;
  }

  // On the device the guard made current (the device layer's allocator serves the current device).
  at::Tensor allocate(c10::IntArrayRef sizes, c10::IntArrayRef strides, c10::ScalarType dtype,
                      c10::Device where) const {
    if (where.type() == c10::DeviceType::CPU) return at::detail::empty_strided_cpu(sizes, strides, dtype);
    if (where.type() == c10::DeviceType::PrivateUse1 && where == device_)
      return at::detail::empty_strided_generic(sizes, strides, device_allocator(),
                                               c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), dtype);
    return at::empty_strided(sizes, strides, at::TensorOptions().dtype(dtype).device(where));
  }

  // Inductor's reinterpret_tensor: a tensor on the base's storage, the offset counted from the base's.
  static at::Tensor alias(const at::Tensor& base, const Op& op) {
    at::Tensor v = at::detail::make_tensor<c10::TensorImpl>(c10::Storage(base.storage()), base.key_set(),
                                                             base.dtype());
    auto* impl = v.unsafeGetTensorImpl();
    impl->set_storage_offset(base.storage_offset() + op.offset);
    impl->set_sizes_and_strides(op.sizes, op.strides);
    return v;
  }

  static py::object wrap(const Slot& s) {
    if (s.o) return s.o;
    if (!s.t.defined()) return py::none();
    return py::reinterpret_steal<py::object>(THPVariable_Wrap(s.t));
  }

  void store(Slot& s, py::handle value) const {
    s = Slot{};
    if (THPVariable_Check(value.ptr())) {
      s.t = THPVariable_Unpack(value.ptr());
      if (!exact(value.ptr())) s.o = py::reinterpret_borrow<py::object>(value);
    } else {
      s.o = py::reinterpret_borrow<py::object>(value);
    }
  }

  void launch(const Op& op, std::vector<Slot>& slots) const {
    const size_t nb = op.slots.size(), ni = op.ints.size();
    std::vector<at::Tensor> scratch;
    for (const auto& [numel, dtype] : op.scratch)
      scratch.push_back(allocate({numel}, {1}, dtype, device_));
    std::vector<int64_t> block(nb + ni + scratch.size());
    for (size_t i = 0; i < nb; ++i) {
      const at::Tensor& t = slots[op.slots[i]].t;
      TORCH_CHECK(t.defined(), "Replay: a kernel's buffer in slot ", op.slots[i], " is not a tensor");
      block[i] = reinterpret_cast<int64_t>(t.data_ptr());
    }
    std::copy(op.ints.begin(), op.ints.end(), block.begin() + nb);
    for (const Launch& first : op.launches) {
      const Launch* l = &first;
      while (l->otherwise && !aligned(*l, block)) l = l->otherwise.get();
      size_t used = nb + ni;
      for (int s : l->scratch) block[used++] = reinterpret_cast<int64_t>(scratch[s].data_ptr());
      if (l->host) {
        int32_t status = reinterpret_cast<host_kernel>(l->fn)(nullptr, block.data());
        if (status != 0) {
          if (l->on_error && !l->on_error.is_none()) l->on_error(status);
          TORCH_CHECK(false, "Replay: a host kernel failed with status ", status);
        }
        continue;
      }
      if (device_.type() == c10::DeviceType::CUDA) {
        launch_cuda(*l, block.data(), 8 * used);
        continue;
      }
      std::vector<uint32_t> offsets;
      for (size_t i = 0; i < nb; ++i) offsets.push_back(static_cast<uint32_t>(8 * i));
      for (size_t i = nb + ni; i < used; ++i) offsets.push_back(static_cast<uint32_t>(8 * i));
      tv_launch_config config = l->config;
      config.pointer_offsets = offsets.data();
      config.num_pointer_offsets = static_cast<uint32_t>(offsets.size());
      tv_stream stream = native_stream(current_stream(device_.index()));
      py::gil_scoped_release no_gil;  // as torchvendor.sdk.launch: a runtime's launch may block
      TV_CALL(launch, reinterpret_cast<tv_function>(l->fn), static_cast<const tv_launch_config*>(&config),
              static_cast<const void*>(block.data()), 8 * used, stream);
    }
  }

  void launch_cuda(const Launch& l, int64_t* block, size_t bytes) const {
    void* stream = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(device_).native_handle();
    void* extra[] = {reinterpret_cast<void*>(1), block, reinterpret_cast<void*>(2), &bytes, nullptr};
    const auto& c = l.config;
    int rc = cuda_launch_kernel()(reinterpret_cast<void*>(l.fn), c.grid[0], c.grid[1], c.grid[2], c.block[0],
                                  c.block[1], c.block[2], c.shared_memory_bytes, stream, nullptr, extra);
    TORCH_CHECK(rc == 0, "Replay: cuLaunchKernel failed with CUresult ", rc);
  }

  static bool aligned(const Launch& l, const std::vector<int64_t>& block) {
    for (int a : l.aligned)
      if (l.alignment > 0 && block[a] % l.alignment != 0) return false;
    return true;
  }

  void call_python(const Op& op, std::vector<Slot>& slots) const {
    py::tuple args(op.slots.size() + op.extra.size());
    size_t k = 0;
    for (int s : op.slots) args[k++] = wrap(slots[s]);
    for (const auto& e : op.extra) args[k++] = e;
    py::object result = op.fn(*args);
    if (op.outs.empty()) return;
    auto values = result.cast<py::tuple>();
    TORCH_CHECK(values.size() == op.outs.size(), "Replay: a call returned ", values.size(), " values, expected ",
                op.outs.size());
    for (size_t i = 0; i < op.outs.size(); ++i) store(slots[op.outs[i]], values[i]);
  }

  void run(const Op& op, std::vector<Slot>& slots) const {
    switch (op.kind) {
      case Kind::Alloc:
        slots[op.slot] = Slot{allocate(op.sizes, op.strides, op.dtype, op.device.value_or(device_)), py::object()};
        break;
      case Kind::Alias: {
        const at::Tensor& base = slots[op.src].t;
        TORCH_CHECK(base.defined(), "Replay: a view's base in slot ", op.src, " is not a tensor");
        slots[op.slot] = Slot{alias(base, op), py::object()};
        break;
      }
      case Kind::Move:
        slots[op.slot] = std::move(slots[op.src]);
        slots[op.src] = Slot{};
        break;
      case Kind::Drop:
        for (int s : op.slots) slots[s] = Slot{};
        break;
      case Kind::Launch:
        launch(op, slots);
        break;
      case Kind::Call:
        call_python(op, slots);
        break;
    }
  }

  py::object results(std::vector<Slot>& slots) const {
    if (form_ == 2) return outputs_[0].first >= 0 ? wrap(slots[outputs_[0].first]) : outputs_[0].second;
    py::list out(outputs_.size());
    for (size_t i = 0; i < outputs_.size(); ++i)
      out[i] = outputs_[i].first >= 0 ? wrap(slots[outputs_[i].first]) : outputs_[i].second;
    if (form_ == 1) return py::tuple(out);
    return std::move(out);
  }

  int n_slots_;
  int form_;
  c10::Device device_;
  std::vector<Guard> guards_;
  std::vector<PyObject*> types_;  // borrowed: the Tensor and Parameter types live as long as torch
  std::vector<Op> ops_;
  std::vector<std::pair<int, py::object>> outputs_;
};

// The guard of a partition's CUDA graph (reference_backends/cuda/graphs.py, GraphedProgram): per
// input position None (not checked), ("tensor", dtype, sizes, strides, device, address or -1: its
// data pointer must stay there) or ("value", object): equal to it, of its type. One C++ pass
// instead of the Python layout key and ~50 data_ptr() calls per replay.
class InputGuard {
 public:
  explicit InputGuard(const py::list& specs) {
    for (const auto& s : specs) {
      Spec spec;
      if (!s.is_none()) {
        auto t = s.cast<py::tuple>();
        auto what = t[0].cast<std::string>();
        if (what == "tensor") {
          spec.kind = 1;
          spec.dtype = t[1].cast<c10::ScalarType>();
          spec.sizes = ints_of(t[2]);
          spec.strides = ints_of(t[3]);
          spec.device = t[4].cast<c10::Device>();
          spec.address = t[5].cast<int64_t>();
          TORCH_CHECK_VALUE(spec.sizes.size() == spec.strides.size(), "InputGuard: sizes and strides differ in length");
        } else {
          TORCH_CHECK_VALUE(what == "value", "InputGuard: a spec is None, (\"tensor\", ...) or (\"value\", object)");
          spec.kind = 2;
          spec.value = py::reinterpret_borrow<py::object>(t[1]);
        }
      }
      specs_.push_back(std::move(spec));
    }
  }

  bool operator()(const py::tuple& args) const {
    if (args.size() != specs_.size()) return false;
    for (size_t i = 0; i < specs_.size(); ++i) {
      const Spec& s = specs_[i];
      PyObject* obj = PyTuple_GET_ITEM(args.ptr(), i);
      if (s.kind == 1) {
        if (!THPVariable_Check(obj)) return false;
        const at::Tensor& t = THPVariable_Unpack(obj);
        if (t.scalar_type() != s.dtype || t.device() != s.device || t.dim() != (int64_t)s.sizes.size()) return false;
        auto sizes = t.sizes();
        auto strides = t.strides();
        for (size_t d = 0; d < s.sizes.size(); ++d)
          if (sizes[d] != s.sizes[d] || (sizes[d] > 1 && strides[d] != s.strides[d])) return false;
        if (s.address >= 0 && reinterpret_cast<int64_t>(t.data_ptr()) != s.address) return false;
      } else if (s.kind == 2) {
        if (Py_TYPE(obj) != Py_TYPE(s.value.ptr())) return false;
        int same = PyObject_RichCompareBool(obj, s.value.ptr(), Py_EQ);
        if (same < 0) throw py::error_already_set();
        if (!same) return false;
      }
    }
    return true;
  }

 private:
  struct Spec {
    int kind = 0;  // 0 unchecked, 1 tensor, 2 value
    c10::ScalarType dtype = c10::ScalarType::Float;
    std::vector<int64_t> sizes, strides;
    c10::Device device{c10::DeviceType::CPU};
    int64_t address = -1;
    py::object value;
  };
  std::vector<Spec> specs_;
};

}  // namespace

void bind_replay(py::module_& m) {
  py::class_<InputGuard>(m, "InputGuard")
      .def(py::init<const py::list&>(), py::arg("specs"))
      .def("__call__", &InputGuard::operator());
  py::class_<Replay>(m, "Replay")
      .def(py::init<const py::list&, int, const py::list&, const py::list&, int, const py::tuple&, c10::Device>(),
           py::arg("guards"), py::arg("n_slots"), py::arg("ops"), py::arg("outputs"), py::arg("form"),
           py::arg("exact_types"), py::arg("device"))
      .def("__call__", &Replay::call)
      .def("boxed", &Replay::call_boxed)
      .def_property_readonly("n_ops", &Replay::n_ops);
}

}  // namespace torchvendor
