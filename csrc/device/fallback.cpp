// The counted boxed CPU fallback, autocast, and install(): the one place that registers the
// device with torch (guard, hooks, allocators, kernels, fallback, autocast).
#include <Python.h>  // first, as Python asks; only for the fallback warning (warn_user)

#include "tv_device.h"
#include "priced_call.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/_copy_from_and_resize.h>
#include <ATen/ops/bernoulli.h>
#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/mse_loss.h>
#include <ATen/ops/ones_like.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/SmallVector.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace torchvendor {
namespace {

std::mutex g_count_mutex;
std::unordered_map<std::string, int64_t> g_counts;
std::atomic<bool> g_warned{false};

// "add.out" for aten operators, "myns::op.overload" for others.
std::string op_key(const c10::OperatorName& name) {
  std::string base = name.name.rfind("aten::", 0) == 0 ? name.name.substr(6) : name.name;
  return name.overload_name.empty() ? base : base + "." + name.overload_name;
}

bool is_generator_arg(const c10::Argument& arg) {
  const auto& type = arg.type();
  if (type->kind() == c10::TypeKind::GeneratorType) return true;
  if (auto opt = type->cast<c10::OptionalType>())
    return opt->getElementType()->kind() == c10::TypeKind::GeneratorType;
  return false;
}

// The device of the first PrivateUse1 tensor argument, or the current device.
c10::DeviceIndex target_device(const torch::jit::Stack& stack, size_t begin) {
  for (size_t i = begin; i < stack.size(); ++i) {
    const auto& v = stack[i];
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().is_privateuseone())
      return v.toTensor().device().index();
    if (v.isTensorList())
      for (const at::Tensor& t : v.toTensorList())
        if (t.defined() && t.is_privateuseone()) return t.device().index();
  }
  return current_device();
}

void copy_rng_state(at::CPUGeneratorImpl* to, at::CPUGeneratorImpl* from) {
  to->set_engine(from->engine());
  to->set_next_float_normal_sample(from->next_float_normal_sample());
  to->set_next_double_normal_sample(from->next_double_normal_sample());
}

// ---- the direct path ---------------------------------------------------------------------
// torch's cpu_fallback moves every tensor with Tensor.cpu() and Tensor.to(device): for a
// 16-element add that is about ten dispatcher calls (to, _to_copy, empty, copy_, _copy_from, with
// their autograd and ADInplaceOrView layers) around the one CPU kernel. The direct path does
// the same work without them when every device tensor is dense: one runtime copy per device
// input into a CPU tensor of the same strides (none for an out= argument), the CPU kernel (redispatched to the CPU key, as
// cpu_fallback does), one device allocation and runtime copy per output. Same stream ordering:
// copy_bytes waits for the device's stream before reading and copies before returning.

// Dense, strided, without conjugate/negative bits: its bytes are one span from data_ptr.
bool plain(const at::Tensor& t) {
  return t.layout() == c10::Layout::Strided && !t.is_conj() && !t.is_neg() &&
         t.is_non_overlapping_and_dense();
}

// Host memory for the direct path's CPU tensors. Small ones reuse blocks from a free list: the
// CPU allocator's posix_memalign, free and memory-reporting calls were a sixth of a 16-element
// add's fallback (perf). Larger ones come from torch's CPU allocator. Blocks are 64-byte aligned
// like the CPU allocator's, and a tensor keeps its block alive as long as it lives.
class StagingAllocator final : public c10::Allocator {
 public:
  static constexpr size_t kBlock = 4096, kKeep = 64;  // block size; free blocks kept

  c10::DataPtr allocate(size_t n) override {
    if (n > kBlock) return c10::GetCPUAllocator()->allocate(n);
    void* p = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!free_.empty()) p = free_.back(), free_.pop_back();
    }
    if (p == nullptr) p = c10::alloc_cpu(kBlock);
    return c10::DataPtr(p, p, &release, c10::Device(c10::DeviceType::CPU));
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

 private:
  static void release(void* p);
  std::mutex mutex_;
  std::vector<void*> free_;
};
StagingAllocator g_staging;

void StagingAllocator::release(void* p) {
  {
    std::lock_guard<std::mutex> lock(g_staging.mutex_);
    if (g_staging.free_.size() < kKeep) {
      g_staging.free_.push_back(p);
      return;
    }
  }
  c10::free_cpu(p);
}

// Strided, without conjugate/negative bits: its elements lie in one span of its storage from
// data_ptr on (torch's strides are never negative).
bool spanned(const at::Tensor& t) {
  return t.layout() == c10::Layout::Strided && !t.is_conj() && !t.is_neg();
}

// Elements from the first to the last one `t` addresses.
int64_t storage_span(const at::Tensor& t) {
  if (t.numel() == 0) return 0;
  int64_t last = 0;
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  return last + 1;
}

