"""Builds the cn_clip torch model used by export.py (ONNX) and make_fixtures.py (reference).

Not imported by the Triton models. Both scripts must see the same weights, so the model comes
from here only: a real checkpoint when ``--checkpoint`` is given, otherwise cn_clip's own
``create_model`` initialisation under a fixed seed (no Chinese-CLIP weights can be had offline).
"""

from __future__ import annotations

import contextlib
import io
import math
from pathlib import Path

import torch

DEFAULT_ARCH = "RN50@RBT3-chinese"
DEFAULT_SEED = 0
IMAGE_RESOLUTION = {"RN50": 224, "ViT-B-16": 224, "ViT-L-14": 224, "ViT-L-14-336": 336, "ViT-H-14": 224}
# Released Chinese-CLIP checkpoints all carry logit_scale = ln(100) (training clamps it there).
# The seeded model gets the same value so zero-shot probabilities are not flat.
SEEDED_LOGIT_SCALE = math.log(100.0)


def build_model(arch: str = DEFAULT_ARCH, checkpoint: str | None = None, seed: int = DEFAULT_SEED):
    """The cn_clip ``CLIP`` model in float32 eval mode, seeded or from a checkpoint file."""
    from cn_clip.clip.utils import create_model

    with contextlib.redirect_stdout(io.StringIO()):  # create_model prints its whole config
        if checkpoint:
            state = torch.load(checkpoint, map_location="cpu", weights_only=False)
            if "state_dict" not in state:
                state = {"state_dict": state}
            model = create_model(arch, state)
        else:
            torch.manual_seed(seed)
            model = create_model(arch)
            with torch.no_grad():
                model.logit_scale.fill_(SEEDED_LOGIT_SCALE)
    return model.float().eval()


def image_resolution(arch: str) -> int:
    return IMAGE_RESOLUTION[arch.split("@")[0]]


def weights_identity(model: torch.nn.Module, arch: str, checkpoint: str | None, seed: int):
    """The weights' identity (harness.provenance): sha256 of the tensors this code built or loaded."""
    from harness import provenance

    if checkpoint:
        source = f"checkpoint:{Path(checkpoint).name}"
    else:
        source = f"seeded:cn_clip create_model({arch!r}), torch.manual_seed({seed}), logit_scale ln(100)"
    return provenance.tensors_identity(model.state_dict(), source)


class _Tower(torch.nn.Module):
    """One of the model's encoders (``encode``), its EMBEDDING L2-normalised."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def encode(self, inputs):
        raise NotImplementedError

    def forward(self, inputs):
        features = self.encode(inputs)
        return features / features.norm(dim=-1, keepdim=True)


class ImageTower(_Tower):
    """PIXEL_VALUES [B,3,H,W] -> L2-normalised EMBEDDING [B,D] (cn_clip's ``encode_image`` + norm)."""

    def encode(self, pixel_values):
        return self.model.encode_image(pixel_values)


class TextTower(_Tower):
    """INPUT_IDS [B,L] int64 -> L2-normalised EMBEDDING [B,D] (cn_clip's ``encode_text`` + norm)."""

    def encode(self, input_ids):
        return self.model.encode_text(input_ids)


HERE = Path(__file__).resolve().parent
