// The unboxed counterparts of two floors (floor_stable.cpp), on torch's unstable C++ API: what
// the dispatcher costs without the stable ABI's boxing.
//   aten::hypot               return `self`
//   aten::remainder.Tensor    + allocate with at::empty_strided (dispatched, as the shim does)
#include <ATen/ATen.h>
#include <torch/library.h>

namespace {
at::Tensor ident(const at::Tensor& a, const at::Tensor&) { return a; }
at::Tensor alloc(const at::Tensor& a, const at::Tensor&) {
  return at::empty_strided(a.sizes(), a.strides(), a.options());
}
}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("hypot", TORCH_FN(ident));
  m.impl("remainder.Tensor", TORCH_FN(alloc));
}
