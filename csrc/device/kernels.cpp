// Vendor kernel libraries on PyTorch's stable ABI (torchvendor/kernel_api.h): loading with
// checks (torch version, operators that exist, no operator claimed twice, nothing left
// registered on failure), the kernel API table, native call counts, checked mode, and the
// Scalar-free twins of operators the stable ABI cannot serve.
#include "tv_device.h"

#include <torchvendor/kernel_api.h>

#include <ATen/EmptyTensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/add.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/result_type.h>
#include <ATen/ops/sub.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/inductor/aoti_torch/utils.h>
#include <torch/csrc/stable/c/shim.h>
#include <torch/library.h>
#include <torch/version.h>

#include <dlfcn.h>

#include <array>
#include <atomic>
#include <cstring>
#include <optional>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string_view>
#include <unordered_map>

namespace torchvendor {
namespace {

std::mutex g_native_mutex;
std::atomic<bool> g_checked{false};

// ---- the table handed to kernel libraries ---------------------------------------------------

tv_status api_native_stream(int32_t device, int64_t stream_id, tv_stream* out) {
  try {
    *out = native_stream(c10::Stream(c10::Stream::UNSAFE,
                                     c10::Device(c10::DeviceType::PrivateUse1,
                                                 static_cast<c10::DeviceIndex>(device)),
                                     stream_id));
    return TV_SUCCESS;
  } catch (const std::exception&) {
    return TV_ERROR_INVALID_HANDLE;
  }
}

// Keyed like fallback_counts(): "mul.Tensor" for aten operators; a twin counts as the aten
// operator it serves ("torchvendor::add.Tensor" -> "add.Tensor").
std::string count_key(const char* op) {
  std::string_view name(op);
  for (std::string_view prefix : {"aten::", "torchvendor::"})
    if (name.substr(0, prefix.size()) == prefix) name.remove_prefix(prefix.size());
  return std::string(name);
}

// Calls per `op` string of a kernel library (TV_IMPL passes a literal, so one address per
// operator): hashing the address instead of the name keeps counting off a small op's cost. The
// text is kept and compared, since an unloaded library's address may be reused by another.
struct Called {
  std::string text, key;
  std::atomic<int64_t> calls{0};
};
std::unordered_map<const char*, Called*> g_called;  // under g_native_mutex
// Every slot ever made, never freed (a thread's memo may still point at a replaced one);
// native_counts() sums them by key.
std::vector<std::unique_ptr<Called>> g_slots;  // under g_native_mutex
// Bumped whenever a library is loaded or unloaded (load_kernel_library): an op string's address
// can then name another operator, so the per-thread memos below start over.
std::atomic<uint64_t> g_called_generation{0};

Called& called_slot(const char* op) {  // g_native_mutex held
  Called*& c = g_called[op];
  if (c == nullptr || c->text != op) {  // first call, or another library's string at a reused address
    g_slots.push_back(std::make_unique<Called>());
    c = g_slots.back().get();
    c->text = op;
    c->key = count_key(op);
  }
  return *c;
}

// Counting is on every native call: a per-thread memo of the last few operators' counters
// spares the lock and the hash lookup (a slot lives until its operator's string is reused).
void api_kernel_called(const char* op) {
  struct Memo {
    const char* op = nullptr;
    std::atomic<int64_t>* calls = nullptr;
  };
  constexpr size_t kMemo = 16;
  thread_local std::array<Memo, kMemo> memo;
  thread_local uint64_t generation = 0;
  const uint64_t now = g_called_generation.load(std::memory_order_acquire);
  if (generation != now) memo = {}, generation = now;
  Memo& m = memo[(reinterpret_cast<uintptr_t>(op) >> 3) % kMemo];
  if (m.op != op) {
    std::lock_guard<std::mutex> lock(g_native_mutex);
    m = Memo{op, &called_slot(op).calls};
  }
  m.calls->fetch_add(1, std::memory_order_relaxed);
}

int32_t api_checked_mode() { return g_checked.load(std::memory_order_relaxed) ? 1 : 0; }

// ---- checked mode ---------------------------------------------------------------------------
// check_begin decodes the kernel's StableIValue arguments by the operator's schema (tensors are
// at::Tensor handles, numbers their bits, an optional a pointer to its value or 0) without
// taking ownership, runs the operator on meta copies and keeps what the outputs must be;
// check_end compares. Argument kinds it cannot decode leave only the device check.

struct Expected {
  std::string op;
  std::optional<c10::Device> device;  // of the first device tensor argument
  bool shapes_known = false;
  std::vector<std::pair<std::vector<int64_t>, c10::ScalarType>> outputs;
};
thread_local Expected t_expected;
thread_local std::string t_check_error;

c10::OperatorHandle find_operator(const std::string& op) {
  auto dot = op.find('.');
  return c10::Dispatcher::singleton().findSchemaOrThrow(
      op.substr(0, dot).c_str(), dot == std::string::npos ? "" : op.substr(dot + 1).c_str());
}

// One argument as an IValue with tensors on meta; nullopt if this kind cannot be decoded.
std::optional<c10::IValue> decode(const c10::TypePtr& type, uint64_t v, Expected& e) {
  switch (type->kind()) {
    case c10::TypeKind::TensorType: {
      const at::Tensor& t = *reinterpret_cast<const at::Tensor*>(v);
      if (!t.defined()) return c10::IValue(t);
      if (!e.device && t.is_privateuseone()) e.device = t.device();
      return c10::IValue(at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta)));
    }
    case c10::TypeKind::IntType:
    case c10::TypeKind::SymIntType:
      return c10::IValue(static_cast<int64_t>(v));
    case c10::TypeKind::FloatType: {
      double d;
      std::memcpy(&d, &v, sizeof d);
      return c10::IValue(d);
    }
    case c10::TypeKind::BoolType:
      return c10::IValue(v != 0);
    case c10::TypeKind::OptionalType:
      if (v == 0) return c10::IValue();
      return decode(type->castRaw<c10::OptionalType>()->getElementType(),
                    *reinterpret_cast<const uint64_t*>(v), e);
    default:
      return std::nullopt;
  }
}