// A CPU tensor of `dev`'s sizes and strides; with its values unless `contents` is false. A
// tensor that is not dense (a slice with gaps, an expanded tensor) comes over as the span of
// storage it addresses, viewed with its strides: the CPU kernel then sees the layout the CPU
// itself would see, and some kernels choose their algorithm by layout (bfloat16/float16 batch
// norm rounds differently on a strided input than on a contiguous copy, by up to 16 ulps).
at::Tensor host_copy(const at::Tensor& dev, bool contents) {
  if (!dev.is_non_overlapping_and_dense()) {
    const int64_t span = storage_span(dev);
    at::Tensor base = at::detail::empty_strided_generic(
        {span}, {1}, &g_staging, c10::DispatchKeySet(c10::DispatchKey::CPU), dev.scalar_type());
    if (contents && span > 0)
      copy_bytes(base.mutable_data_ptr(), dev.const_data_ptr(), span * dev.element_size(),
                 TV_MEMCPY_DEVICE_TO_HOST, current_stream(dev.device().index()), false);
    return base.as_strided(dev.sizes(), dev.strides());
  }
  at::Tensor host = at::detail::empty_strided_generic(
      dev.sizes(), dev.strides(), &g_staging, c10::DispatchKeySet(c10::DispatchKey::CPU),
      dev.scalar_type());
  if (!contents) return host;
  copy_bytes(host.mutable_data_ptr(), dev.const_data_ptr(), dev.nbytes(), TV_MEMCPY_DEVICE_TO_HOST,
             current_stream(dev.device().index()), false);
  return host;
}

at::Tensor device_copy(const at::Tensor& host, c10::Device device) {
  if (!plain(host)) return host.to(device);
  c10::OptionalDeviceGuard guard;  // the allocator serves the current device
  if (current_device() != device.index()) guard.reset_device(device);
  at::Tensor dev = at::detail::empty_strided_generic(
      host.sizes(), host.strides(), device_allocator(),
      c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), host.scalar_type());
  copy_bytes(dev.mutable_data_ptr(), host.const_data_ptr(), host.nbytes(),
             TV_MEMCPY_HOST_TO_DEVICE, current_stream(device.index()), false);
  return dev;
}

// A written argument's CPU result back into its device tensor (resized like it, as
// cpu_fallback's _copy_from_and_resize does).
void write_back(const at::Tensor& host, const at::Tensor& dev) {
  if (host.sizes() == dev.sizes() && host.strides() == dev.strides() && plain(host)) {
    copy_bytes(dev.mutable_data_ptr(), host.const_data_ptr(), host.nbytes(),
               TV_MEMCPY_HOST_TO_DEVICE, current_stream(dev.device().index()), false);
    return;
  }
  at::_copy_from_and_resize(host, dev);
}

struct Moved {
  size_t index;
  at::Tensor device, host;
};

// Device tensor arguments that share one storage (the same tensor twice, or views of one
// buffer: aminmax's out=(shared, shared)) get host tensors that share one host buffer too,
// at the same relative offsets, so the CPU kernel sees the aliasing it checks (torch 2.15 raises
// "must not overlap" there) or relies on. One buffer per storage spans every such argument; all
// of its bytes travel (an out= argument may overlap a read one). Returns false, having moved
// nothing, for views of one storage with different element types (the general path takes them).
bool share_host_buffers(const c10::SmallVector<at::Tensor, 8>& devs, c10::SmallVector<at::Tensor, 8>& hosts) {
  for (size_t i = 0; i < devs.size(); ++i) {
    if (!devs[i].defined() || hosts[i].defined()) continue;
    c10::SmallVector<size_t, 4> group{i};
    for (size_t j = i + 1; j < devs.size(); ++j)
      if (devs[j].defined() && devs[j].storage().is_alias_of(devs[i].storage())) group.push_back(j);
    if (group.size() == 1) continue;
    int64_t lo = devs[i].storage_offset(), hi = lo;
    for (size_t k : group) {
      if (devs[k].scalar_type() != devs[i].scalar_type()) return false;
      lo = std::min(lo, devs[k].storage_offset());
      hi = std::max(hi, devs[k].storage_offset() + storage_span(devs[k]));
    }
    const int64_t item = devs[i].element_size();
    at::Tensor base = at::detail::empty_strided_generic(
        {hi - lo}, {1}, &g_staging, c10::DispatchKeySet(c10::DispatchKey::CPU), devs[i].scalar_type());
    if (hi > lo)
      copy_bytes(base.mutable_data_ptr(), static_cast<const char*>(devs[i].storage().data()) + lo * item,
                 (hi - lo) * item, TV_MEMCPY_DEVICE_TO_HOST, current_stream(devs[i].device().index()), false);
    for (size_t k : group)
      hosts[k] = base.as_strided(devs[k].sizes(), devs[k].strides(), devs[k].storage_offset() - lo);
  }
  return true;
}

