// torchvendor._C: Python bindings of the device layer.
#include <torch/python.h>

PYBIND11_MODULE(_C, m) {
  pybind11::module_::import("torch");  // torch's pybind11 types must exist before ours
  m.doc() = "torchvendor device layer";
}