tv_status api_check_begin(const char* op, const uint64_t* args, uint64_t num_args) {
  try {
    t_expected = Expected{op};
    auto handle = find_operator(op);
    const auto& schema = handle.schema().arguments();
    TORCH_CHECK_VALUE(schema.size() == num_args, op, " has ", schema.size(),
                      " arguments, the kernel's stack ", num_args);
    torch::jit::Stack stack;
    bool decoded = true;
    for (size_t i = 0; i < num_args; ++i) {
      auto value = decode(schema[i].real_type(), args[i], t_expected);
      decoded = decoded && value.has_value();
      stack.push_back(value.value_or(c10::IValue()));
    }
    if (decoded) {
      handle.callBoxed(stack);
      for (const auto& out : stack)
        if (out.isTensor())
          t_expected.outputs.emplace_back(out.toTensor().sizes().vec(),
                                          out.toTensor().scalar_type());
      t_expected.shapes_known = true;
    }
    return TV_SUCCESS;
  } catch (const std::exception& e) {
    t_check_error = std::string("checked mode: cannot check ") + op + ": " + e.what();
    return TV_ERROR_INVALID_VALUE;
  }
}

tv_status api_check_end(const char* op, const uint64_t* outputs, uint64_t num_outputs) {
  const Expected& e = t_expected;
  std::ostringstream problems;
  for (uint64_t i = 0; i < num_outputs; ++i) {
    const at::Tensor& t = *reinterpret_cast<const at::Tensor*>(outputs[i]);
    const c10::Device want = e.device.value_or(c10::Device(c10::DeviceType::PrivateUse1, 0));
    if (t.device() != want)
      problems << " output " << i << " is on " << t.device() << ", expected " << want << ".";
    if (e.shapes_known && i < e.outputs.size() &&
        (t.sizes().vec() != e.outputs[i].first || t.scalar_type() != e.outputs[i].second))
      problems << " output " << i << " has shape " << t.sizes() << " and dtype "
               << t.scalar_type() << "; the operator's meta kernel says shape "
               << c10::IntArrayRef(e.outputs[i].first) << " and dtype " << e.outputs[i].second
               << ".";
  }
  if (problems.str().empty()) return TV_SUCCESS;
  t_check_error = std::string("checked mode: the ") + backend_name() + " kernel for " + op +
                  " returned a wrong output:" + problems.str() + " Fix the kernel.";
  return TV_ERROR_INVALID_VALUE;
}