// The direct path for an operator whose schema qualifies (OpInfo::direct). Returns false,
// having changed nothing, when this call needs cpu_fallback's general path: a device tensor
// with conjugate or negative bits or another layout, a tensor on a third device, or no device
// tensor at all.
bool direct_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& args = op.schema().arguments();
  const size_t begin = stack->size() - args.size();
  std::optional<c10::Device> target;  // outputs go where the first device tensor is
  for (size_t i = begin; i < stack->size(); ++i) {
    const c10::IValue& v = (*stack)[i];
    if (!v.isTensor() || !v.toTensor().defined() || v.toTensor().is_cpu()) continue;
    if (!v.toTensor().is_privateuseone() || !spanned(v.toTensor())) return false;
    if (!target) target = v.toTensor().device();
  }
  if (!target) return false;
  c10::SmallVector<at::Tensor, 8> devs(args.size()), hosts(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& v = (*stack)[begin + i];
    if (v.isTensor() && v.toTensor().defined() && !v.toTensor().is_cpu()) devs[i] = v.toTensor();
  }
  if (!share_host_buffers(devs, hosts)) return false;
  c10::SmallVector<Moved, 4> moved;
  c10::SmallVector<c10::IValue, 8> inputs(stack->begin() + begin, stack->end());
  for (size_t i = 0; i < args.size(); ++i) {
    c10::IValue& v = (*stack)[begin + i];
    if (!devs[i].defined()) continue;
    // An out= argument (is_out: keyword-only, written) is overwritten by the CPU kernel, never
    // read, so its old values need not travel; an in-place self (add_) does need them.
    at::Tensor host = hosts[i].defined() ? hosts[i] : host_copy(devs[i], !args[i].is_out());
    moved.push_back(Moved{i, v.toTensor(), host});
    v = c10::IValue(std::move(host));
  }
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
  for (const Moved& m : moved) {
    const c10::AliasInfo* alias = args[m.index].alias_info();
    if (alias && alias->isWrite()) write_back(m.host, m.device);
  }
  const auto& returns = op.schema().returns();
  const size_t rbegin = stack->size() - returns.size();
  for (size_t r = 0; r < returns.size(); ++r) {
    c10::IValue& v = (*stack)[rbegin + r];
    if (const c10::AliasInfo* alias = returns[r].alias_info()) {
      // A written argument returned (add_, add.out): the caller's tensor, as cpu_fallback does.
      bool found = false;
      for (size_t i = 0; i < args.size() && !found; ++i) {
        const c10::AliasInfo* in = args[i].alias_info();
        if (in && (in == alias || *in == *alias) && inputs[i].isTensor()) {
          v = inputs[i];
          found = true;
        }
      }
      TORCH_CHECK(found, "The operator ", op.schema().operator_name(), " appears to have invalid "
                  "alias information: no argument matches its return ", returns[r]);
      continue;
    }
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().is_cpu())
      v = c10::IValue(device_copy(v.toTensor(), *target));
  }
  return true;
}

// cpu_fallback sends outputs to the device of the first tensor argument. When that one is a
// CPU tensor (a 0-dim scalar, e.g. torch.where(cpu_cond, x, y)) but device tensors take part,
// the outputs belong on the device, as CUDA does: move fresh CPU outputs there.
void run_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack, bool direct) {
  if (direct && direct_fallback(op, stack)) return;
  const size_t num_args = op.schema().arguments().size();
  const size_t begin = stack->size() - num_args;
  std::optional<c10::Device> first, device;
  for (size_t i = begin; i < stack->size(); ++i) {
    const auto& v = (*stack)[i];
    if (v.isDevice()) return at::native::cpu_fallback(op, stack);  // explicit target
    if (v.isTensor() && v.toTensor().defined()) {
      if (!first) first = v.toTensor().device();
      if (!device && v.toTensor().is_privateuseone()) device = v.toTensor().device();
    }
  }
  at::native::cpu_fallback(op, stack);
  if (!first || !device || first->type() == c10::DeviceType::PrivateUse1) return;
  const auto& returns = op.schema().returns();
  const size_t rbegin = stack->size() - returns.size();
  for (size_t i = 0; i < returns.size(); ++i) {
    if (returns[i].alias_info() != nullptr) continue;
    auto& v = (*stack)[rbegin + i];
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().is_cpu())
      v = c10::IValue(v.toTensor().to(*device));
  }
}

// The warning handler of a thread on which no torch binding is active: TORCH_WARN there prints
// to stderr instead of raising a Python warning. Read when the library loads (at import, outside
// any torch binding).
c10::WarningHandler* const g_base_warning_handler = c10::WarningUtils::get_warning_handler();

// A Python UserWarning wherever the operator was called from. Through a torch binding, torch's
// handler turns TORCH_WARN into one; operators called from compiled code (an FX graph calling
// torch.ops.aten.*) or from threads torch does not wrap have no handler, so the warning is
// raised through Python directly (taking the GIL, which the caller does not hold there).
void warn_user(const std::string& message) {
  if (c10::WarningUtils::get_warning_handler() != g_base_warning_handler || !Py_IsInitialized()) {
    TORCH_WARN(message);
    return;
  }
  PyGILState_STATE gil = PyGILState_Ensure();
  std::string error;
  if (PyErr_WarnEx(PyExc_UserWarning, message.c_str(), 1) < 0) {  // warnings are errors
    PyObject *type = nullptr, *value = nullptr, *trace = nullptr;
    PyErr_Fetch(&type, &value, &trace);
    PyObject* text = value ? PyObject_Str(value) : nullptr;
    const char* utf8 = text ? PyUnicode_AsUTF8(text) : nullptr;
    error = utf8 ? utf8 : message;
    PyErr_Clear();
    Py_XDECREF(text);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(trace);
  }
  PyGILState_Release(gil);
  TORCH_CHECK(error.empty(), "UserWarning turned into an error: ", error);
}

void warn_once(const std::string& name);

