"""Where inference images come from: a folder, a video, or a configured dataset's validation split."""

from __future__ import annotations

import os

import numpy as np
import torch

from perception.data.camera_dataset import ImageReadError, read_image_rgb, to_model_input
from perception.inference.preprocess import prepare_image

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp")


def list_images(directory: str) -> list[str]:
    """Image files of ``directory`` (not recursive), sorted; an error names the folder when there are none."""
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"image folder {directory} does not exist")
    paths = sorted(os.path.join(directory, n) for n in os.listdir(directory) if n.lower().endswith(IMAGE_SUFFIXES))
    if not paths:
        raise FileNotFoundError(f"no {'/'.join(IMAGE_SUFFIXES)} images in {directory}")
    return paths


def folder_inputs(directory: str, input_size: tuple[int, int], count: int) -> torch.Tensor:
    """The first ``count`` images of a folder as normalised network inputs [N,3,H,W]."""
    paths = list_images(directory)[:count]
    return torch.stack([prepare_image(read_image_rgb(p), input_size)[0] for p in paths])


def validation_inputs(cfg, count: int) -> torch.Tensor | None:
    """``count`` images spread over the config's validation split [N,3,H,W], or None when the data is not there."""
    from perception.build import build_datamodule
    from perception.data.tables import DatasetError

    try:
        dataset = build_datamodule(cfg).dataset("val")
    except (DatasetError, FileNotFoundError, ImageReadError, OSError):
        return None
    if len(dataset) == 0:
        return None
    indices = np.linspace(0, len(dataset) - 1, num=min(count, len(dataset))).round().astype(int)
    return to_model_input(torch.stack([dataset[int(i)]["image"] for i in indices]))