const char* api_last_error() { return t_check_error.c_str(); }

// ---- minor 1: the per-call fast path ----------------------------------------------------------

tv_status api_fail(tv_status status, std::string message) {
  t_check_error = std::move(message);
  return status;
}

bool valid_device(int32_t device) { return device >= 0 && device < device_count(); }

// What the device layer's empty_strided kernel does (ops.cpp), minus the dispatcher: torch's
// C shim (aoti_torch_empty_strided) reaches it through at::empty_strided, BackendSelect and a
// device guard, and torch::stable::empty through a dispatcher lookup by operator name.
tv_status api_empty_strided(int64_t ndim, const int64_t* sizes, const int64_t* strides,
                            int32_t dtype, int32_t device, void** ret_tensor) {
  if (ret_tensor == nullptr || ndim < 0 || (ndim > 0 && (sizes == nullptr || strides == nullptr)))
    return api_fail(TV_ERROR_INVALID_VALUE, "empty_strided: ret_tensor must not be NULL, ndim "
                    "must be >= 0, and sizes/strides must not be NULL when ndim > 0");
  if (!valid_device(device))
    return api_fail(TV_ERROR_INVALID_DEVICE, "empty_strided: device " + std::to_string(device) +
                    " is out of range (the device has " + std::to_string(device_count()) +
                    " devices)");
  if (dtype < 0 || dtype >= static_cast<int32_t>(c10::ScalarType::NumOptions) ||
      dtype == static_cast<int32_t>(c10::ScalarType::Undefined))
    return api_fail(TV_ERROR_INVALID_VALUE, "empty_strided: unknown dtype code " +
                    std::to_string(dtype) + " (use the shim's aoti_torch_dtype_*())");
  try {
    const auto index = static_cast<c10::DeviceIndex>(device);
    c10::OptionalDeviceGuard guard;  // the allocator serves the current device
    if (current_device() != index) guard.reset_device(c10::Device(c10::DeviceType::PrivateUse1, index));
    at::Tensor t = at::detail::empty_strided_generic(
        c10::IntArrayRef(sizes, ndim), c10::IntArrayRef(strides, ndim), device_allocator(),
        c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), static_cast<c10::ScalarType>(dtype));
    *ret_tensor = torch::aot_inductor::new_tensor_handle(std::move(t));
    return TV_SUCCESS;
  } catch (const c10::OutOfMemoryError& e) {
    return api_fail(TV_ERROR_OUT_OF_MEMORY, e.what_without_backtrace());
  } catch (const c10::Error& e) {
    return api_fail(TV_ERROR_INVALID_VALUE, e.what_without_backtrace());
  } catch (const std::exception& e) {
    return api_fail(TV_ERROR_INVALID_VALUE, e.what());
  }
}

tv_status api_current_stream(int32_t device, tv_stream* stream) {
  if (stream == nullptr) return api_fail(TV_ERROR_INVALID_VALUE, "current_stream: stream is NULL");
  if (!valid_device(device))
    return api_fail(TV_ERROR_INVALID_DEVICE, "current_stream: device " + std::to_string(device) +
                    " is out of range");
  try {
    *stream = native_stream(current_stream(static_cast<c10::DeviceIndex>(device)));
    return TV_SUCCESS;
  } catch (const std::exception& e) {
    return api_fail(TV_ERROR_INVALID_HANDLE, e.what());
  }
}

// ---- minor 2: handing a call back to the CPU fallback -----------------------------------------
// The arguments arrive as torch encodes a stable kernel's (stableivalue_conversions.h): a tensor
// is an AtenTensorHandle (an at::Tensor*), a number its bits, an optional a pointer to its value
// or 0, a list a StableListHandle. They are borrowed: the caller releases them.

std::optional<c10::IValue> decode_arg(const c10::TypePtr& type, uint64_t v);

