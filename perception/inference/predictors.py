"""An exported model behind the PyTorch model's interface: images [B,3,H,W] -> {"<task>.<output>": tensor}."""

from __future__ import annotations

import json
import os

import numpy as np
import torch


class OnnxPredictor:
    """ONNX Runtime session of an exported camera model.

    A fixed-batch graph (the TensorRT deployment form) still takes any number of images: they
    run in chunks of its batch, the last chunk padded with zeros and the padding dropped.
    """

    def __init__(self, path: str, threads: int | None = None, providers: list[str] | None = None,
                 expected_input_size: tuple[int, int] | None = None, expected_tasks: tuple[str, ...] | None = None):
        """``expected_input_size`` (the config's (H, W)): a model exported at another size is an error;
        ``expected_tasks`` (the config's enabled heads): a model whose outputs cover other tasks is an
        error naming both (evaluating it would silently drop a task's metrics)."""
        import onnxruntime as ort

        if not os.path.isfile(path):
            raise FileNotFoundError(f"ONNX model {path} does not exist; write it with tools/export_onnx.py")
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        self.session = ort.InferenceSession(path, options, providers=providers or ["CPUExecutionProvider"])
        (model_input,) = self.session.get_inputs()
        self.input_name = model_input.name
        batch, channels, height, width = model_input.shape
        self.batch = batch if isinstance(batch, int) else None  # None: dynamic batch axis
        self.input_size = (int(height), int(width))
        if expected_input_size is not None and self.input_size != tuple(expected_input_size):
            raise ValueError(f"{path} takes {self.input_size} (H, W) images but the config's input_size is "
                             f"{tuple(expected_input_size)}; use the config the model was exported from")
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.tasks = tuple(sorted({name.split(".", 1)[0] for name in self.output_names}))
        if expected_tasks is not None and set(self.tasks) != set(expected_tasks):
            raise ValueError(f"{path} has outputs for the tasks {list(self.tasks)} but the config enables "
                             f"{sorted(expected_tasks)}; evaluate it with the config it was exported from (its "
                             "sidecar JSON holds that config) or export again with this one")
        sidecar_path = os.path.splitext(path)[0] + ".json"
        self.sidecar = None
        if os.path.isfile(sidecar_path):
            with open(sidecar_path) as f:
                self.sidecar = json.load(f)

    def __call__(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        if tuple(images.shape[-2:]) != self.input_size:
            raise ValueError(f"images are {tuple(images.shape[-2:])} (H, W) but the ONNX model takes "
                             f"{self.input_size}; preprocess with the config the model was exported from")
        array = images.detach().float().cpu().numpy()
        step = self.batch or len(array)
        parts: list[list[np.ndarray]] = []
        for start in range(0, len(array), step):
            chunk = array[start:start + step]
            count = len(chunk)
            if self.batch and count < self.batch:
                chunk = np.concatenate([chunk, np.zeros((self.batch - count, *chunk.shape[1:]), chunk.dtype)])
            parts.append([o[:count] for o in self.session.run(self.output_names, {self.input_name: chunk})])
        return {name: torch.from_numpy(np.concatenate([p[i] for p in parts])) for i, name in
                enumerate(self.output_names)}


class ModulePredictor:
    """A PyTorch camera model on any device behind the same interface as OnnxPredictor: the images go to
    the model's device and the outputs come back to the host, where post-processing and scoring run.
    Evaluation during a GPU training run (held-out scoring, TensorBoard's drawn frames) and ``tools/test.py``
    on a GPU all go through it; on the CPU both copies are no-ops. Floating outputs come back as float32 (a
    half or bf16 model's too): host post-processing is written for float32."""

    def __init__(self, model: torch.nn.Module):
        self.model = model

    @torch.no_grad()
    def __call__(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        device = next(self.model.parameters()).device
        outputs = self.model(images.to(device, non_blocking=True))
        return {name: (value.float() if value.is_floating_point() else value).cpu() for name, value in outputs.items()}


def default_device() -> torch.device:
    """This process's GPU when there is one (under torchrun, the one of its LOCAL_RANK), else the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    return torch.device("cpu")


class TorchPredictor(ModulePredictor):
    """A trained checkpoint in eval mode, on ``device`` (default: ``default_device()``)."""

    def __init__(self, cfg, checkpoint: str, device: str | torch.device | None = None):
        from perception.build import build_model
        from perception.core.checkpoint import load_model_weights

        model = build_model(cfg.model, tuple(cfg.input_size))
        load_model_weights(model, checkpoint)
        super().__init__(model.eval().to(device or default_device()))
        self.input_size = tuple(cfg.input_size)
