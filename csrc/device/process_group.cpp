// The c10d backend that a `tvgloo` process group (sdk/device/distributed.py, a Python ProcessGroup)
// registers for the device type, and the group's native collectives without Python.
//
// Why the backend exists: c10d reaches a Python process group two ways. Methods that
// PyProcessGroup (torch's pybind trampoline) overrides call the Python method; every other
// ProcessGroup method (_allgather_base, _reduce_scatter_base, reduce, gather, ... and, on older
// torch, more) goes through the c10d dispatcher to the C++ backend registered for the tensors'
// device type. Functional collectives (DTensor, FSDP2) call such methods from C++. With gloo
// registered there, gloo received device pointers and crashed; this backend instead hands each
// call back to the group's Python method of the same name, so every collective on device tensors
// runs on the group's native or staged path, or raises the group's own error.
//
// Why the fast path: a collective through the Python group cost a fixed ~10 us more per call than
// torch's NCCL group (Python argument checks, closures, a torch.Event and a Python Work per call,
// torch.compiler.disable's wrapper): 0.67-0.79x NCCL's bus bandwidth from 4 KiB to 4 MiB on two
// H200. all_reduce, broadcast, all_gather_single, reduce_scatter_single and their coalesced forms
// now run here when every tensor is contiguous, on the communicator's device and of a runtime
// dtype: one runtime entry per tensor on the current stream, counted, and a Work whose wait() is a
// stream-ordered event wait (native_work.cpp). The group's instance carries these methods
// (attach_device_backend sets them), so `group.allreduce(...)` from Python and c10d's C++ callers
// (through the trampoline, or the dispatcher for the methods it does not override) reach them
// without a Python frame. Everything else, including the first call (which joins the
// communicator), runs the group's Python method.
#include "tv_device.h"
#include "native_work.h"

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/utils/pybind.h>

#include <atomic>

namespace torchvendor {

bool tv_dtype_for(c10::ScalarType t, tv_dtype* out);  // collectives.cpp

namespace {

namespace py = pybind11;

// Drops a Python reference from C++ (c10d may destroy works and backends on any thread): it
// needs the GIL, and once the interpreter is gone the reference is leaked instead.
void release(py::object& o) {
  if (!Py_IsInitialized()) {
    (void)o.release();
    return;
  }
  py::gil_scoped_acquire gil;
  o = py::object();
}

// A Python Work (or a gloo Work handed through) plus the Python object that owns it: the Work
// a Python method returns lives only as long as its Python object, which c10d does not hold.
class HeldWork : public c10d::Work {
 public:
  explicit HeldWork(py::object work)
      : work_(work.cast<c10::intrusive_ptr<c10d::Work>>()), owner_(std::move(work)) {}

  ~HeldWork() override { release(owner_); }

  bool wait(std::chrono::milliseconds timeout) override { return work_->wait(timeout); }
  bool isCompleted() override { return work_->isCompleted(); }
  bool isSuccess() const override { return work_->isSuccess(); }
  std::vector<at::Tensor> result() override { return work_->result(); }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return work_->getFuture(); }
  void synchronize() override { work_->synchronize(); }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  py::object owner_;
};

// tv_reduce_op for a c10d reduce op the runtime takes, or -1 (the Python group names the others).
int tv_reduce(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM: return TV_REDUCE_SUM;
    case c10d::ReduceOp::AVG: return TV_REDUCE_AVG;
    case c10d::ReduceOp::PRODUCT: return TV_REDUCE_PROD;
    case c10d::ReduceOp::MIN: return TV_REDUCE_MIN;
    case c10d::ReduceOp::MAX: return TV_REDUCE_MAX;
    default: return -1;
  }
}

// The runtime entries of one native collective on one stream; `issued` says how many ran.
struct Enqueue {
  tv_comm comm;
  tv_stream stream;
  int issued = 0;