std::optional<c10::IValue> decode_list(const c10::TypePtr& element, uint64_t v) {
  if (element->kind() != c10::TypeKind::IntType && element->kind() != c10::TypeKind::SymIntType)
    return std::nullopt;
  auto list = reinterpret_cast<StableListHandle>(v);
  size_t n = 0;
  if (torch_list_size(list, &n) != AOTI_TORCH_SUCCESS) return std::nullopt;
  std::vector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    StableIValue item = 0;
    if (torch_list_get_item(list, i, &item) != AOTI_TORCH_SUCCESS) return std::nullopt;
    out[i] = static_cast<int64_t>(item);
  }
  return c10::IValue(std::move(out));
}

std::optional<c10::IValue> decode_arg(const c10::TypePtr& type, uint64_t v) {
  switch (type->kind()) {
    case c10::TypeKind::TensorType:
      return c10::IValue(*reinterpret_cast<const at::Tensor*>(v));
    case c10::TypeKind::IntType:
    case c10::TypeKind::SymIntType:
      return c10::IValue(static_cast<int64_t>(v));
    case c10::TypeKind::FloatType: {
      double d;
      std::memcpy(&d, &v, sizeof d);
      return c10::IValue(d);
    }
    case c10::TypeKind::BoolType:
      return c10::IValue((v & 0xff) != 0);  // a bool's byte, the rest zero
    case c10::TypeKind::ScalarTypeType:  // the shim's dtype codes are ScalarType's
      return c10::IValue(static_cast<c10::ScalarType>(static_cast<int32_t>(v)));
    case c10::TypeKind::ListType:
      return decode_list(type->castRaw<c10::ListType>()->getElementType(), v);
    case c10::TypeKind::OptionalType:
      if (v == 0) return c10::IValue();
      return decode_arg(type->castRaw<c10::OptionalType>()->getElementType(),
                        *reinterpret_cast<const uint64_t*>(v));
    default:
      return std::nullopt;
  }
}

std::optional<uint64_t> encode_result(c10::IValue v) {
  uint64_t bits = 0;
  if (v.isTensor()) return reinterpret_cast<uint64_t>(
      torch::aot_inductor::new_tensor_handle(std::move(v).toTensor()));
  if (v.isInt()) return static_cast<uint64_t>(v.toInt());
  if (v.isBool()) return static_cast<uint64_t>(v.toBool());
  if (v.isDouble()) {
    const double d = v.toDouble();
    std::memcpy(&bits, &d, sizeof d);
    return bits;
  }
  return std::nullopt;
}

// The aten operator a twin serves ("torchvendor::add.Tensor" -> "aten::add.Tensor"); its float
// alpha reaches the aten operator's Scalar as a double.
c10::OperatorHandle fallback_target(const std::string& op) {
  if (op.rfind("torchvendor::", 0) == 0) return find_operator("aten::" + op.substr(13));
  return find_operator(op);
}

tv_status api_fallback(const char* op, const uint64_t* args, uint64_t num_args, uint64_t* outputs,
                       uint64_t num_outputs) {
  if (op == nullptr || (num_args > 0 && args == nullptr) || (num_outputs > 0 && outputs == nullptr))
    return api_fail(TV_ERROR_INVALID_VALUE, "fallback: op, args and outputs must not be NULL");
  try {
    const auto& schema = find_operator(op).schema();  // the arguments as the kernel got them
    const c10::OperatorHandle target = fallback_target(op);
    if (schema.arguments().size() != num_args || target.schema().returns().size() != num_outputs)
      return api_fail(TV_ERROR_NOT_SUPPORTED, std::string("fallback: ") + op + " takes " +
                      std::to_string(schema.arguments().size()) + " arguments and returns " +
                      std::to_string(target.schema().returns().size()) + " results; the call "
                      "passed " + std::to_string(num_args) + " and " + std::to_string(num_outputs));
    torch::jit::Stack stack;
    for (uint64_t i = 0; i < num_args; ++i) {
      auto value = decode_arg(schema.arguments()[i].real_type(), args[i]);
      if (!value)
        return api_fail(TV_ERROR_NOT_SUPPORTED, std::string("fallback: cannot read argument '") +
                        schema.arguments()[i].name() + "' of " + op + " (type " +
                        schema.arguments()[i].real_type()->str() + "); kernel_api.h lists the "
                        "kinds it reads");
      stack.push_back(std::move(*value));
    }
    run_boxed_fallback(target, &stack);
    for (const c10::IValue& v : stack)
      if (!v.isTensor() && !v.isInt() && !v.isBool() && !v.isDouble())
        return api_fail(TV_ERROR_NOT_SUPPORTED, std::string("fallback: ") + op + " returned a " +
                        v.tagKind() + ", which the stable ABI's stack cannot carry here");
    for (uint64_t i = 0; i < num_outputs; ++i) outputs[i] = *encode_result(std::move(stack[i]));
    return TV_SUCCESS;
  } catch (const c10::Error& e) {
    return api_fail(TV_ERROR_INVALID_VALUE, e.what_without_backtrace());
  } catch (const std::exception& e) {
    return api_fail(TV_ERROR_INVALID_VALUE, e.what());
  }
}

