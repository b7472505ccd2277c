"""STAND-IN for ComfyUI's comfy/ldm/modules/attention.py (written for tools/comfyui_real).

ComfyUI picks optimized_attention at start-up from its CLI flags and what is installed; with no
flag on an NVIDIA GPU it is attention_pytorch (torch scaled_dot_product_attention), which this
module reproduces for model.py's call: q, k, v [B, heads, S, dim_head] (skip_reshape=True),
optionally inside AttentionTensorContainer (a single-owner holder; take() hands the tensor
over), no mask, output [B, S, heads * dim_head]. Sage/flash/xformers selection, masks and
transformer_options["optimized_attention_override"] are not stood in for (the harness never
sets an override)."""
import torch
import torch.nn.functional as F


class AttentionTensorContainer:
    def __init__(self, tensor):
        self._tensor = tensor

    def take(self):
        t, self._tensor = self._tensor, None
        if t is None:
            raise RuntimeError("AttentionTensorContainer: tensor already taken")
        return t


def _plain(t):
    return t.take() if isinstance(t, AttentionTensorContainer) else t


def attention_pytorch(q, k, v, heads, mask=None, attn_precision=None, skip_reshape=False,
                      skip_output_reshape=False, transformer_options=None, **kwargs):
    q, k, v = _plain(q), _plain(k), _plain(v)
    if transformer_options and transformer_options.get("optimized_attention_override"):
        raise NotImplementedError("stand-in attention: no optimized_attention_override")
    if skip_reshape:
        b, _, _, dim_head = q.shape
    else:
        b, _, width = q.shape
        dim_head = width // heads
        q, k, v = (t.view(b, -1, heads, dim_head).transpose(1, 2) for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0, is_causal=False)
    if skip_output_reshape:
        return out
    return out.transpose(1, 2).reshape(b, -1, heads * dim_head)


optimized_attention = attention_pytorch
optimized_attention_masked = attention_pytorch