// Counts `name` as one operator run on the CPU (outside the boxed fallback, which counts per
// operator in OpInfo), and warns the first time any does.
void count_fallback(const std::string& name) {
  {
    std::lock_guard<std::mutex> lock(g_count_mutex);
    ++g_counts[name];
  }
  warn_once(name);
}

// Operators whose schema does not mark arguments they write: (argument indices, index of the
// bool argument that enables the writes). cpu_fallback writes back only Tensor(a!) arguments.
// native_batch_norm updates running_mean/running_var in training mode, yet its schema says
// `Tensor? running_mean` (the same in 2.11 to 2.14).
struct HiddenWrites {
  std::vector<size_t> args;
  size_t enabled_by;
};
const HiddenWrites* hidden_writes(const std::string& name) {
  static const std::unordered_map<std::string, HiddenWrites> table = {
      {"native_batch_norm", {{3, 4}, 5}},
  };
  auto it = table.find(name);
  return it == table.end() ? nullptr : &it->second;
}

// Operators whose CPU kernels refuse an output that overlaps an input (at::assert_no_overlap),
// with the arguments they check for partial overlap only. The fallback hands the CPU kernel
// separate copies, so the kernel cannot see the aliasing: without these checks, cat(..., out=)
// into one of its inputs silently computed from half-overwritten data on the device, and raised
// on the CPU.
const std::unordered_map<std::string, std::vector<std::string>>& overlap_checked() {
  static const std::unordered_map<std::string, std::vector<std::string>> table = {
      {"cat", {}},          {"gather", {"index"}}, {"take", {}},         {"index_select", {}},
      {"masked_select", {}}, {"kthvalue", {}},       {"bernoulli", {}},
  };
  return table;
}

// What the fallback needs of an operator, worked out on its first call: rebuilding the name and
// scanning the schema on every call cost about a microsecond of a 16-element add's fallback.
struct OpInfo {
  explicit OpInfo(c10::OperatorName o) : op(std::move(o)) {}
  c10::OperatorName op;           // to recognise a schema address reused by another operator
  std::string name;               // op_key(op)
  const HiddenWrites* hidden;
  std::vector<size_t> generators; // indices of Generator? arguments
  // For overlap_checked() operators: written arguments, and the others (true: partial only).
  std::vector<size_t> written;
  std::vector<std::pair<size_t, bool>> read;
  // The schema has only what direct_fallback handles: no TensorList or Device arguments, no
  // view (immutable alias) returns, only Tensor returns.
  bool direct = false;
  std::atomic<int64_t> calls{0};
  // What the calls cost, never reset (fallback_costs): calls, bytes to the host and back, ns.
  std::atomic<int64_t> priced_calls{0}, to_host{0}, to_device{0}, nanos{0};
};

bool is_tensor_type(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::TensorType) return true;
  auto opt = type->cast<c10::OptionalType>();
  return opt && opt->getElementType()->kind() == c10::TypeKind::TensorType;
}

bool mentions(const c10::TypePtr& type, c10::TypeKind kind) {
  if (type->kind() == kind) return true;
  for (const auto& contained : type->containedTypes())
    if (mentions(contained, kind)) return true;
  return false;
}

// A Tensor or Tensor? argument, or one without tensors (lists of them, tuples) and devices.
bool direct_arg(const c10::TypePtr& type) {
  return is_tensor_type(type) || (!mentions(type, c10::TypeKind::TensorType) &&
                                  !mentions(type, c10::TypeKind::DeviceObjType));
}

bool direct_schema(const c10::FunctionSchema& schema) {
  for (const c10::Argument& arg : schema.arguments())
    if (!direct_arg(arg.real_type())) return false;
  for (const c10::Argument& ret : schema.returns()) {
    if (ret.real_type()->kind() != c10::TypeKind::TensorType) return false;
    if (ret.alias_info() && !ret.alias_info()->isWrite()) return false;  // a view
  }
  return !schema.is_vararg() && !schema.is_varret();
}

void find_overlap_args(const c10::FunctionSchema& schema, OpInfo& info) {
  auto it = overlap_checked().find(std::string(schema.name()).substr(6));  // past "aten::"
  if (schema.name().rfind("aten::", 0) != 0 || it == overlap_checked().end()) return;
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    const c10::Argument& arg = schema.arguments()[i];
    if (arg.alias_info() && arg.alias_info()->isWrite()) {
      info.written.push_back(i);
    } else {
      const auto& names = it->second;
      info.read.emplace_back(i, std::find(names.begin(), names.end(), arg.name()) != names.end());
    }
  }
}

// Raises, as the CPU kernel does, when an output of an overlap-checked operator overlaps an input.
void check_overlap(const OpInfo& info, const torch::jit::Stack& stack, size_t begin) {
  for (size_t w : info.written) {
    const c10::IValue& out = stack[begin + w];
    if (!out.isTensor() || !out.toTensor().defined()) continue;
    at::assert_no_internal_overlap(out.toTensor());
    for (const auto& [r, partial_only] : info.read) {
      const c10::IValue& in = stack[begin + r];
      std::vector<at::Tensor> inputs;
      if (in.isTensor()) inputs.push_back(in.toTensor());
      if (in.isTensorList()) inputs = in.toTensorVector();
      for (const at::Tensor& t : inputs) {
        if (!t.defined()) continue;
        if (partial_only) at::assert_no_partial_overlap(out.toTensor(), t);
        else at::assert_no_overlap(out.toTensor(), t);
      }
    }
  }
}
std::mutex g_info_mutex;
// Keyed by the schema's address, which lives as long as the operator's registration.
std::unordered_map<const c10::FunctionSchema*, std::unique_ptr<OpInfo>> g_infos;