tv_kernel_api g_api{};

const tv_kernel_api* kernel_api() {
  g_api.abi_major = TV_KERNEL_API_MAJOR;
  g_api.abi_minor = TV_KERNEL_API_MINOR;
  g_api.struct_size = sizeof(tv_kernel_api);
  g_api.runtime = &rt();
  g_api.native_stream = &api_native_stream;
  g_api.kernel_called = &api_kernel_called;
  g_api.checked_mode = &api_checked_mode;
  g_api.check_begin = &api_check_begin;
  g_api.check_end = &api_check_end;
  g_api.last_error_message = &api_last_error;
  g_api.empty_strided = &api_empty_strided;
  g_api.current_stream = &api_current_stream;
  g_api.fallback = &api_fallback;
  return &g_api;
}

// ---- Scalar-free twins ----------------------------------------------------------------------
// The stable ABI cannot pass a c10::Scalar, so a vendor implements torchvendor::add.Tensor
// (float alpha) and the SDK serves aten::add.Tensor with it. The twins' CompositeExplicitAutograd
// kernels (CPU, meta) are the aten operator itself, so meta shapes and CPU runs agree.

at::Tensor twin_add(const at::Tensor& a, const at::Tensor& b, double alpha) {
  return at::add(a, b, alpha);
}
at::Tensor twin_sub(const at::Tensor& a, const at::Tensor& b, double alpha) {
  return at::sub(a, b, alpha);
}

TORCH_LIBRARY(torchvendor, m) {
  m.def("add.Tensor(Tensor self, Tensor other, *, float alpha=1) -> Tensor");
  m.def("sub.Tensor(Tensor self, Tensor other, *, float alpha=1) -> Tensor");
}
TORCH_LIBRARY_IMPL(torchvendor, CompositeExplicitAutograd, m) {
  m.impl("add.Tensor", TORCH_FN(twin_add));
  m.impl("sub.Tensor", TORCH_FN(twin_sub));
}

template <const char* kTwin>
at::Tensor bridge(const at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha) {
  static auto twin = c10::Dispatcher::singleton()
                         .findSchemaOrThrow(kTwin, "Tensor")
                         .typed<at::Tensor(const at::Tensor&, const at::Tensor&, double)>();
  if (alpha.isComplex()) {  // a float alpha cannot carry it: the CPU computes this call
    count_cpu_fallback(std::string(kTwin).substr(13) + ".Tensor");
    const std::string op = std::string(kTwin).substr(13);
    at::Tensor out = op == "add" ? at::add(self.cpu(), other.cpu(), alpha)
                                 : at::sub(self.cpu(), other.cpu(), alpha);
    return out.to(self.is_privateuseone() ? self.device() : other.device());
  }
  // What aten's alpha_check says, which the twin's float alpha cannot tell. An integral alpha
  // (the default 1) passes for every dtype, so the result type (a dispatcher call) is only
  // worked out for a boolean or floating alpha.
  if (alpha.isBoolean() || alpha.isFloatingPoint()) {
    const auto dtype = at::result_type(self, other);
    TORCH_CHECK(!alpha.isBoolean() || dtype == at::kBool,
                "Boolean alpha only supported for Boolean results.");
    TORCH_CHECK(!alpha.isFloatingPoint() || at::isFloatingType(dtype) || at::isComplexType(dtype),
                "For integral input tensors, argument alpha must not be a floating point number.");
  }
  // Straight to the twin's PrivateUse1 kernel: the layers above it (autograd, Python modes)
  // already ran for the aten operator this call serves.
  static const c10::DispatchKeySet kDevice(c10::DispatchKey::PrivateUse1);
  return twin.redispatch(kDevice, self, other, alpha.toDouble());
}
constexpr char kAddTwin[] = "torchvendor::add";
constexpr char kSubTwin[] = "torchvendor::sub";

