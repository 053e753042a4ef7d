// The c10d backend that a `tvgloo` process group (sdk/device/distributed.py, a Python ProcessGroup)
// registers for the device type. Why it exists: c10d reaches a Python process group two ways.
// Methods that PyProcessGroup (torch's pybind trampoline) overrides call the Python method; every
// other ProcessGroup method (_allgather_base, _reduce_scatter_base, reduce, gather, ... and, on
// older torch, more) goes through the c10d dispatcher to the C++ backend registered for the
// tensors' device type. Functional collectives (DTensor, FSDP2) call such methods from C++. With
// gloo registered there, gloo received device pointers and crashed; this backend instead hands
// each call back to the group's Python method of the same name, so every collective on device
// tensors runs on the group's native or staged path, or raises the group's own error.
#include "tv_device.h"

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/utils/pybind.h>

namespace torchvendor {
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

class DeviceBackend : public c10d::Backend {
 public:
  DeviceBackend(const py::object& group, std::string name, int rank, int size)
      : Backend(rank, size), group_(py::weakref(group)), name_(std::move(name)) {}

  ~DeviceBackend() override { release(group_); }

  const std::string getBackendName() const override { return name_; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& t,
                                           const c10d::BroadcastOptions& o) override {
    return forward("broadcast", t, o);
  }
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& t,
                                           const c10d::AllreduceOptions& o) override {
    return forward("allreduce", t, o);
  }
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& t, const c10d::AllreduceCoalescedOptions& o) override {
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
    return forward("reduce_scatter_single", out, in, o);
  }
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& out, std::vector<at::Tensor>& in,
      const c10d::ReduceScatterOptions& o) override {
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

 private:
  // Calls the group's Python method `method`; a Python exception propagates as itself (its type
  // and message reach the Python caller of the functional collective unchanged).
  template <typename... Args>
  c10::intrusive_ptr<c10d::Work> forward(const char* method, Args&&... args) {
    py::gil_scoped_acquire gil;
    py::object group = group_();
    TORCH_CHECK(!group.is_none(), name_, " ", method, ": the process group this backend belongs "
                "to was destroyed; create a new group with dist.new_group().");
    py::object work = group.attr(method)(std::forward<Args>(args)...);
    TORCH_CHECK(!work.is_none(), name_, " ", method, " returned None instead of a dist.Work");
    return c10::make_intrusive<HeldWork>(std::move(work));
  }

  py::weakref group_;  // the Python group owns this backend: a strong reference would be a cycle
  std::string name_;
};

}  // namespace

void attach_device_backend(const py::object& group, const std::string& name) {
  auto& pg = group.cast<c10d::ProcessGroup&>();
  auto backend = c10::make_intrusive<DeviceBackend>(group, name, pg.getRank(), pg.getSize());
  pg.setBackend(c10::DeviceType::PrivateUse1, c10d::ProcessGroup::BackendType::CUSTOM,
                c10::intrusive_ptr<c10d::Backend>(backend));
}

}  // namespace torchvendor
