"""STAND-IN for ComfyUI's comfy/model_management.py (written for tools/comfyui_real).

The real module manages devices, VRAM states and model loading and imports ComfyUI's CLI
arguments and much else. comfy/ldm/minimax/model.py uses only cast_to, in_training and is_amd:
those are here (inference, no offloading)."""
import torch

from comfy.ops import cast_to  # noqa: F401  (the same helper; ComfyUI's casts likewise)

in_training = False


def is_amd():
    return getattr(torch.version, "hip", None) is not None