std::unique_ptr<torch::Library> g_bridges;
std::set<std::string> g_bridged;

void register_bridge(const std::string& twin) {
  if (g_bridged.count(twin)) return;
  if (!g_bridges)
    g_bridges = std::make_unique<torch::Library>(torch::Library::IMPL, "aten",
                                                 c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  if (twin == "torchvendor::add.Tensor") g_bridges->impl("add.Tensor", TORCH_FN(bridge<kAddTwin>));
  if (twin == "torchvendor::sub.Tensor") g_bridges->impl("sub.Tensor", TORCH_FN(bridge<kSubTwin>));
  g_bridged.insert(twin);
}

// ---- loading --------------------------------------------------------------------------------

std::mutex g_load_mutex;
std::unordered_map<std::string, std::string> g_op_owner;  // operator -> library path

// The marker TV_KERNEL_LIBRARY puts in the file: "torchvendor-kernel-library;torch=2.11;api=1;".
std::string read_marker(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  TORCH_CHECK_VALUE(file, "torchvendor: cannot read the kernel library '", path, "'.");
  const std::string data((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const std::string tag = "torchvendor-kernel-library;";
  auto at = data.find(tag);
  TORCH_CHECK_VALUE(at != std::string::npos, "torchvendor: '", path, "' is not a torchvendor "
                    "kernel library: it has no TV_KERNEL_LIBRARY(\"<torch major.minor>\") marker "
                    "(torchvendor/kernel_api.h). Add the marker and rebuild.");
  return data.substr(at, data.find('\0', at) - at);
}

void check_versions(const std::string& path, const std::string& marker) {
  int major = 0, minor = 0, api = 0;
  const auto torch_at = marker.find(";torch="), api_at = marker.find(";api=");
  TORCH_CHECK_VALUE(torch_at != std::string::npos && api_at != std::string::npos &&
                        std::sscanf(marker.c_str() + torch_at, ";torch=%d.%d", &major, &minor) == 2 &&
                        std::sscanf(marker.c_str() + api_at, ";api=%d", &api) == 1,
                    "torchvendor: '", path, "' has a malformed marker '", marker, "'.");
  TORCH_CHECK_VALUE(major < TORCH_VERSION_MAJOR ||
                        (major == TORCH_VERSION_MAJOR && minor <= TORCH_VERSION_MINOR),
                    "torchvendor: the kernel library '", path, "' was built for torch ", major, ".",
                    minor, " (TORCH_TARGET_VERSION), newer than the running torch ",
                    TORCH_VERSION_MAJOR, ".", TORCH_VERSION_MINOR, ": it may call stable-ABI "
                    "functions this torch lacks. Rebuild it with TORCH_TARGET ", TORCH_VERSION_MAJOR,
                    ".", TORCH_VERSION_MINOR, " or older, or upgrade torch. Nothing was registered.");
  TORCH_CHECK_VALUE(api == TV_KERNEL_API_MAJOR, "torchvendor: '", path, "' speaks kernel API ",
                    api, ", this torchvendor ", TV_KERNEL_API_MAJOR, ": rebuild it against this "
                    "torchvendor's kernel_api.h. Nothing was registered.");
}

// How many PrivateUse1 kernels each operator has (an override keeps the old one, inactive).
std::map<std::string, int> privateuse1_kernels() {
  auto& dispatcher = c10::Dispatcher::singleton();
  std::map<std::string, int> out;
  for (const c10::OperatorName& op :
       dispatcher.getRegistrationsForDispatchKey(c10::DispatchKey::PrivateUse1)) {
    const std::string name = op.overload_name.empty() ? op.name : op.name + "." + op.overload_name;
    auto handle = dispatcher.findOp(op);
    if (!handle) continue;
    std::istringstream state(handle->dumpState());
    int n = 0;
    for (std::string line; std::getline(state, line);) n += line.rfind("PrivateUse1", 0) == 0;
    out[name] = n;
  }
  return out;
}

bool has_schema(const std::string& name) {
  auto dot = name.find('.');
  c10::OperatorName op = dot == std::string::npos
                             ? c10::OperatorName(name, "")
                             : c10::OperatorName(name.substr(0, dot), name.substr(dot + 1));
  auto handle = c10::Dispatcher::singleton().findOp(op);
  return handle && handle->hasSchema();
}

// What the library registered that it must not: operators torch does not define, operators
// another kernel library already serves. Empty when all is well.
std::string registration_problems(const std::string& path, const std::vector<std::string>& ops,
                                  const std::map<std::string, int>& before) {
  std::ostringstream problems;
  for (const std::string& op : ops) {
    if (!has_schema(op))
      problems << " It registers a kernel for " << op << ", which torch " << TORCH_VERSION_MAJOR
               << "." << TORCH_VERSION_MINOR << " does not define (check the name and overload, "
               << "e.g. \"add.Tensor\").";
    auto owner = g_op_owner.find(op);
    if (owner != g_op_owner.end() && before.count(op))
      problems << " " << op << " is already served on " << backend_name()
               << " by the kernel library '" << owner->second << "'; one operator can have one "
               << "kernel per device: drop it from one of the two libraries.";
  }
  return problems.str();
}

}  // namespace

std::map<std::string, int64_t> native_counts() {
  std::lock_guard<std::mutex> lock(g_native_mutex);
  std::map<std::string, int64_t> out;
  for (const auto& c : g_slots)
    if (int64_t n = c->calls.load(std::memory_order_relaxed)) out[c->key] += n;
  return out;
}

void reset_native_counts() {
  std::lock_guard<std::mutex> lock(g_native_mutex);
  for (auto& c : g_slots) c->calls = 0;
}

void set_checked_mode(bool on) { g_checked = on; }
bool checked_mode() { return g_checked; }

std::vector<std::string> load_kernel_library(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_load_mutex);
  TORCH_CHECK(runtime_loaded(), "torchvendor: register the device before loading kernels.");
  check_versions(path, read_marker(path));
  const auto before = privateuse1_kernels();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  g_called_generation.fetch_add(1, std::memory_order_release);  // see api_kernel_called
  if (handle == nullptr) {
    const char* err = dlerror();
    TORCH_CHECK(false, "torchvendor: cannot load the kernel library '", path, "': ",
                err ? err : "unknown dlopen error");
  }
  const auto after = privateuse1_kernels();
  std::vector<std::string> ops;
  for (const auto& [op, n] : after) {
    auto it = before.find(op);
    if (it == before.end() || it->second < n) ops.push_back(op);
  }
  std::string problems = registration_problems(path, ops, before);
  auto init = reinterpret_cast<tv_kernels_init_fn>(dlsym(handle, TV_KERNELS_INIT_SYMBOL));
  if (problems.empty() && init == nullptr)
    problems = " It does not export `" TV_KERNELS_INIT_SYMBOL "` (torchvendor/kernel_api.h).";
  if (problems.empty()) {
    tv_status s = init(TV_KERNEL_API_MAJOR, kernel_api());
    if (s != TV_SUCCESS)
      problems = " Its " TV_KERNELS_INIT_SYMBOL " returned " + std::to_string(s) + ": " +
                 last_error() + ".";
  }
  if (!problems.empty()) {
    dlclose(handle);  // runs the library's static destructors, which deregister its kernels
    g_called_generation.fetch_add(1, std::memory_order_release);
    // A library the loader cannot unload (GNU-unique symbols, another reference) keeps its
    // kernels: say so rather than claim a clean state.
    const bool clean = privateuse1_kernels() == before;
    TORCH_CHECK_VALUE(false, "torchvendor: the kernel library '", path, "' was not loaded.",
                      problems, clean ? " Nothing it registered stays registered."
                                      : " It could not be unloaded (build it with "
                                        "torchvendor_add_kernel_library, which avoids GNU-unique "
                                        "symbols), so its kernels stay registered: restart the "
                                        "process.");
  }
  for (const std::string& op : ops) {
    g_op_owner[op] = path;
    if (op.rfind("torchvendor::", 0) == 0) register_bridge(op);
  }
  return ops;
}

}  // namespace torchvendor
