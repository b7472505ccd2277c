"""STAND-IN for ComfyUI's comfy/model_prefetch.py (written for tools/comfyui_real).

The real module prefetches offloaded blocks ("dynamic vbars", comfy_aimdo). Without
transformer_options["prefetch_dynamic_vbars"] (never set here: the model is resident), the
real make_prefetch_queue returns None and prefetch_queue_pop(None, ...) does nothing; this
stand-in does exactly that and refuses the offload mode."""


def make_prefetch_queue(queue, device, transformer_options):
    if transformer_options.get("prefetch_dynamic_vbars", False):
        raise NotImplementedError("stand-in comfy.model_prefetch: no block offload prefetch")
    return None


def prefetch_queue_pop(queue, device, module):
    if queue is None:
        return
    raise NotImplementedError("stand-in comfy.model_prefetch: no block offload prefetch")