  static tv_dtype dtype(const at::Tensor& t) {
    tv_dtype d = TV_FLOAT32;
    tv_dtype_for(t.scalar_type(), &d);  // checked by DeviceBackend::takes
    return d;
  }
  void all_reduce(const at::Tensor& t, int op) {
    TV_CALL(all_reduce, t.const_data_ptr(), t.mutable_data_ptr(), static_cast<size_t>(t.numel()),
            dtype(t), static_cast<tv_reduce_op>(op), comm, stream);
    ++issued;
  }
  void broadcast(const at::Tensor& t, int root) {
    TV_CALL(broadcast, t.const_data_ptr(), t.mutable_data_ptr(), static_cast<size_t>(t.numel()),
            dtype(t), static_cast<int32_t>(root), comm, stream);
    ++issued;
  }
  void all_gather(const at::Tensor& out, const at::Tensor& in) {
    TV_CALL(all_gather, in.const_data_ptr(), out.mutable_data_ptr(), static_cast<size_t>(in.numel()),
            dtype(in), comm, stream);
    ++issued;
  }
  void reduce_scatter(const at::Tensor& out, const at::Tensor& in, int op) {
    TV_CALL(reduce_scatter, in.const_data_ptr(), out.mutable_data_ptr(),
            static_cast<size_t>(out.numel()), dtype(in), static_cast<tv_reduce_op>(op), comm, stream);
    ++issued;
  }
};

class DeviceBackend : public c10d::Backend {
 public:
  DeviceBackend(const py::object& group, std::string name, int rank, int size)
      : Backend(rank, size), group_(py::weakref(group)), name_(std::move(name)) {}

  ~DeviceBackend() override { release(group_); }

  const std::string getBackendName() const override { return name_; }

  // What the Python group decided: whether collectives run natively, on which communicator
  // (0: not joined yet) of which device.
  void set_native(bool on, uintptr_t comm, c10::DeviceIndex device) {
    device_.store(device);
    comm_.store(comm);
    native_.store(on);
  }

  // ---- the fast path: nullptr where it declines (the caller then runs the Python method) ------

  c10::intrusive_ptr<c10d::Work> native_allreduce(std::vector<at::Tensor>& t, const c10d::AllreduceOptions& o,
                                                  NativeCollective which) {
    const int op = tv_reduce(o.reduceOp.op_);
    if (op < 0 || o.sparseIndices.has_value()) return {};
    return run({&t}, op == TV_REDUCE_AVG, t, which, o.reduceOp.op_, [&](Enqueue& e) {
      for (const at::Tensor& x : t) e.all_reduce(x, op);
    });
  }
  c10::intrusive_ptr<c10d::Work> native_broadcast(std::vector<at::Tensor>& t, const c10d::BroadcastOptions& o) {
    return run({&t}, false, t, NativeCollective::broadcast, -1, [&](Enqueue& e) {
      for (const at::Tensor& x : t) e.broadcast(x, static_cast<int>(o.rootRank));
    });
  }
  c10::intrusive_ptr<c10d::Work> native_all_gather(std::vector<at::Tensor>& out, std::vector<at::Tensor>& in,
                                                   NativeCollective which) {
    if (!pairs(out, in, "all_gather", true)) return {};
    return run({&out, &in}, false, out, which, -1, [&](Enqueue& e) {
      for (size_t i = 0; i < out.size(); ++i) e.all_gather(out[i], in[i]);
    });
  }
  c10::intrusive_ptr<c10d::Work> native_reduce_scatter(std::vector<at::Tensor>& out, std::vector<at::Tensor>& in,
                                                       const c10d::ReduceScatterOptions& o, NativeCollective which) {
    const int op = tv_reduce(o.reduceOp.op_);
    if (op < 0 || !pairs(out, in, "reduce_scatter", false)) return {};
    return run({&out, &in}, op == TV_REDUCE_AVG, out, which, o.reduceOp.op_, [&](Enqueue& e) {
      for (size_t i = 0; i < out.size(); ++i) e.reduce_scatter(out[i], in[i], op);
    });
  }

