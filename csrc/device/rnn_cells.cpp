// The fused LSTM and GRU cells on the device. ATen's recurrent layers call
// _thnn_fused_lstm_cell / _thnn_fused_gru_cell (and their backward) for every device that is not
// the CPU (RNN.cpp: `input.is_cuda() || input.is_xpu() || input.is_privateuseone()`), but only
// CUDA has kernels for them: through the boxed CPU fallback they reached the CPU backend and
// raised "Could not run 'aten::_thnn_fused_lstm_cell' with arguments from the 'CPU' backend", so
// nn.LSTM and nn.GRU failed on every torchvendor device. These kernels compute what CUDA's do —
// the same gate order and the same workspace layout, which their backward reads — with CPU
// tensor ops on host copies, counted as fallbacks like any other (a vendor kernel replaces them).
#include "priced_call.h"
#include "tv_device.h"

#include <ATen/ATen.h>
#include <torch/library.h>

namespace torchvendor {
namespace {

at::Tensor host(const at::Tensor& t) { return t.defined() ? t.cpu() : t; }
at::Tensor back(const at::Tensor& t, const at::Device& d) { return t.defined() ? t.to(d) : t; }

at::Tensor sum_gates(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                     const std::optional<at::Tensor>& input_bias,
                     const std::optional<at::Tensor>& hidden_bias) {
  at::Tensor gates = host(input_gates) + host(hidden_gates);
  if (input_bias && input_bias->defined()) gates = gates + host(*input_bias);
  if (hidden_bias && hidden_bias->defined()) gates = gates + host(*hidden_bias);
  return gates;
}

// (hy, cy, workspace): workspace is the activated gates [i, f, g, o], as CUDA stores them.
std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates, const at::Tensor& cx,
    const std::optional<at::Tensor>& input_bias, const std::optional<at::Tensor>& hidden_bias) {
  count_fallback_op("_thnn_fused_lstm_cell");
  PricedCall priced("_thnn_fused_lstm_cell", {input_gates, hidden_gates, cx});
  auto chunks = sum_gates(input_gates, hidden_gates, input_bias, hidden_bias).chunk(4, 1);
  at::Tensor i = chunks[0].sigmoid(), f = chunks[1].sigmoid(), g = chunks[2].tanh(),
             o = chunks[3].sigmoid();
  at::Tensor cy = f * host(cx) + i * g;
  at::Tensor hy = o * cy.tanh();
  const at::Device d = cx.device();
  return {priced.back(hy.to(d)), priced.back(cy.to(d)), priced.back(at::cat({i, f, g, o}, 1).to(d))};
}

// (grad_gates, grad_cx, grad_bias) from the workspace above.
std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell_backward(
    const std::optional<at::Tensor>& grad_hy, const std::optional<at::Tensor>& grad_cy,
    const at::Tensor& cx, const at::Tensor& cy, const at::Tensor& workspace, bool has_bias) {
  count_fallback_op("_thnn_fused_lstm_cell_backward_impl");
  PricedCall priced("_thnn_fused_lstm_cell_backward_impl", {cx, cy, workspace});
  const at::Device d = cx.device();
  auto gates = host(workspace).chunk(4, 1);
  const at::Tensor &i = gates[0], &f = gates[1], &g = gates[2], &o = gates[3];
  at::Tensor c = host(cx), tanh_cy = host(cy).tanh();
  at::Tensor ghy = grad_hy && grad_hy->defined() ? host(*grad_hy) : at::zeros_like(tanh_cy);
  at::Tensor gcy = grad_cy && grad_cy->defined() ? host(*grad_cy) : at::zeros_like(tanh_cy);
  at::Tensor gc = gcy + ghy * o * (1 - tanh_cy * tanh_cy);
  at::Tensor grad_gates = at::cat({gc * g * i * (1 - i), gc * c * f * (1 - f), gc * i * (1 - g * g),
                                   ghy * tanh_cy * o * (1 - o)}, 1);
  at::Tensor grad_bias = has_bias ? grad_gates.sum(0) : at::Tensor();
  return {priced.back(grad_gates.to(d)), priced.back((gc * f).to(d)), priced.back(back(grad_bias, d))};
}

// (hy, workspace): workspace is [r, z, n, hx, hn] (hn with the hidden bias), as CUDA stores it.
std::tuple<at::Tensor, at::Tensor> gru_cell(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates, const at::Tensor& hx,
    const std::optional<at::Tensor>& input_bias, const std::optional<at::Tensor>& hidden_bias) {
  count_fallback_op("_thnn_fused_gru_cell");
  PricedCall priced("_thnn_fused_gru_cell", {input_gates, hidden_gates, hx});
  at::Tensor ig = host(input_gates), hg = host(hidden_gates);
  if (input_bias && input_bias->defined()) ig = ig + host(*input_bias);
  if (hidden_bias && hidden_bias->defined()) hg = hg + host(*hidden_bias);
  auto ic = ig.chunk(3, 1), hc = hg.chunk(3, 1);
  at::Tensor r = (ic[0] + hc[0]).sigmoid(), z = (ic[1] + hc[1]).sigmoid();
  at::Tensor n = (ic[2] + r * hc[2]).tanh(), h = host(hx);
  at::Tensor hy = n + z * (h - n);
  const at::Device d = hx.device();
  return {priced.back(hy.to(d)), priced.back(at::cat({r, z, n, h, hc[2]}, 1).to(d))};
}

// (grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias)
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  count_fallback_op("_thnn_fused_gru_cell_backward");
  PricedCall priced("_thnn_fused_gru_cell_backward", {grad_hy, workspace});
  const at::Device d = grad_hy.device();
  auto w = host(workspace).chunk(5, 1);
  const at::Tensor &r = w[0], &z = w[1], &n = w[2], &hx = w[3], &hn = w[4];
  at::Tensor go = host(grad_hy);
  at::Tensor gz = go * (hx - n) * (1 - z) * z;
  at::Tensor gn = go * (1 - z) * (1 - n * n);
  at::Tensor gr = gn * hn * (1 - r) * r;
  at::Tensor grad_input = at::cat({gr, gz, gn}, 1), grad_hidden = at::cat({gr, gz, gn * r}, 1);
  at::Tensor gib = has_bias ? grad_input.sum(0) : at::Tensor();
  at::Tensor ghb = has_bias ? grad_hidden.sum(0) : at::Tensor();
  return {priced.back(grad_input.to(d)), priced.back(grad_hidden.to(d)), priced.back((go * z).to(d)),
          priced.back(back(gib, d)), priced.back(back(ghb, d))};
}

}  // namespace

void register_rnn_cell_kernels(torch::Library& m) {
  m.impl("_thnn_fused_lstm_cell", TORCH_FN(lstm_cell));
  m.impl("_thnn_fused_lstm_cell_backward_impl", TORCH_FN(lstm_cell_backward));
  m.impl("_thnn_fused_gru_cell", TORCH_FN(gru_cell));
  m.impl("_thnn_fused_gru_cell_backward", TORCH_FN(gru_cell_backward));
}

}  // namespace torchvendor
