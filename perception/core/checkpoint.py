"""Load model weights from a training checkpoint, with a clear error when they do not fit."""

from __future__ import annotations

import os

import torch
from torch import nn

from perception.core.errors import PerceptionError


class CheckpointMismatchError(PerceptionError, RuntimeError):
    pass


def load_model_weights(model: nn.Module, path: str) -> dict:
    """Load ``model.*`` weights of a Lightning checkpoint (weights_only=True); returns the checkpoint."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    state = checkpoint.get("state_dict", checkpoint)
    weights = model_weights(state) or dict(state)  # a bare state dict of the model also loads
    check_weights_fit(model, weights, path)
    model.load_state_dict(weights)
    return checkpoint


def model_weights(state: dict, prefer_average: bool = True) -> dict:
    """The model's tensors of a Lightning state dict, without the prefix: the moving average of the weights
    (keys ``ema_model.*``, perception.training.ema) when the checkpoint has one and ``prefer_average``, else the
    trained weights (``model.*``)."""
    prefix = "ema_model." if prefer_average and any(k.startswith("ema_model.") for k in state) else "model."
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}


def check_weights_fit(model: nn.Module, weights: dict, path: str) -> None:
    """Raise CheckpointMismatchError listing the tensors of ``weights`` (read from ``path``) that do
    not fit ``model``: missing, unexpected, or of another shape."""
    expected = model.state_dict()
    missing = sorted(set(expected) - set(weights))
    unexpected = sorted(set(weights) - set(expected))
    wrong_shape = sorted(k for k in set(expected) & set(weights) if expected[k].shape != weights[k].shape)
    if missing or unexpected or wrong_shape:
        lines = [f"checkpoint {path} does not fit the model built from this config:"]
        if wrong_shape:
            lines.append("  shape mismatch: " + ", ".join(
                f"{k} {tuple(weights[k].shape)} vs {tuple(expected[k].shape)}" for k in wrong_shape[:5]))
        if missing:
            lines.append(f"  missing from checkpoint ({len(missing)}): {missing[:5]}")
        if unexpected:
            lines.append(f"  not in model ({len(unexpected)}): {unexpected[:5]}")
        lines.append("  Use the config the checkpoint was trained with (saved as config.py in its work dir).")
        raise CheckpointMismatchError("\n".join(lines))


def check_resume_fits(model: nn.Module, path: str) -> None:
    """Before Lightning resumes from ``path``: its ``model.*`` weights must fit ``model`` (a motion
    checkpoint into a camera config, or other head sizes, is a CheckpointMismatchError naming the tensors)."""
    checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    weights = model_weights(checkpoint.get("state_dict", {}) if isinstance(checkpoint, dict) else {},
                            prefer_average=False)
    if not weights:
        raise CheckpointMismatchError(f"--resume checkpoint {path} holds no training state (no model.* weights in "
                                      "its state_dict); resume from a checkpoint written by tools/train.py")
    check_weights_fit(model, weights, path)