  // ---- c10d's dispatcher: the fast path, else the Python method ------------------------------

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& t,
                                           const c10d::BroadcastOptions& o) override {
    if (auto w = native_broadcast(t, o)) return w;
    return forward("broadcast", t, o);
  }
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& t,
                                           const c10d::AllreduceOptions& o) override {
    if (auto w = native_allreduce(t, o, NativeCollective::all_reduce)) return w;
    return forward("allreduce", t, o);
  }
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& t, const c10d::AllreduceCoalescedOptions& o) override {
    if (auto w = native_allreduce(t, o, NativeCollective::all_reduce_coalesced)) return w;
    return forward("allreduce_coalesced", t, o);
  }
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& t,
                                        const c10d::ReduceOptions& o) override {
    return forward("reduce", t, o);
  }
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& out,
                                           std::vector<at::Tensor>& in,
                                           const c10d::AllgatherOptions& o) override {
    return forward("allgather", out, in, o);
  }
  // The older names: every torch from 2.11 on has them, and 2.14's new names forward to them.
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& out, at::Tensor& in,
                                                 const c10d::AllgatherOptions& o) override {
    std::vector<at::Tensor> outs{out}, ins{in};
    if (auto w = native_all_gather(outs, ins, NativeCollective::all_gather_single)) return w;
    return forward("all_gather_single", out, in, o);
  }
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& out,
                                                     std::vector<at::Tensor>& in,
                                                     const c10d::AllgatherOptions& o) override {
    return forward("allgather_coalesced", out, in, o);
  }
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& out, std::vector<at::Tensor>& in,
      const c10d::AllgatherOptions& o) override {
    if (auto w = native_all_gather(out, in, NativeCollective::all_gather_single_coalesced)) return w;
    return forward("all_gather_single_coalesced", out, in, o);
  }
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& out,
                                        std::vector<at::Tensor>& in,
                                        const c10d::GatherOptions& o) override {
    return forward("gather", out, in, o);
  }
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& out,
                                         std::vector<std::vector<at::Tensor>>& in,
                                         const c10d::ScatterOptions& o) override {
    return forward("scatter", out, in, o);
  }
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& out,
                                                std::vector<std::vector<at::Tensor>>& in,
                                                const c10d::ReduceScatterOptions& o) override {
    return forward("reduce_scatter", out, in, o);
  }
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& out, at::Tensor& in, const c10d::ReduceScatterOptions& o) override {
    std::vector<at::Tensor> outs{out}, ins{in};
    if (auto w = native_reduce_scatter(outs, ins, o, NativeCollective::reduce_scatter_single)) return w;
    return forward("reduce_scatter_single", out, in, o);
  }
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& out, std::vector<at::Tensor>& in,
      const c10d::ReduceScatterOptions& o) override {
    if (auto w = native_reduce_scatter(out, in, o, NativeCollective::reduce_scatter_single_coalesced)) return w;
    return forward("reduce_scatter_single_coalesced", out, in, o);
  }
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& out, at::Tensor& in,
                                               std::vector<int64_t>& out_splits,
                                               std::vector<int64_t>& in_splits,
                                               const c10d::AllToAllOptions& o) override {
    return forward("all_to_all_single", out, in, out_splits, in_splits, o);
  }
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& out,
                                          std::vector<at::Tensor>& in,
                                          const c10d::AllToAllOptions& o) override {
    return forward("alltoall", out, in, o);
  }
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& t, int dst, int tag) override {
    return forward("send", t, dst, tag);
  }
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& t, int src, int tag) override {
    return forward("recv", t, src, tag);
  }
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& t, int tag) override {
    return forward("recv_anysource", t, tag);
  }
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& o) override {
    return forward("barrier", o);
  }

  // The group's Python method `method` as its class defines it (the instance's attribute of that
  // name may be this backend's fast path); GIL held. Raises if the group was destroyed.
  py::object python_method(const char* method) {
    py::object group = group_();
    TORCH_CHECK(!group.is_none(), name_, " ", method, ": the process group this backend belongs "
                "to was destroyed; create a new group with dist.new_group().");
    py::object bound = py::reinterpret_steal<py::object>(
        PyMethod_New(py::type::of(group).attr(method).ptr(), group.ptr()));
    if (!bound) throw py::error_already_set();
    return bound;
  }

 private:
  // Whether `t` is what the runtime's entries take from this group: a dense tensor of the
  // communicator's device, of a runtime dtype (floating for AVG, which truncates integers).
  bool takes(const at::Tensor& t, bool avg, c10::DeviceIndex device) const {
    tv_dtype d;
    return t.defined() && t.layout() == c10::kStrided && t.device().type() == c10::DeviceType::PrivateUse1 &&
           t.device().index() == device && t.is_contiguous() && tv_dtype_for(t.scalar_type(), &d) &&
           (!avg || c10::isFloatingType(t.scalar_type()));
  }

  // Pairs of (output, input) of all_gather (output = size() inputs) or reduce_scatter (input =
  // size() outputs); a mismatch is the caller's error, raised here before the runtime writes.
  bool pairs(const std::vector<at::Tensor>& out, const std::vector<at::Tensor>& in, const char* op,
             bool gather) const {
    if (out.size() != in.size() || out.empty()) return false;
    for (size_t i = 0; i < out.size(); ++i) {
      const at::Tensor& small = gather ? in[i] : out[i];
      const at::Tensor& big = gather ? out[i] : in[i];
      if (!small.defined() || !big.defined()) return false;
      TORCH_CHECK_VALUE(big.numel() == small.numel() * getSize() && big.scalar_type() == small.scalar_type(),
                        name_, " ", op, ": the ", gather ? "output" : "input", " must hold ", getSize(),
                        " times the ", gather ? "input" : "output", "'s elements of the same dtype; got ",
                        big.numel(), " ", big.scalar_type(), " and ", small.numel(), " ", small.scalar_type());
    }
    return true;
  }

  // Runs `enqueue` on the current stream when the group is native and every tensor is taken;
  // nullptr otherwise, or when the runtime refuses the first entry (TV_ERROR_NOT_SUPPORTED: the
  // Python group then stages the collective, as its own native path does).
  template <typename F>
  c10::intrusive_ptr<c10d::Work> run(std::initializer_list<const std::vector<at::Tensor>*> lists, bool avg,
                                     const std::vector<at::Tensor>& outputs, NativeCollective which,
                                     int op, F&& enqueue) {
    const uintptr_t comm = comm_.load(std::memory_order_acquire);
    if (!native_.load(std::memory_order_acquire) || comm == 0) return {};
    const c10::DeviceIndex device = device_.load(std::memory_order_relaxed);
    bool any = false;
    for (const auto* list : lists) {
      for (const at::Tensor& t : *list) {
        if (!takes(t, avg, device)) return {};
        any = true;
      }
    }
    if (!any) return {};
    const c10::Stream stream = current_stream(device);
    Enqueue e{reinterpret_cast<tv_comm>(comm), native_stream(stream)};
    try {
      enqueue(e);
    } catch (const c10::NotImplementedError&) {
      if (e.issued) throw;
      return {};
    }
    count_native(which, op);
    return make_native_work(outputs, stream);
  }

  // Calls the group's Python method `method`; a Python exception propagates as itself (its type
  // and message reach the Python caller of the functional collective unchanged).
  template <typename... Args>
  c10::intrusive_ptr<c10d::Work> forward(const char* method, Args&&... args) {
    py::gil_scoped_acquire gil;
    py::object work = python_method(method)(std::forward<Args>(args)...);
    TORCH_CHECK(!work.is_none(), name_, " ", method, " returned None instead of a dist.Work");
    return c10::make_intrusive<HeldWork>(std::move(work));
  }

  py::weakref group_;  // the Python group owns this backend: a strong reference would be a cycle
  std::string name_;
  std::atomic<bool> native_{false};
  std::atomic<uintptr_t> comm_{0};
  std::atomic<c10::DeviceIndex> device_{-1};
};