OpInfo& op_info(const c10::OperatorHandle& op) {
  const c10::FunctionSchema& schema = op.schema();
  std::lock_guard<std::mutex> lock(g_info_mutex);
  std::unique_ptr<OpInfo>& slot = g_infos[&schema];
  if (!slot || !(slot->op == schema.operator_name())) {
    auto info = std::make_unique<OpInfo>(schema.operator_name());
    info->name = op_key(info->op);
    info->hidden = hidden_writes(info->name);
    for (size_t i = 0; i < schema.arguments().size(); ++i)
      if (is_generator_arg(schema.arguments()[i])) info->generators.push_back(i);
    find_overlap_args(schema, *info);
    info->direct = direct_schema(schema);
    if (slot) {  // the old operator is gone: keep what it counted under its name
      std::lock_guard<std::mutex> count_lock(g_count_mutex);
      g_counts[slot->name] += slot->calls.load();
    }
    slot = std::move(info);
  }
  return *slot;
}

void warn_once(const std::string& name) {
  if (!g_warned.load(std::memory_order_relaxed) && !g_warned.exchange(true)) {
    const std::string dev = backend_name();
    warn_user("torchvendor: operator " + name + " has no " + dev + " kernel, so it ran on the "
              "CPU (its tensors were copied to the host and back). This warning is shown once; "
              "torch." + dev + ".fallback_counts() lists every operator that fell back and how "
              "often: implement the most used ones as native kernels.");
  }
}

void run_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  OpInfo& info = op_info(op);
  if (!info.written.empty()) check_overlap(info, *stack, stack->size() - op.schema().arguments().size());
  info.calls.fetch_add(1, std::memory_order_relaxed);
  warn_once(info.name);
  if (const HiddenWrites* hw = info.hidden) {
    const size_t begin = stack->size() - op.schema().arguments().size();
    if ((*stack)[begin + hw->enabled_by].toBool()) {
      // Hand the CPU kernel our own CPU copies of those arguments, then copy them back.
      std::vector<std::pair<at::Tensor, at::Tensor>> written;  // (device, cpu)
      for (size_t i : hw->args) {
        c10::IValue& v = (*stack)[begin + i];
        if (!v.isTensor() || !v.toTensor().defined() || !v.toTensor().is_privateuseone()) continue;
        at::Tensor cpu = v.toTensor().cpu();
        written.emplace_back(v.toTensor(), cpu);
        v = c10::IValue(cpu);
      }
      run_cpu_fallback(op, stack, info.direct);
      for (auto& [device_tensor, cpu] : written) device_tensor.copy_(cpu);
      return;
    }
  }
  // Random operators: run the CPU kernel with a CPU clone of the device generator (explicit or
  // default), then write the advanced state back, so torch.<name>.manual_seed governs them.
  const size_t begin = stack->size() - op.schema().arguments().size();
  for (size_t i : info.generators) {
    c10::IValue& value = (*stack)[begin + i];
    at::Generator device_gen;
    if (value.isNone())
      device_gen = *static_cast<const at::Generator*>(
          default_generator_ptr(target_device(*stack, begin)));
    else if (value.toGenerator().device().type() == c10::DeviceType::PrivateUse1)
      device_gen = value.toGenerator();
    if (!device_gen.defined()) break;
    std::lock_guard<std::mutex> lock(device_gen.mutex());
    auto* state = device_gen.get<at::CPUGeneratorImpl>();
    at::Generator cpu_gen = at::make_generator<at::CPUGeneratorImpl>();
    copy_rng_state(cpu_gen.get<at::CPUGeneratorImpl>(), state);
    value = c10::IValue(cpu_gen);
    run_cpu_fallback(op, stack, info.direct);
    copy_rng_state(state, cpu_gen.get<at::CPUGeneratorImpl>());
    return;
  }
  run_cpu_fallback(op, stack, info.direct);
}

// Bytes of the device tensors on the stack from `begin` on: what the fallback copies one way.
int64_t device_bytes(const torch::jit::Stack& stack, size_t begin) {
  int64_t n = 0;
  auto add = [&n](const at::Tensor& t) {
    if (t.defined() && t.is_privateuseone()) n += static_cast<int64_t>(t.nbytes());
  };
  for (size_t i = begin; i < stack.size(); ++i) {
    if (stack[i].isTensor()) add(stack[i].toTensor());
    else if (stack[i].isTensorList())
      for (const at::Tensor& t : stack[i].toTensorVector()) add(t);
  }
  return n;
}

// The boxed fallback, priced: the device tensors among the arguments go to the host, those among
// the results come back, and the call takes its time (fallback_costs() reports them per operator).
void fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const int64_t to_host = device_bytes(*stack, stack->size() - op.schema().arguments().size());
  const auto start = std::chrono::steady_clock::now();
  run_fallback(op, stack);
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::steady_clock::now() - start).count();
  OpInfo& info = op_info(op);
  info.priced_calls.fetch_add(1, std::memory_order_relaxed);
  info.to_host.fetch_add(to_host, std::memory_order_relaxed);
  info.to_device.fetch_add(device_bytes(*stack, stack->size() - op.schema().returns().size()),
                           std::memory_order_relaxed);
  info.nanos.fetch_add(ns, std::memory_order_relaxed);
}

