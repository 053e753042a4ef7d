"""nn.LSTM and nn.GRU on the device: ATen calls the fused cells (``_thnn_fused_lstm_cell``,
``_thnn_fused_gru_cell`` and their backward) off the CPU, which only CUDA implements; the device
layer serves them (csrc/device/rnn_cells.cpp) with CUDA's gate order and workspace layout."""
from __future__ import annotations

import pytest
import torch


@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU])
@pytest.mark.parametrize("bias", [True, False])
def test_recurrent_layers_match_the_cpu_forward_and_backward(acme, cls, bias):
    torch.manual_seed(0)
    cpu = cls(5, 7, num_layers=2, batch_first=True, bias=bias).double()
    dev = cls(5, 7, num_layers=2, batch_first=True, bias=bias).double()
    dev.load_state_dict(cpu.state_dict())
    dev = dev.to("acme")
    x = torch.randn(3, 4, 5, dtype=torch.double, requires_grad=True)
    xd = x.detach().to("acme").requires_grad_()
    acme.reset_fallback_counts()
    out, outd = cpu(x)[0], dev(xd)[0]
    (out * out).sum().backward()
    (outd * outd).sum().backward()
    torch.testing.assert_close(outd.cpu(), out)
    torch.testing.assert_close(xd.grad.cpu(), x.grad)
    for p, q in zip(cpu.parameters(), dev.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad)
    cell = "_thnn_fused_lstm_cell" if cls is torch.nn.LSTM else "_thnn_fused_gru_cell"
    assert acme.fallback_counts().get(cell) == 8  # two layers x four steps, counted as fallbacks