// ---- the group's instance methods ---------------------------------------------------------------

enum class Method : uint8_t { allreduce, allreduce_coalesced, broadcast, all_gather_single,
                              reduce_scatter_single, all_gather_single_coalesced,
                              reduce_scatter_single_coalesced };

// One collective method on the group's instance (attach_device_backend sets them under c10d's
// names): the fast path with the GIL released, else the class's Python method with the same
// arguments. A callable object, not a function: torch's trampoline takes a C++ function for "not
// overridden" and would skip it for c10d's C++ callers.
struct BoundMethod {
  c10::intrusive_ptr<DeviceBackend> backend;
  Method method;
  const char* name;  // the Python method it falls back to
};

template <typename T>
T options(const py::args& args, size_t i) {
  return args.size() > i && !args[i].is_none() ? args[i].cast<T>() : T();
}

// The fast path of `m` on Python arguments; nullptr where it declines.
c10::intrusive_ptr<c10d::Work> try_native(const BoundMethod& m, const py::args& args) {
  DeviceBackend& b = *m.backend;
  const bool one = m.method == Method::all_gather_single || m.method == Method::reduce_scatter_single;
  const size_t tensor_args = m.method == Method::allreduce || m.method == Method::allreduce_coalesced ||
                                     m.method == Method::broadcast ? 1 : 2;
  if (args.size() < tensor_args || args.size() > tensor_args + 1) return {};
  std::vector<at::Tensor> a, c;
  if (one) {
    a = {args[0].cast<at::Tensor>()};
    c = {args[1].cast<at::Tensor>()};
  } else {
    a = args[0].cast<std::vector<at::Tensor>>();
    if (tensor_args == 2) c = args[1].cast<std::vector<at::Tensor>>();
  }
  switch (m.method) {
    case Method::allreduce:
    case Method::allreduce_coalesced: {
      auto o = options<c10d::AllreduceOptions>(args, 1);
      py::gil_scoped_release no_gil;
      return b.native_allreduce(a, o, m.method == Method::allreduce ? NativeCollective::all_reduce
                                                                   : NativeCollective::all_reduce_coalesced);
    }
    case Method::broadcast: {
      auto o = options<c10d::BroadcastOptions>(args, 1);
      py::gil_scoped_release no_gil;
      return b.native_broadcast(a, o);
    }
    case Method::all_gather_single:
    case Method::all_gather_single_coalesced: {
      py::gil_scoped_release no_gil;
      return b.native_all_gather(a, c, one ? NativeCollective::all_gather_single
                                           : NativeCollective::all_gather_single_coalesced);
    }
    default: {
      auto o = options<c10d::ReduceScatterOptions>(args, 2);
      py::gil_scoped_release no_gil;
      return b.native_reduce_scatter(a, c, o, one ? NativeCollective::reduce_scatter_single
                                                  : NativeCollective::reduce_scatter_single_coalesced);
    }
  }
}

