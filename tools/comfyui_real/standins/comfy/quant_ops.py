"""STAND-IN for ComfyUI's comfy/quant_ops.py (written for tools/comfyui_real).

model.py uses comfy.quant_ops.ck: the comfy_kitchen package (its fused RMSNorm + split-half
RoPE). As ComfyUI does without --enable-triton-backend, the triton backend is disabled; the
CUDA backend serves CUDA tensors when its extension loads, the eager backend otherwise (CPU)."""
import comfy_kitchen as ck

try:
    ck.registry.disable("triton")
except Exception:  # a build without that backend
    pass