// ---- kernels that compute on CPU copies ------------------------------------------------------
// Operators the boxed fallback cannot serve: their CPU dispatch has no kernel
// (convolution_overrideable: the CPU picks a real convolution before reaching it), or they draw
// random numbers without a Generator argument (native_dropout). They run on CPU copies here,
// counted and warned about like the fallback, so a vendor kernel registered later replaces them.

at::Tensor to_device(const at::Tensor& t, c10::Device d) { return t.defined() ? t.to(d) : t; }

at::Tensor convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias,
                                    c10::IntArrayRef stride, c10::IntArrayRef padding,
                                    c10::IntArrayRef dilation, bool transposed,
                                    c10::IntArrayRef output_padding, int64_t groups) {
  count_fallback("convolution_overrideable");
  PricedCall priced("convolution_overrideable", {input, weight, bias.value_or(at::Tensor())});
  std::optional<at::Tensor> cpu_bias;
  if (bias.has_value() && bias->defined()) cpu_bias = bias->cpu();
  return priced.back(at::convolution(input.cpu(), weight.cpu(), cpu_bias, stride, padding, dilation,
                                     transposed, output_padding, groups)
                         .to(input.device()));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation,
    bool transposed, c10::IntArrayRef output_padding, int64_t groups,
    std::array<bool, 3> output_mask) {
  count_fallback("convolution_backward_overrideable");
  PricedCall priced("convolution_backward_overrideable", {grad_output, input, weight});
  // The bias has one entry per output channel.
  const std::vector<int64_t> bias_sizes{transposed ? weight.size(1) * groups : weight.size(0)};
  auto [gi, gw, gb] = at::convolution_backward(
      grad_output.cpu(), input.cpu(), weight.cpu(), bias_sizes, stride, padding, dilation,
      transposed, output_padding, groups, output_mask);
  const c10::Device d = input.device();
  return {priced.back(to_device(gi, d)), priced.back(to_device(gw, d)), priced.back(to_device(gb, d))};
}

std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p,
                                                  std::optional<bool> train) {
  count_fallback("native_dropout");
  PricedCall priced("native_dropout", {input});
  if (input.numel() == 0) return {input, at::empty_like(input)};
  if (train.has_value() && !*train) {
    return {input.clone(), at::ones_like(input, input.options().dtype(at::kBool))};
  }
  // What the CPU kernel computes, with a CPU clone of the device generator (the CPU kernel
  // would draw from the CPU default generator), whose advanced state is written back.
  at::Generator device_gen = *static_cast<const at::Generator*>(
      default_generator_ptr(input.device().index()));
  at::Tensor cpu_in = input.cpu(), mask;
  {
    std::lock_guard<std::mutex> lock(device_gen.mutex());
    auto* state = device_gen.get<at::CPUGeneratorImpl>();
    at::Generator cpu_gen = at::make_generator<at::CPUGeneratorImpl>();
    copy_rng_state(cpu_gen.get<at::CPUGeneratorImpl>(), state);
    const double p1m = 1. - p;
    mask = at::empty_like(cpu_in, at::MemoryFormat::Contiguous).bernoulli_(p1m, cpu_gen);
    copy_rng_state(state, cpu_gen.get<at::CPUGeneratorImpl>());
  }
  const double scale = p == 1. ? 0. : 1. / (1. - p);
  at::Tensor out = cpu_in.mul(mask).mul_(scale);
  return {priced.back(out.to(input.device())), priced.back(mask.to(at::kBool).to(input.device()))};
}

// torch's CPU mse_loss.out resizes its out tensor to the elementwise shape before reducing, so
// the boxed fallback (which hands it an out of the reduced shape) warned "An output with one or
// more elements was resized", a warning the CPU's functional mse_loss never gives.
at::Tensor mse_loss(const at::Tensor& self, const at::Tensor& target, int64_t reduction) {
  count_fallback("mse_loss");
  PricedCall priced("mse_loss", {self, target});
  return priced.back(at::mse_loss(self.cpu(), target.cpu(), reduction).to(self.device()));
}

