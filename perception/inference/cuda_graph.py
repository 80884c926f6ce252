"""The eval camera network captured once in a CUDA graph and replayed: kernel launches and Python, which bound
eager GPU inference at deployment sizes, are gone (bench/gpu_deployment.py: 6 cameras in 6.4 instead of 26 ms
on an H200 in fp16). Capture needs a forward without host-to-device copies or host reads;
tests/test_graph_capture.py checks that on the CPU."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


@torch.no_grad()
def capture_cuda_graph(model: nn.Module, example: torch.Tensor) -> Callable[[torch.Tensor], dict]:
    """``replay(images) -> outputs`` for images of ``example``'s shape, dtype and device: replay copies the images
    into the captured input and returns the captured outputs, which the next replay overwrites (clone to keep)."""
    static_input = example.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up on a side stream, as capture requires
        for _ in range(3):
            model(static_input)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_outputs = model(static_input)
    torch.cuda.synchronize()

    def replay(images: torch.Tensor) -> dict:
        static_input.copy_(images)
        graph.replay()
        return static_outputs

    return replay
