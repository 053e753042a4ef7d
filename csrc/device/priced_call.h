// Prices one call that a kernel of the device layer computes on CPU copies, outside the boxed
// fallback (convolution_overrideable, dropout, the fused RNN cells, ...): the bytes of its device
// arguments that go to the host, of its results that come back, and its time, added to
// fallback_costs() like the boxed fallback's calls, so "implement next" prices every fallback.
// Only for TUs that already see ATen (tv_device.h itself stays c10-only).
#pragma once

#include "tv_device.h"

#include <ATen/core/Tensor.h>

#include <chrono>
#include <initializer_list>
#include <string>

namespace torchvendor {

class PricedCall {
 public:
  PricedCall(std::string name, std::initializer_list<at::Tensor> args)
      : name_(std::move(name)), start_(std::chrono::steady_clock::now()) {
    for (const at::Tensor& t : args) to_host_ += bytes(t);
  }
  PricedCall(const PricedCall&) = delete;
  PricedCall& operator=(const PricedCall&) = delete;
  ~PricedCall() {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::steady_clock::now() - start_).count();
    record_cpu_call(name_, to_host_, to_device_, ns);
  }
  // A result on its way back to the device: its bytes are counted; returns it.
  at::Tensor back(at::Tensor t) {
    to_device_ += bytes(t);
    return t;
  }
  static int64_t bytes(const at::Tensor& t) {
    return t.defined() && !t.is_cpu() ? static_cast<int64_t>(t.numel() * t.element_size()) : 0;
  }

 private:
  std::string name_;
  std::chrono::steady_clock::time_point start_;
  int64_t to_host_ = 0, to_device_ = 0;
};

}  // namespace torchvendor