// Operators with a device-generic decomposition beside their CPU kernel: on a device without a
// kernel of its own torch runs the decomposition, whose numbers or errors are not the CPU kernel's.
// The boxed fallback runs the CPU kernel instead (counted like any fallback; a vendor kernel
// registered later replaces it). Every aten operator with a CPU kernel and a
// CompositeExplicitAutograd one, or a CompositeImplicitAutograd one and an autograd formula (without
// the formula, a backend kernel would leave the operator without autograd), found in the
// dispatcher, so a torch release that adds one is covered. What they did on the device before:
// - native_layer_norm: normalizes with batch norm's statistics; a single element's mean differed
//   from the element by 1e-4, so its output (0 on the CPU) was not 0
// - native_group_norm: the same decomposition, which refuses an empty input (torch 2.11)
// - silu_backward, mish_backward (CompositeImplicitAutograd): the formula in the input's dtype, one
//   rounding per operator, where the CPU kernel computes in float and rounds once; bfloat16 and
//   float16 gradients differed by an ulp, past OpInfo's tolerance
// Two more, listed by name:
// - narrow_copy (a CompositeExplicitAutogradNonFunctional decomposition): raises IndexError for a
//   dim out of range where the CPU raises RuntimeError
// - linalg_lstsq (one composite for every device, no CPU kernel): picks its LAPACK driver by device
//   type, 'gels' (QR, full rank assumed) off the
//   CPU against 'gelsy' on it, so rank-deficient samples and their gradients differed
bool cpu_kernel_beside_composite(const c10::OperatorHandle& op) {
  using c10::DispatchKey;
  if (!op.hasKernelForDispatchKey(DispatchKey::CPU)) return false;
  if (op.hasKernelForDispatchKey(DispatchKey::CompositeExplicitAutograd)) return true;
  return op.hasKernelForDispatchKey(DispatchKey::CompositeImplicitAutograd) &&
         op.hasKernelForDispatchKey(DispatchKey::Autograd);
}

void register_cpu_kernel_fallbacks(torch::Library& m) {
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0) continue;
    auto op = dispatcher.findOp(name);
    if (!op || op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1) ||
        !cpu_kernel_beside_composite(*op))
      continue;
    const std::string qualified = name.name.substr(6) +
        (name.overload_name.empty() ? "" : "." + name.overload_name);
    m.impl(qualified.c_str(), torch::CppFunction::makeFromBoxedFunction<&fallback>());
  }
  for (const char* name : {"narrow_copy", "linalg_lstsq"})
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&fallback>());
}

void register_cpu_compute_kernels(torch::Library& m) {
  register_cpu_kernel_fallbacks(m);
  m.impl("mse_loss", TORCH_FN(mse_loss));
  m.impl("convolution_overrideable", TORCH_FN(convolution_overrideable));
  m.impl("convolution_backward_overrideable", TORCH_FN(convolution_backward_overrideable));
  m.impl("native_dropout", TORCH_FN(native_dropout));
  register_rnn_cell_kernels(m);
}

std::unique_ptr<torch::Library> g_aten_lib, g_fallback_lib, g_autocast_fallthrough,
    g_autocast_lib, g_mathbits_conj, g_mathbits_neg;
bool g_installed = false;
std::mutex g_install_mutex;

// CUDA bans binary_cross_entropy under autocast (it is unsafe in lower precision); so does the
// device, with CUDA's advice.
at::Tensor binary_cross_entropy_banned(const at::Tensor&, const at::Tensor&,
                                       const std::optional<at::Tensor>&, int64_t) {
  TORCH_CHECK(false, "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to "
              "autocast on ", backend_name(), " (as on CUDA). Use torch.nn.functional."
              "binary_cross_entropy_with_logits or torch.nn.BCEWithLogitsLoss instead, which are "
              "safe to autocast.");
}

// CUDA's autocast policies, from the op lists torch's own header keeps for every backend
// (ATen/autocast_mode.h; CUDA, XPU and MPS register the same lists), so each torch release's
// device autocasts what that release's CUDA does: matmuls, convolutions and attention
// (scaled_dot_product_attention) in the lower precision, numerically sensitive ops (norms,
// losses, softmax, pow, exp, sums) in float32, mixed-dtype ops (addcmul, index_put, ...) promoted.
#define TV_AUTOCAST_LOWER(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define TV_AUTOCAST_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define TV_AUTOCAST_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define TV_AUTOCAST_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)

