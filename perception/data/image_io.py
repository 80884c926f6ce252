"""Reading image files so that a damaged file is an error naming it, never a silently grey image.

OpenCV decodes a truncated JPEG "successfully": libjpeg fills the missing rows with grey and
prints "Premature end of JPEG file" without the path. A truncated PNG can decode the same way.
So every file is checked for its format's end marker before it is decoded:

- JPEG: the end-of-image marker (FF D9) must come after the last start-of-scan marker (FF DA).
  Inside entropy-coded data every FF byte is followed by 00 or a restart marker, so FF D9 after
  the last scan is the real end of the image (bytes after it, which some cameras append, are fine).
- PNG: the IEND chunk must be near the end of the file.
Other formats are left to the decoder.

Camera images (``read_camera_image``) that are JPEGs decode with simplejpeg (libjpeg-turbo with its
SIMD paths): bit-identical to OpenCV's output, 2.8x faster at 1600x900 and 1.2x at half size
(bench/data_loading.py); half size is the decoder's DCT-domain scaling either way.
"""

from __future__ import annotations

import os

import cv2
import numpy as np
import simplejpeg

from perception.core.errors import PerceptionError

JPEG_SOI, JPEG_SOS, JPEG_EOI = b"\xff\xd8", b"\xff\xda", b"\xff\xd9"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PNG_TAIL_BYTES = 64  # IEND (12 bytes) plus what a writer may pad after it


class ImageReadError(PerceptionError, RuntimeError):
    """An image or mask file is missing, truncated or not decodable; the message names the file."""


def incomplete_reason(data: bytes) -> str | None:
    """Why ``data`` (a whole image file) is cut short, or None when its format's end marker is there."""
    if data.startswith(JPEG_SOI):
        if data.rfind(JPEG_EOI) <= data.rfind(JPEG_SOS):
            return "truncated JPEG (no end-of-image marker after the last scan)"
    elif data.startswith(PNG_SIGNATURE):
        if b"IEND" not in data[-PNG_TAIL_BYTES:]:
            return "truncated PNG (no IEND chunk at the end)"
    return None


def read_image_file(path: str, flags: int = cv2.IMREAD_COLOR, what: str = "image") -> np.ndarray:
    """``cv2.imread`` that raises ImageReadError naming ``path`` (``what`` says which kind of file)
    when the file is missing, empty, truncated or not decodable."""
    image = cv2.imdecode(np.frombuffer(_read_checked(path, what), np.uint8), flags)
    if image is None:
        raise ImageReadError(f"{what} {path} could not be decoded (corrupt or not an image)")
    return image


def read_camera_image(path: str, half: bool = False, what: str = "camera image") -> np.ndarray:
    """uint8 [H,W,3] **BGR** (OpenCV's order), or [(H+1)//2, (W+1)//2, 3] with ``half``: decoded at half
    resolution in the JPEG decoder's DCT domain, pixel j covering original pixels [2j, 2j+2).
    Errors as ``read_image_file``."""
    data = _read_checked(path, what)
    if data.startswith(JPEG_SOI):
        try:
            height, width = simplejpeg.decode_jpeg_header(data)[:2]
            if half:
                return simplejpeg.decode_jpeg(data, colorspace="BGR", min_width=(width + 1) // 2,
                                              min_height=(height + 1) // 2)
            return simplejpeg.decode_jpeg(data, colorspace="BGR")
        except ValueError:
            pass  # a JPEG flavour libjpeg-turbo's fast path declines (e.g. CMYK): OpenCV below decides
    image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_REDUCED_COLOR_2 if half else cv2.IMREAD_COLOR)
    if image is None:
        raise ImageReadError(f"{what} {path} could not be decoded (corrupt or not an image)")
    return image


def _read_checked(path: str, what: str) -> bytes:
    """The bytes of ``path``; ImageReadError when it is missing, empty or cut short."""
    if not os.path.isfile(path):
        raise ImageReadError(f"{what} {path} does not exist; check data_root and that the dataset is complete")
    with open(path, "rb") as f:
        data = f.read()
    if not data:
        raise ImageReadError(f"{what} {path} is empty (0 bytes); restore it from the dataset archive")
    reason = incomplete_reason(data)
    if reason is not None:
        raise ImageReadError(f"{what} {path} is damaged: {reason}; restore it from the dataset archive")
    return data
