// Floor kernels on the stable ABI (see CMakeLists.txt). Each is registered for an aten operator
// the template does not serve, so all floors and the template run in one process; each takes two
// 16-element float32 device tensors and does a prefix of what a real kernel does:
//   aten::div.Tensor  return `self`                           torch's boxing and dispatch
//   aten::maximum     + allocate with torch::stable::empty    (a dispatcher call by name)
//   aten::minimum     + allocate with aoti_torch_empty_strided (the C shim)
//   aten::atan2       + allocate with the kernel API's empty   (torchvendor/kernel_api.h 1.1)
//   aten::fmax        + stream (stable accelerator API + native_stream) + launch
//   aten::fmin        + stream (kernel API current_stream) + launch: the least a kernel does
// No counting, no checks: these measure costs, they are not kernels to copy.
#include <torchvendor/kernel_api.h>

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include <dlfcn.h>

#include <stdexcept>
#include <string>

TV_KERNEL_LIBRARY(TV_KERNELS_TORCH_TARGET);

namespace {

using torch::stable::Tensor;
const tv_kernel_api* g_api = nullptr;
tv_function g_add[64];

struct FloorArgs { const float* a; const float* b; float* out; int64_t n; };

void check(tv_status s, const char* what) {
  if (s != TV_SUCCESS) throw std::runtime_error(std::string("floor kernels: ") + what + " failed");
}

tv_function add_fn(int32_t device) {
  if (g_add[device]) return g_add[device];
  Dl_info info{};
  dladdr(reinterpret_cast<void*>(&add_fn), &info);
  std::string self = info.dli_fname ? info.dli_fname : "";
  std::string path = self.substr(0, self.rfind('/') + 1) + "libtv_floor_device.so";
  tv_module module = nullptr;
  check(g_api->runtime->module_load_file(device, path.c_str(), &module), "module_load_file");
  check(g_api->runtime->module_get_function(module, "tv_floor_add", &g_add[device]), "get");
  return g_add[device];
}

Tensor ident(Tensor a, Tensor) { return a; }

Tensor alloc_by_name(Tensor a, Tensor) {
  return torch::stable::empty({a.numel()}, torch::headeronly::ScalarType::Float, std::nullopt,
                              torch::stable::Device(torch::headeronly::DeviceType::PrivateUse1,
                                                    a.get_device_index()));
}

Tensor alloc_shim_dev(const Tensor& a, int32_t device) {
  const int64_t n = a.numel(), stride = 1;
  AtenTensorHandle h = nullptr;
  TORCH_ERROR_CODE_CHECK(aoti_torch_empty_strided(1, &n, &stride, aoti_torch_dtype_float32(),
                                                  aoti_torch_device_type_privateuse1(), device, &h));
  return Tensor(h);
}

Tensor alloc_api_dev(const Tensor& a, int32_t device) {
  const int64_t n = a.numel(), stride = 1;
  void* h = nullptr;
  check(g_api->empty_strided(1, &n, &stride, aoti_torch_dtype_float32(), device, &h), "empty");
  return Tensor(static_cast<AtenTensorHandle>(h));
}

Tensor alloc_shim(Tensor a, Tensor) { return alloc_shim_dev(a, a.get_device_index()); }
Tensor alloc_api(Tensor a, Tensor) { return alloc_api_dev(a, a.get_device_index()); }

void launch_add(const Tensor& a, const Tensor& b, Tensor& out, int32_t device, tv_stream s) {
  FloorArgs args{static_cast<const float*>(a.const_data_ptr()),
                 static_cast<const float*>(b.const_data_ptr()),
                 static_cast<float*>(out.mutable_data_ptr()), a.numel()};
  uint32_t offsets[3] = {offsetof(FloorArgs, a), offsetof(FloorArgs, b), offsetof(FloorArgs, out)};
  tv_launch_config config{};
  config.grid[0] = config.grid[1] = config.grid[2] = 1;
  config.block[0] = config.block[1] = config.block[2] = 1;
  config.pointer_offsets = offsets;
  config.num_pointer_offsets = 3;
  check(g_api->runtime->launch(add_fn(device), &config, &args, sizeof args, s), "launch");
}

Tensor launch_stable(Tensor a, Tensor b) {
  const int32_t device = a.get_device_index();
  Tensor out = alloc_shim_dev(a, device);
  tv_stream s = nullptr;
  check(g_api->native_stream(device, torch::stable::accelerator::getCurrentStream(device).id(), &s),
        "native_stream");
  launch_add(a, b, out, device, s);
  return out;
}

Tensor launch_api(Tensor a, Tensor b) {
  const int32_t device = a.get_device_index();
  Tensor out = alloc_api_dev(a, device);
  tv_stream s = nullptr;
  check(g_api->current_stream(device, &s), "current_stream");
  launch_add(a, b, out, device, s);
  return out;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) tv_status torchvendor_kernels_init(
    uint32_t major, const tv_kernel_api* api) {
  if (major != TV_KERNEL_API_MAJOR || api == nullptr || api->abi_minor < 1)
    return TV_ERROR_NOT_SUPPORTED;
  g_api = api;
  return TV_SUCCESS;
}

STABLE_TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("div.Tensor", TORCH_BOX(&ident));
  m.impl("maximum", TORCH_BOX(&alloc_by_name));
  m.impl("minimum", TORCH_BOX(&alloc_shim));
  m.impl("atan2", TORCH_BOX(&alloc_api));
  m.impl("fmax", TORCH_BOX(&launch_stable));
  m.impl("fmin", TORCH_BOX(&launch_api));
}