void register_autocast(torch::Library& m) {
  using namespace at;  // the lists name ATen types unqualified, as in ATen/autocast_mode.cpp
  AT_FORALL_LOWER_PRECISION_FP(TV_AUTOCAST_LOWER)
  AT_FORALL_FP32(TV_AUTOCAST_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(TV_AUTOCAST_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(TV_AUTOCAST_PROMOTE)
  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"), TORCH_FN(binary_cross_entropy_banned));
}

#undef TV_AUTOCAST_LOWER
#undef TV_AUTOCAST_FP32
#undef TV_AUTOCAST_FP32_SET_OPT_DTYPE
#undef TV_AUTOCAST_PROMOTE

}  // namespace

void count_fallback_op(const std::string& name) { count_fallback(name); }

void install() {
  std::lock_guard<std::mutex> lock(g_install_mutex);
  if (g_installed) return;
  TORCH_CHECK(runtime_loaded(), "torchvendor: load a runtime before installing the device");
  install_guard_and_hooks();  // first: refuses if another package owns PrivateUse1
  install_allocators();
  try {
    g_fallback_lib = std::make_unique<torch::Library>(
        torch::Library::IMPL, "_", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
    g_fallback_lib->fallback(torch::CppFunction::makeFromBoxedFunction<&fallback>());
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, "torchvendor: cannot register the ", backend_name(),
                " CPU fallback; another package has probably registered a PrivateUse1 "
                "fallback already. Only one PrivateUse1 backend can live in a process. ",
                "Dispatcher says: ", e.what_without_backtrace());
  }
  g_aten_lib = std::make_unique<torch::Library>(torch::Library::IMPL, "aten",
                                                c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  register_native_kernels(g_aten_lib.get());
  register_cpu_compute_kernels(*g_aten_lib);
  // _copy_from handles the conjugate and negative bits itself (it copies the bits' physical
  // values or materializes them on the host). Without these fallthroughs the math-bits fallback
  // resolves the bit with clone -> copy_ -> _copy_from again, without end.
  g_mathbits_conj = std::make_unique<torch::Library>(
      torch::Library::IMPL, "aten", c10::DispatchKey::Conjugate, __FILE__, __LINE__);
  g_mathbits_neg = std::make_unique<torch::Library>(
      torch::Library::IMPL, "aten", c10::DispatchKey::Negative, __FILE__, __LINE__);
  for (auto* lib : {g_mathbits_conj.get(), g_mathbits_neg.get()}) {
    lib->impl("_copy_from", torch::CppFunction::makeFallthrough());
    lib->impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
  }
  g_autocast_fallthrough = std::make_unique<torch::Library>(
      torch::Library::IMPL, "_", c10::DispatchKey::AutocastPrivateUse1, __FILE__, __LINE__);
  g_autocast_fallthrough->fallback(torch::CppFunction::makeFallthrough());
  g_autocast_lib = std::make_unique<torch::Library>(
      torch::Library::IMPL, "aten", c10::DispatchKey::AutocastPrivateUse1, __FILE__, __LINE__);
  register_autocast(*g_autocast_lib);
  // Initialize the device now (the hooks' init() has nothing to do). torch's is_pinned() says
  // False for every pointer until the accelerator was lazily initialized
  // (at::Context::isPinnedPtr), which only some calls do: `torch.empty(n, pin_memory=True)
  // .is_pinned()` right after register_device was False.
  at::globalContext().lazyInitDevice(c10::DeviceType::PrivateUse1);
  g_installed = true;
}

void count_cpu_fallback(const std::string& name) { count_fallback(name); }

void run_boxed_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  fallback(op, stack);
}

std::map<std::string, int64_t> fallback_counts() {
  std::map<std::string, int64_t> out;
  {
    std::lock_guard<std::mutex> lock(g_count_mutex);
    out.insert(g_counts.begin(), g_counts.end());
  }
  std::lock_guard<std::mutex> lock(g_info_mutex);
  for (const auto& [schema, info] : g_infos)
    if (int64_t n = info->calls.load(std::memory_order_relaxed)) out[info->name] += n;
  return out;
}

// Calls computed on CPU copies outside the boxed fallback (PricedCall): {calls, to host, to device, ns}.
std::mutex g_cpu_call_mutex;
std::map<std::string, std::vector<int64_t>> g_cpu_calls;

void record_cpu_call(const std::string& name, int64_t to_host, int64_t to_device, int64_t nanos) {
  std::lock_guard<std::mutex> lock(g_cpu_call_mutex);
  std::vector<int64_t>& row = g_cpu_calls[name];
  row.resize(4);
  row[0] += 1, row[1] += to_host, row[2] += to_device, row[3] += nanos;
}

std::map<std::string, std::vector<int64_t>> fallback_costs() {
  std::map<std::string, std::vector<int64_t>> out;
  {
    std::lock_guard<std::mutex> lock(g_cpu_call_mutex);
    out = g_cpu_calls;
  }
  std::lock_guard<std::mutex> lock(g_info_mutex);
  for (const auto& [schema, info] : g_infos) {
    if (!info->priced_calls.load(std::memory_order_relaxed)) continue;
    std::vector<int64_t>& row = out[info->name];
    row.resize(4);
    row[0] += info->priced_calls.load(), row[1] += info->to_host.load();
    row[2] += info->to_device.load(), row[3] += info->nanos.load();
  }
  return out;
}

void reset_fallback_counts() {
  {
    std::lock_guard<std::mutex> lock(g_count_mutex);
    g_counts.clear();
  }
  std::lock_guard<std::mutex> lock(g_info_mutex);
  for (auto& [schema, info] : g_infos) info->calls = 0;
}

std::vector<std::string> registered_pieces() {
  constexpr auto kPU1 = c10::DeviceType::PrivateUse1;
  auto yes = [](bool b) { return std::string(b ? "yes" : "NO"); };
  std::vector<std::string> out;
  out.push_back("device guard (DeviceGuardImplInterface): " +
                yes(c10::impl::hasDeviceGuardImpl(kPU1)));
  out.push_back("hooks (PrivateUse1HooksInterface): " + yes(at::isPrivateUse1HooksRegistered()));
  bool ours = false;
  try {
    ours = c10::GetAllocator(kPU1) == device_allocator();
  } catch (const c10::Error&) {
  }
  out.push_back("caching allocator (c10::DeviceAllocator): " + yes(ours));
  auto& dispatcher = c10::Dispatcher::singleton();
  out.push_back("CPU fallback (PrivateUse1): " +
                yes(dispatcher.hasBackendFallbackForDispatchKey(c10::DispatchKey::PrivateUse1)));
  out.push_back("autocast (AutocastPrivateUse1): " +
                yes(dispatcher.hasBackendFallbackForDispatchKey(
                    c10::DispatchKey::AutocastPrivateUse1)));
  return out;
}

}  // namespace torchvendor
