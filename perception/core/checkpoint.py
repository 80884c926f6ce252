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


def declare_pruned_state(module: nn.Module, keys: tuple[str, ...]) -> None:
    """``module`` no longer has these state-dict entries (key prefixes relative to it), which checkpoints written
    before it dropped them still hold: they are dropped when such a checkpoint loads, and ``check_weights_fit``
    does not count them as unexpected."""
    module.pruned_state_keys = tuple(keys)
    if module.pruned_state_keys:
        module.register_load_state_dict_pre_hook(_drop_pruned_state)


def _drop_pruned_state(module: nn.Module, state_dict: dict, prefix: str, *_) -> None:
    for key in [k for k in state_dict if k.startswith(prefix)]:
        if key[len(prefix):].startswith(module.pruned_state_keys):
            del state_dict[key]


def pruned_keys(model: nn.Module, keys) -> set[str]:
    """The ``keys`` of a checkpoint that modules of ``model`` declared pruned (``declare_pruned_state``)."""
    prefixes = tuple(f"{name}.{key}" if name else key for name, module in model.named_modules()
                     for key in getattr(module, "pruned_state_keys", ()))
    return {k for k in keys if k.startswith(prefixes)} if prefixes else set()


def check_weights_fit(model: nn.Module, weights: dict, path: str) -> None:
    """Raise CheckpointMismatchError listing the tensors of ``weights`` (read from ``path``) that do
    not fit ``model``: missing, unexpected, or of another shape."""
    expected = model.state_dict()
    missing = sorted(set(expected) - set(weights))
    unexpected = sorted(set(weights) - set(expected) - pruned_keys(model, weights))
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
    stale = sorted(pruned_keys(model, weights))
    if stale:  # the optimizer state counts those tensors too, so Lightning could not restore it
        raise CheckpointMismatchError(
            f"--resume checkpoint {path} was written before this version stopped building weights no loss reaches "
            f"({len(stale)}, e.g. {stale[:3]}); its optimizer state does not fit. Its weights load for testing, "
            "export and drawing; to train on, start a new run from them")
