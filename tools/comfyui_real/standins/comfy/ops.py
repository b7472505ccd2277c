"""STAND-IN for ComfyUI's comfy/ops.py (written for tools/comfyui_real, no ComfyUI code).

The real module holds ComfyUI's layer classes (weight casting, low-VRAM offload, quantized
layouts) and pulls in most of ComfyUI. This one keeps only what comfy/ldm/minimax/model.py and
comfy/ldm/common_dit.py use, for unquantized (f32/bf16) weights on one device:
- disable_weight_init.Linear / .RMSNorm: layers without weight init (the model loads or fills
  its weights); Linear casts its weight to the input dtype when they differ (manual_cast);
  RMSNorm is torch's rms_norm with the weight cast to the input dtype;
- linear_input_act(layer, x, "swiglu"): layer(silu(gate) * value), gate = first half of x
  (an unquantized layer takes ComfyUI's eager activation, then the plain linear);
- cast_to, CastBiasWeightContext (only the PDD head bank path uses the latter).
fp8/int8/NVFP4 layers, offloading and LoRA-on-the-fly are not stood in for."""
import contextlib

import torch
import torch.nn.functional as F


def cast_to(weight, dtype=None, device=None, non_blocking=False, copy=False, **_):
    if weight is None:
        return None
    return weight.to(device=device if device is not None else weight.device,
                     dtype=dtype if dtype is not None else weight.dtype,
                     non_blocking=non_blocking, copy=copy)


def cast_to_input(weight, x, **kw):
    return cast_to(weight, dtype=x.dtype, device=x.device, **kw)


class disable_weight_init:
    class Linear(torch.nn.Linear):
        def reset_parameters(self):
            return None

        def forward(self, x):
            w, b = self.weight, self.bias
            if w.dtype != x.dtype:
                w = w.to(x.dtype)
                b = None if b is None else b.to(x.dtype)
            return F.linear(x, w, b)

    class RMSNorm(torch.nn.Module):
        def __init__(self, dim, eps=1e-6, elementwise_affine=True, dtype=None, device=None):
            super().__init__()
            self.eps = eps
            self.normalized_shape = (dim,)
            self.weight = torch.nn.Parameter(torch.empty(dim, dtype=dtype, device=device))

        def forward(self, x):
            return F.rms_norm(x, self.normalized_shape, cast_to_input(self.weight, x), self.eps)


manual_cast = disable_weight_init
Linear = disable_weight_init.Linear
RMSNorm = disable_weight_init.RMSNorm


def _swiglu(x):
    gate, value = x.chunk(2, dim=-1)
    return F.silu(gate) * value


INPUT_ACT_EAGER = {"swiglu": _swiglu}


def linear_input_act(layer, x, input_act, *args, **kwargs):
    if input_act not in INPUT_ACT_EAGER:
        raise ValueError(f"stand-in comfy.ops.linear_input_act: no activation {input_act!r}")
    return layer(INPUT_ACT_EAGER[input_act](x))


@contextlib.contextmanager
def CastBiasWeightContext(layer, x, offloadable=False, **_):
    yield cast_to_input(layer.weight, x), cast_to_input(layer.bias, x)
