"""The eval forward can be captured in a CUDA graph, checked on the CPU.

Capture (torch.cuda.graph, torch.compile's reduce-overhead) fails on a host-to-device copy inside the forward
and on anything that waits for a value on the host (.item(), nonzero, a tensor in an ``if``). On an H200 the
box heads' sample offsets, a CPU constant moved to the device on every call, broke capture (2026-12-04).
Here the model runs on the meta device: a data-dependent host read raises there, and a dispatch mode records
every copy from a CPU tensor onto the meta "device" (what a host-to-device copy is on CUDA).
"""

from __future__ import annotations

import os
import traceback

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from perception.build import build_model
from perception.config import load_config, parse_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class HostToDeviceCopies(TorchDispatchMode):
    """Records the Python stack of every copy of a CPU tensor onto the meta device."""

    def __init__(self):
        super().__init__()
        self.copies: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._to_copy.default:
            source, target = args[0], torch.device(kwargs.get("device") or args[0].device)
        elif func is torch.ops.aten.copy_.default:
            source, target = args[1], args[0].device
        else:
            return func(*args, **kwargs)
        if isinstance(source, torch.Tensor) and source.device.type == "cpu" and target.type == "meta":
            here = [line for line in traceback.format_stack()[:-1] if "/perception/" in line or "/tests/" in line]
            self.copies.append("".join(here[-2:]))
        return func(*args, **kwargs)


def host_to_device_copies(model: nn.Module, input_shape: tuple[int, ...]) -> list[str]:
    model = model.eval().to("meta")
    probe = HostToDeviceCopies()
    with torch.no_grad(), probe:
        model(torch.zeros(input_shape, device="meta"))
    return probe.copies


class MovesAConstant(nn.Module):
    def forward(self, x):
        return x + torch.tensor([1.0]).to(x.device)  # the kind of line that broke capture


def test_the_probe_finds_a_constant_moved_to_the_device_in_the_forward():
    copies = host_to_device_copies(MovesAConstant(), (2, 3))
    assert len(copies) == 1 and "torch.tensor([1.0]).to(x.device)" in copies[0]


@pytest.mark.parametrize("config", ["demo_synthetic.py", "swin_deploy_nuscenes_bdd100k.py"])
def test_the_eval_forward_makes_no_host_to_device_copy_and_reads_no_value_on_the_host(config):
    cfg = parse_config(load_config(os.path.join(ROOT, "configs", config)))
    model = build_model(cfg.model, tuple(cfg.input_size))
    copies = host_to_device_copies(model, (2, 3, *cfg.input_size))  # a host read raises on meta
    assert not copies, f"{len(copies)} host-to-device copies in the forward, first at:\n{copies[0]}"