py::object call_bound(const BoundMethod& m, const py::args& args, const py::kwargs& kwargs) {
  if (kwargs.empty()) {
    c10::intrusive_ptr<c10d::Work> work;
    try {
      work = try_native(m, args);
    } catch (const py::cast_error&) {  // not tensors or options: the Python method says what is wrong
    }
    if (work) return py::cast(work);
  }
  return m.backend->python_method(m.name)(*args, **kwargs);
}

}  // namespace

void attach_device_backend(const py::object& group, const std::string& name) {
  auto& pg = group.cast<c10d::ProcessGroup&>();
  auto backend = c10::make_intrusive<DeviceBackend>(group, name, pg.getRank(), pg.getSize());
  pg.setBackend(c10::DeviceType::PrivateUse1, c10d::ProcessGroup::BackendType::CUSTOM,
                c10::intrusive_ptr<c10d::Backend>(backend));
  // c10d's names, old and new, of the collectives with a fast path, and the Python method each
  // falls back to
  static const std::pair<const char*, std::pair<Method, const char*>> methods[] = {
      {"allreduce", {Method::allreduce, "allreduce"}},
      {"allreduce_coalesced", {Method::allreduce_coalesced, "allreduce_coalesced"}},
      {"broadcast", {Method::broadcast, "broadcast"}},
      {"all_gather_single", {Method::all_gather_single, "all_gather_single"}},
      {"_allgather_base", {Method::all_gather_single, "all_gather_single"}},
      {"reduce_scatter_single", {Method::reduce_scatter_single, "reduce_scatter_single"}},
      {"_reduce_scatter_base", {Method::reduce_scatter_single, "reduce_scatter_single"}},
      {"all_gather_single_coalesced", {Method::all_gather_single_coalesced, "all_gather_single_coalesced"}},
      {"allgather_into_tensor_coalesced", {Method::all_gather_single_coalesced, "all_gather_single_coalesced"}},
      {"reduce_scatter_single_coalesced",
       {Method::reduce_scatter_single_coalesced, "reduce_scatter_single_coalesced"}},
      {"reduce_scatter_tensor_coalesced",
       {Method::reduce_scatter_single_coalesced, "reduce_scatter_single_coalesced"}},
  };
  for (const auto& [attr, target] : methods)
    py::setattr(group, attr, py::cast(BoundMethod{backend, target.first, target.second}));
}

// The fast path's switch and counts (sdk/device/distributed.py: the group's native property and
// communicator, collective_counts()).
void bind_process_group(py::module_& m) {
  py::class_<BoundMethod>(m, "NativeCollectiveMethod",
                          "A collective method of a tvgloo group's instance: native in C++ when it can, "
                          "else the group's Python method")
      .def("__call__", &call_bound);
  m.def("set_native_collectives", [](const py::object& group, bool on, uintptr_t comm, int64_t device) {
    auto backend = group.cast<c10d::ProcessGroup&>().getBackend(c10::DeviceType::PrivateUse1);
    auto* ours = dynamic_cast<DeviceBackend*>(backend.get());
    TORCH_CHECK(ours != nullptr, "set_native_collectives: the group's device backend is not torchvendor's");
    ours->set_native(on, comm, static_cast<c10::DeviceIndex>(device));
  }, py::arg("group"), py::arg("on"), py::arg("comm"), py::arg("device"));
  m.def("native_collective_counts", &native_collective_counts);
  m.def("reset_native_collective_counts", &reset_native_collective_counts);
}

}  // namespace torchvendor
