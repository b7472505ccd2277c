"""ComfyUI node "h3rt: run H3 in h3rt": a DIFFUSION_MODEL wrapper that runs MiniMax H3's forward in
h3rt when h3rt computes exactly what ComfyUI's MiniMaxH3Model._forward would, and ComfyUI's own
forward otherwise.

The wrapper sits inside MiniMaxH3Model.forward, so ComfyUI keeps the sampler, sigmas, CFG, text
encoding and the audio carry (payload audio_scale); it receives _forward's arguments
(x = [video, audio], timestep = sigma * 1000, context, transformer_options, minimax_payload=...,
denoise_mask=..., audio_denoise_mask=...) and returns _forward's contract: [video, audio] in the
input layouts and dtypes, with _forward's sign (the negation of h3rt's data-ward velocities).

Imports neither torch nor comfy at module level: the tests run it against stand-ins with numpy.
"""
import functools
import json
import logging
import os
import sys
import warnings

import numpy as np

log = logging.getLogger("h3rt")

WRAPPER_KEY = "h3rt"
DIFFUSION_MODEL = "diffusion_model"  # comfy.patcher_extension.WrappersMP.DIFFUSION_MODEL
# The flow shifts _forward reads from transformer_options (ComfyUI's MiniMaxH3SigmaShift node sets
# them), else from the model's attribute, else H3's 12 and 3: h3rt takes them per call.
SHIFTS = (("minimax_h3_sigma_shift_video", "sigma_shift_video", "video_shift", 12.0),
          ("minimax_h3_sigma_shift_audio", "sigma_shift_audio", "audio_shift", 3.0))


def flow_shifts(options, model):
    """h3rt's video_shift / audio_shift keywords for one _forward call."""
    return {name: float(options.get(key, getattr(model, attr, default)))
            for key, attr, name, default in SHIFTS}


# ComfyUI treats mask values at or above this as "generate everything" (model.py's 1 - 1e-3;
# _forward gives masked rows per-row timesteps, video per 2x2 patch from the patch's maximum:
# h3rt's forward_conditioned(video_mask=, audio_mask=) computes the same).
MASK_FULL = 1.0 - 1e-3
# The minimax_payload keys _forward reads, as ComfyUI's model_base.MiniMaxH3.extra_conds builds
# them (plus _forward's own cache of the tags), and those of its keyframes and reference blocks.
# A payload with other keys comes from a ComfyUI (or a custom node) whose _forward means more
# than h3rt computes: such calls run ComfyUI's forward rather than silently differ. frame_count
# (ComfyUI versions whose PackedLayout anchors a last-frame keyframe by it) acts through the
# layout alone, which is checked against h3rt's.
PAYLOAD_KEYS = {"layout", "keyframes", "refs", "text_token_tags", "_text_token_tags_list",
                "cond_video_latents", "cond_audio_latents", "visual_cond_noise_aug",
                "audio_cond_noise_aug", "seed", "audio_scale", "frame_count"}
ITEM_KEYS = {"keyframes": {"resolved_frame_index", "latent", "audio_latent"},
             "refs": {"kind", "picture_index", "latent_t", "latent_h", "latent_w", "ref_audio_t",
                      "latent", "audio_latent"}}


class Fallback(Exception):
    """This call is not one h3rt computes identically: run ComfyUI's forward (the reason is logged
    once per distinct reason)."""


class WeightsFallback(Fallback):
    """The loaded model's weights cannot go to h3rt as they are: every call runs ComfyUI's
    forward until they change (decided once, logged once)."""


def _import_h3rt():
    try:
        import h3rt  # noqa: F401
        return h3rt
    except ImportError as e:
        raise Fallback(f"the h3rt package is not importable ({e})") from None


# ---- arrays: torch tensors in ComfyUI, numpy arrays in the tests ----
def _is_torch(t):
    return hasattr(t, "detach") and hasattr(t, "device")


def _host_f32(t):
    """A float32 host numpy array of t (for a CPU engine, and the host-side scalars)."""
    if _is_torch(t):
        return t.detach().float().cpu().contiguous().numpy()
    return np.ascontiguousarray(t, dtype=np.float32)


def _comfy_layout(model, payload, x, context):
    """The PackedLayout _forward would use for this call: the payload's prebuilt one where its
    signature matches the call, else one built by the model's own module (so a custom node that
    replaced PackedLayout there is seen); None where the model has none (stand-ins)."""
    video, audio = x[0], x[1]
    sig = tuple(int(n) for n in (context.shape[1], *video.shape[2:5], audio.shape[-1]))
    layout = payload.get("layout")
    if layout is not None and tuple(getattr(layout, "signature", ())) == sig:
        return layout
    packed = getattr(sys.modules.get(type(model).__module__), "PackedLayout", None)
    if packed is None:
        return None
    extra = {"frame_count": payload["frame_count"]} if "frame_count" in payload else {}
    return packed(*sig, keyframes=payload.get("keyframes"), refs=payload.get("refs"), **extra)


def _expected_layout(layout):
    """forward_conditioned's expect_layout for a PackedLayout (its segments and float64
    position_ids), or None for an object without them."""
    if layout is None or not hasattr(layout, "position_ids"):
        return None
    pos = layout.position_ids
    pos = pos.detach().cpu().numpy() if _is_torch(pos) else np.asarray(pos, np.float64)
    return {"segments": [(int(a), int(b), str(k)) for a, b, k in layout.segments],
            "position_ids": np.ascontiguousarray(pos, dtype=np.float64)}


def _like(a, ref):
    """numpy float32 a as ref's type, dtype and device."""
    if _is_torch(ref):
        import torch
        return torch.from_numpy(a).to(device=ref.device, dtype=ref.dtype)
    return a.astype(np.asarray(ref).dtype, copy=False)


def _on_device(t):
    return _is_torch(t) and t.device.type != "cpu"


def _device_result(v, ref):
    """A device forward's float32 CUDA velocity as _forward returns it: negated in place, in
    ref's dtype (one device cast when ref is not float32), on the device."""
    v = v.neg_()
    return v if v.dtype == ref.dtype else v.to(dtype=ref.dtype)


def _same_values(a, b):
    """Whether a and b (same shape, dtype and device) hold the same values; CUDA tensors compare
    on the device (one bool read). NaN never equals itself: such a context is copied again."""
    if type(a).__module__.startswith("torch"):
        import torch
        return torch.equal(a, b)
    return np.array_equal(a, b)  # the tests' stand-ins


class HostText:
    """Host copies of the last CUDA contexts. h3rt's API reads the text on the host (its forward
    compares it with the text it refined last and reruns the refiner only when it changed), so a
    CUDA context was copied device -> host in full on every call. ComfyUI rebuilds the context
    tensor every step with unchanged values, and CFG alternates cond and uncond: an entry per
    distinct context (`size` of them, the most recent kept) is compared by value on the device
    and its host copy reused."""

    def __init__(self, size=2):
        self.size, self.entries, self.copies = size, [], 0  # entries: (kept tensor, host f32)

    def get(self, context):
        for i, (kept, host) in enumerate(self.entries):
            if (kept.shape == context.shape and kept.dtype == context.dtype
                    and getattr(kept, "device", None) == getattr(context, "device", None)
                    and _same_values(kept, context)):
                self.entries.insert(0, self.entries.pop(i))
                return host
        host = _host_f32(context)
        self.copies += 1
        kept = context.detach().clone()
        self.entries = [(kept, host)] + self.entries[:self.size - 1]
        return host


def _weight_for_h3rt(key, t, device):
    """An array h3rt.load can view: torch tensors go in through DLPack as stored (bf16, int8,
    u8, float8_e4m3fn, ...), CPU ones without a copy. For a CUDA engine, int8/uint8/fp8 and 2-D
    bf16 '.weight' device tensors (quantized weight bytes, bf16 linear weights) stay where they
    are (h3rt uses them in place, or warns naming the few it copies); other device tensors are
    copied to the host."""
    if _is_torch(t):
        t = t.detach()
        dtype = str(t.dtype)
        keep = (device == "cuda" and key.endswith(".weight")
                and (dtype in ("torch.int8", "torch.uint8", "torch.float8_e4m3fn")
                     or (dtype == "torch.bfloat16" and t.dim() == 2)))
        if t.device.type != "cpu" and not keep:
            t = t.cpu()
        return t.contiguous()
    return np.ascontiguousarray(t)


def _u8_text(t):
    """A comfy_quant marker (uint8 tensor or array of JSON bytes) as text."""
    a = t.detach().cpu().numpy() if _is_torch(t) else np.asarray(t)
    return bytes(a.astype(np.uint8).reshape(-1)).decode("utf-8")


def restore_quant_params(model, state):
    """ComfyUI's state_dict() writes a quantized layer's comfy_quant as {"format": ...} alone
    (comfy/ops.py); an int8 layer's Hadamard rotation (convrot, convrot_groupsize) is kept only
    in its weight's layout parameters (comfy-kitchen's QuantizedTensor._params). Without it h3rt
    would read the rotated weights of an int8_convrot checkpoint as plain tensorwise int8 and
    compute something else. Returns state with each int8 layer's marker completed from its
    weight, as the checkpoint file held it; WeightsFallback where that cannot be read, or where a
    quantized weight is held transposed (its stored bytes are then [in, out])."""
    modules = dict(model.named_modules()) if hasattr(model, "named_modules") else {}
    out = dict(state)
    for key in [k for k in state if k.endswith(".comfy_quant")]:
        conf = json.loads(_u8_text(state[key]))
        nested = conf.get("params") if isinstance(conf.get("params"), dict) else {}
        fmt = str(conf.get("format", nested.get("format", "")))
        name = key[: -len(".comfy_quant")]
        params = getattr(getattr(modules.get(name), "weight", None), "_params", None)
        if getattr(params, "transposed", False):
            raise WeightsFallback(f"{fmt} layer '{name}' is held transposed")
        if not fmt.startswith("int8"):
            continue
        if params is None:
            if "convrot" in conf or "convrot" in nested:  # the marker already says it
                continue
            raise WeightsFallback(f"int8 layer '{name}': its rotation (convrot) cannot be read "
                                  "from the loaded model (use weights: from file path)")
        full = {k: v for k, v in conf.items() if k not in ("convrot", "convrot_groupsize")}
        full["convrot"] = bool(getattr(params, "convrot", False))
        if full["convrot"]:
            full["convrot_groupsize"] = int(params.convrot_groupsize)
        out[key] = np.frombuffer(json.dumps(full).encode("utf-8"), np.uint8).copy()
    return out


def _min_value(m):
    if _is_torch(m):
        return float(m.detach().float().min().item())
    return float(np.min(m))


# ---- the conditioning payload (comfy/model_base.py MiniMaxH3.extra_conds builds it) ----
def comfy_noise(shape, seed):
    """The augmentation noise ComfyUI's _forward draws for one condition: torch.randn of the
    condition's row shape from a CPU generator seeded with `seed`, restarted per condition."""
    try:
        import torch
    except ImportError:
        raise Fallback("torch is needed to draw ComfyUI's condition noise") from None
    g = torch.Generator("cpu").manual_seed(int(seed))
    return torch.randn(tuple(shape), generator=g).numpy()


def _rows_shape(latent, video):
    """Row shape of a condition latent: video [1, C, vt, h, w] -> [vt*(h/2)*(w/2), 4C],
    audio [1, C, 2, rt] -> [2*rt, C]."""
    s = latent.shape
    return (s[2] * (s[3] // 2) * (s[4] // 2), 4 * s[1]) if video else (2 * s[3], s[1])


def _cond_item(src, aug_v, aug_a, seed, kind=None):
    d = {} if kind is None else {"kind": kind}
    for key, noise_key, video, aug, s in (("latent", "noise", True, aug_v, seed),
                                          ("audio_latent", "audio_noise", False, aug_a, seed + 1)):
        lat = src.get(key)
        if lat is None:
            continue
        d[key] = _host_f32(lat)
        if aug < 1.0:
            d[noise_key] = comfy_noise(_rows_shape(d[key], video), s)
    return d


def _partial(mask):
    """A denoise mask as _forward reads it (mask[0, 0]: [T, H, W] video, [2, N] audio), or None
    when it generates everything (every value at or above MASK_FULL)."""
    if mask is None or _min_value(mask) >= MASK_FULL:
        return None
    return _host_f32(mask[0, 0])


def _check_payload_keys(payload):
    unknown = sorted(set(payload) - PAYLOAD_KEYS)
    if unknown:
        raise Fallback(f"minimax_payload has keys h3rt does not compute: {unknown}")
    for field, known in ITEM_KEYS.items():
        for i, item in enumerate(payload.get(field) or ()):
            extra = sorted(set(item) - known)
            if extra:
                raise Fallback(f"minimax_payload {field}[{i}] has keys h3rt does not compute: "
                               f"{extra}")


def _conditioning(payload, kwargs):
    """forward_conditioned's keywords for this call. Every call takes that route, plain t2va
    included, so that all calls share _forward's layout and timestep arithmetic as the golden
    set's ComfyUI has it (t_audio = float32(1 - the mapped sigma in float64); forward_latents
    rounds the audio sigma first, one ulp apart at 224 of the sigmas k/1000). ComfyUI 2d2a8ae7
    maps the sigma in float32 tensor ops instead (one ulp off float64 at 308 of them):
    bench/RESULTS.md, session 31."""
    tags = payload.get("text_token_tags")
    vmask = _partial(kwargs.get("denoise_mask"))
    amask = _partial(kwargs.get("audio_denoise_mask"))
    keyframes, refs = payload.get("keyframes") or (), payload.get("refs") or ()
    aug_v = float(payload.get("visual_cond_noise_aug", 0.999))
    aug_a = float(payload.get("audio_cond_noise_aug", 1.0))
    seed = int(payload.get("seed", 0))
    cond = {"keyframes": [dict(frame_index=int(k["resolved_frame_index"]),
                               **_cond_item(k, aug_v, aug_a, seed)) for k in keyframes],
            "refs": [_cond_item(r, aug_v, aug_a, seed, r["kind"]) for r in refs],
            "visual_cond_noise_aug": aug_v, "audio_cond_noise_aug": aug_a, "noise_seed": seed}
    if tags is not None:
        cond["text_tags"] = np.asarray(tags.cpu() if _is_torch(tags) else tags, np.int64)
    if vmask is not None:
        cond["video_mask"] = vmask
    if amask is not None:
        cond["audio_mask"] = amask
    return cond


def _lora_adapter_weights(v):
    """(up, down, alpha, mid, dora_scale, reshape) of a ComfyUI LoRA patch: a weight adapter
    whose name is "lora" (comfy.weight_adapter) or the older ("lora", weights) tuple; else
    None."""
    if getattr(v, "name", None) == "lora" and hasattr(v, "weights"):
        return tuple(v.weights)
    if isinstance(v, tuple) and len(v) == 2 and v[0] == "lora":
        return tuple(v[1])
    return None


def _alpha_value(a):
    return float(a.item() if hasattr(a, "item") else a)


def lowvram_patches(diffusion_model):
    """ComfyUI's low-VRAM patches, which it applies to each layer's weight as the layer runs
    (comfy.model_patcher.LowVramPatch in the module's weight_function: the weight key and the
    patcher's patches dict), as (key, patch list) pairs; Fallback for bias patches and weight
    functions of another kind."""
    modules = getattr(diffusion_model, "modules", None)
    if modules is None:
        raise Fallback("low-VRAM LoRA patches, but the model has no modules() to read them from")
    out = []
    for m in modules():
        if _weight_functions(m, "bias_function"):
            raise Fallback("a low-VRAM patch of a bias (h3rt merges LoRA weight pairs only)")
        for f in _weight_functions(m, "weight_function"):
            key, patches = getattr(f, "key", None), getattr(f, "patches", None)
            if not isinstance(key, str) or patches is None or key not in patches:
                raise Fallback(f"a low-VRAM weight function h3rt cannot read ({type(f).__name__})")
            out.append((key, patches[key]))
    return out


def lora_patch_tensors(patches, rows):
    """ComfyUI weight patches [(key, patch list)] (a ModelPatcher's patches, or low-VRAM ones)
    as h3rt.load's loras: [(mapping of LoRA key -> tensor, 1.0)]. rows(key): the output rows of
    the layer a key names. A layer's k-th patch goes to a mapping after its (k-1)-th one's, so
    each layer's patches merge in ComfyUI's order. A patch's strength goes into its alpha
    (float32; no alpha: strength x rank, ComfyUI's scale of 1). A patch of a row range
    (ComfyUI's offset on dim 0, e.g. a to_q LoRA on a fused qkv) becomes a pair over all rows,
    zero outside the range. Fallback names the first patch that is not a LoRA pair (DoRA, LoCon
    mid, strength_model, a function, a column offset, a bias, another adapter kind)."""
    slots = []  # mappings, in merge order
    for key, patch_list in patches:
        if not key.endswith(".weight"):
            raise Fallback(f"weight patch of '{key}': not a .weight (h3rt merges LoRA weight "
                           "pairs only)")
        module = key[: -len(".weight")]
        last = -1  # the slot of this layer's previous patch
        for i, p in enumerate(patch_list):
            up, down, alpha = _plain_lora(key, i, p, rows)
            scale = float(p[0]) * (_alpha_value(alpha) if alpha is not None else down.shape[0])
            last = next((j for j in range(last + 1, len(slots))
                         if module + ".lora_up.weight" not in slots[j]), len(slots))
            if last == len(slots):
                slots.append({})
            slots[last].update({module + ".lora_up.weight": up,
                                module + ".lora_down.weight": down,
                                module + ".alpha": np.array([scale], np.float32)})
    return [(m, 1.0) for m in slots]


def _weight_functions(module, name):
    """A module's weight_function / bias_function as a list: ComfyUI sets a list of callables
    (older versions: one callable, or None)."""
    f = getattr(module, name, None)
    if f is None:
        return []
    return list(f) if isinstance(f, (list, tuple)) else [f]


def _plain_lora(key, i, p, rows):
    """(up over all rows, down, alpha) of patch i of a layer, or Fallback naming what h3rt does
    not merge."""
    what = f"patch {i} of '{key}'"
    if not isinstance(p, (tuple, list)) or len(p) < 2:
        raise Fallback(f"{what}: not a (strength, adapter, ...) entry")
    strength_model = p[2] if len(p) > 2 else 1.0
    offset = p[3] if len(p) > 3 else None
    function = p[4] if len(p) > 4 else None
    if strength_model != 1.0 or function is not None:
        raise Fallback(f"{what}: strength_model or function set (h3rt merges LoRA pairs)")
    w = _lora_adapter_weights(p[1])
    if w is None:
        raise Fallback(f"{what}: a {type(p[1]).__name__} adapter (h3rt merges LoRA pairs only)")
    up, down, alpha = w[0], w[1], w[2] if len(w) > 2 else None
    if any(x is not None for x in w[3:6]):
        raise Fallback(f"{what}: LoCon mid, DoRA or reshape (h3rt merges plain LoRA pairs)")
    if len(getattr(up, "shape", ())) != 2 or len(getattr(down, "shape", ())) != 2:
        raise Fallback(f"{what}: up/down are not matrices")
    if offset is not None:
        up = _rows_in(up, offset, rows(key), what)
    return up, down, alpha


def _rows_in(up, offset, total, what):
    """up [size, rank] of rows offset = (0, start, size) placed in a zero [total, rank]."""
    dim, start, size = offset
    if dim != 0 or total is None or start < 0 or start + size > total or up.shape[0] != size:
        raise Fallback(f"{what}: offset {tuple(offset)} is not a row range of the layer "
                       f"({total} rows; h3rt merges row ranges only)")
    out = up.new_zeros((total, up.shape[1])) if hasattr(up, "new_zeros") else \
        np.zeros((total, up.shape[1]), up.dtype)
    out[start:start + size] = up
    return out


# The self-test's verdict per CUDA device index, once per process: None (fit) or why not.
_SELFTESTS = {}


def _cuda_capability():
    """(torch's current CUDA device index, its compute capability) or (None, None)."""
    try:
        import torch
        if torch.cuda.is_available():
            return torch.cuda.current_device(), tuple(torch.cuda.get_device_capability())
    except Exception:  # no torch, or no usable CUDA: nothing to check
        pass
    return None, None


def _run_selftest():
    return _import_h3rt().selftest()


def _build_line():
    """`h3rt --version` on one line (version, CUDA archs, toolkit, driver, int8 GEMM paths): what
    a report of a failure needs; or why h3rt is not importable."""
    try:
        return _import_h3rt().build_info()["summary"].replace("\n", "; ")
    except Fallback as e:
        return str(e)


def selftest_verdict():
    """None when h3rt's GPU kernels may run on torch's current GPU, else why not. h3rt's own GPU
    test suite has run on sm_90 only; on another arch (Blackwell: sm_100/120/121) h3rt.selftest()
    checks its kernels against the CPU reference once per process and device (about 15 s on an
    H100 host) before the first CUDA engine, and a failure sends every call to ComfyUI's
    forward."""
    index, cc = _cuda_capability()
    if cc is None or cc == (9, 0):
        return None
    if index not in _SELFTESTS:
        log.info("h3rt: checking its GPU kernels on this sm_%d%d GPU once (h3rt.selftest)", *cc)
        try:
            r = _run_selftest()
        except Exception as e:
            why = f"h3rt.selftest raised {type(e).__name__}: {e}"
        else:
            failed = [f"{c['name']}: {c['detail']}" for c in r["cases"]
                      if c["result"] == "failed"]
            why = None if r["passed"] else (
                f"h3rt's self-test failed on {r['device']} (seed {r['seed']}): "
                + "; ".join(failed[:2] or ["no case ran"])
                + "; h3rt's GPU results would not be trusted here (please report it with: "
                + _build_line() + ")")
        if why:
            log.warning("h3rt: %s", why)
        else:
            log.info("h3rt: self-test passed (%d cases)", len(r["cases"]))
        _SELFTESTS[index] = why
    return _SELFTESTS[index]


def engine_attention(attention, device):
    """The attention h3rt runs: Sage is GPU-only, so the CPU engine (the float reference) runs
    bf16 whatever the node says."""
    return attention if device == "cuda" else "bf16"


class H3rtWrapper:
    """The DIFFUSION_MODEL wrapper, one per patched model; ComfyUI's clones of that model share it
    (and its engine). Called as wrapper(executor, x, timestep, context, transformer_options, **kw)
    by ComfyUI's WrapperExecutor."""

    def __init__(self, base_model=None, attention="sage", cuda_graphs=True, device="cuda",
                 weights="from the loaded model", checkpoint_path="", load=None, loras=(),
                 device_memory_limit=""):
        self.base_model = base_model  # comfy's BaseModel: current_weight_patches_uuid, lowvram
        self.attention, self.cuda_graphs, self.device = attention, bool(cuda_graphs), device
        self.weights, self.checkpoint_path = weights, checkpoint_path
        self.loras = tuple(loras)  # (path, strength) that h3rt merges itself
        # h3rt.load's device_memory_limit ("24GB"; "" none): over it the blocks stream from
        # host memory (pinned copies, or the mapped file's pages when host memory is short:
        # weight_stream_source "auto"). Weights h3rt takes from ComfyUI's CUDA tensors cannot
        # stream.
        self.device_memory_limit = str(device_memory_limit or "").strip()
        self.load = load  # h3rt.load unless given (the tests pass stand-in engines)
        # The patched model's weight patches at patch time, [(key, patch list)]: file path mode
        # merges them (LoRA pairs) into the file's weights.
        self.file_patches = []
        self.engine = None
        self.engine_key = None
        self.host_text = HostText()  # a CUDA engine's text, copied once per distinct context
        # ComfyUI's layouts checked against h3rt's: id -> (layout, None or why they differ)
        self.layouts = {}
        self.logged = set()
        self.calls = {"h3rt": 0, "comfyui": 0}

    # ComfyUI versions that keep wrappers in model_options deep-copy them on clone: share instead
    # (the engine holds the weights; a copy would load them again).
    def __deepcopy__(self, memo):
        return self

    def _once(self, level, msg):
        if msg not in self.logged:
            self.logged.add(msg)
            log.log(level, "h3rt: %s", msg)

    def __call__(self, executor, x, timestep, context, transformer_options=None, *args, **kwargs):
        transformer_options = transformer_options if transformer_options is not None else {}
        try:
            out = self._run(executor, x, timestep, context, transformer_options, kwargs)
            self.calls["h3rt"] += 1
            return out
        except Fallback as e:
            self._once(logging.INFO, f"running ComfyUI's forward: {e}")
        except Exception as e:  # h3rt failed at call time: never leave the user without a result
            self._once(logging.WARNING,
                       f"h3rt raised {type(e).__name__}: {e}; running ComfyUI's forward")
        self.calls["comfyui"] += 1
        return executor(x, timestep, context, transformer_options, *args, **kwargs)

    # ---- the decision: call checks first (no weights loaded for calls that fall back), then
    # the ones that need the checkpoint's config ----
    def _check_call(self, executor, x, context, options, kwargs):
        video, audio = x[0], x[1]
        if len(video.shape) != 5 or len(audio.shape) != 4:
            raise Fallback("latents are not [B,24,T,H,W] video and [B,32,2,N] audio")
        if video.shape[0] != 1 or audio.shape[0] != 1 or context.shape[0] != 1:
            raise Fallback("batch size > 1")
        if video.shape[3] % 2 or video.shape[4] % 2:
            raise Fallback("odd latent height or width (ComfyUI pads; h3rt's API takes even sizes)")
        hidden = getattr(getattr(executor, "class_obj", None), "hidden_size", None)
        if hidden is not None and context.shape[-1] == hidden:
            self._refined(hidden)
        payload = kwargs.get("minimax_payload") or {}
        _check_payload_keys(payload)
        conds = len(payload.get("keyframes") or ()) + len(payload.get("refs") or ())
        for key in ("cond_video_latents", "cond_audio_latents"):
            if payload.get(key) and not conds:
                raise Fallback(f"payload '{key}' without keyframes or refs")
        layout = payload.get("layout")
        kinds = {s[2] for s in getattr(layout, "segments", ())}
        if not conds and kinds - {"text", "audio", "video"}:
            raise Fallback(f"payload layout has {sorted(kinds - {'text', 'audio', 'video'})} rows "
                           "but no keyframes or refs")
        for key, rank in (("denoise_mask", 5), ("audio_denoise_mask", 4)):
            m = kwargs.get(key)
            if m is not None and len(m.shape) != rank:
                raise Fallback(f"{key} of shape {tuple(m.shape)} (_forward reads [1, 1, ...] "
                               f"of a {rank}-D mask)")
        if (options.get("patches_replace") or {}).get("dit"):
            raise Fallback("a patches_replace['dit'] block patch is set (h3rt would skip it)")
        if options.get("optimized_attention_override") is not None:
            raise Fallback("an attention override is set (h3rt would skip it)")
        wrappers = getattr(executor, "wrappers", [])
        if getattr(executor, "idx", 0) + 1 < len(wrappers):
            # Outer wrappers already ran around this call; inner ones would never run.
            raise Fallback("another DIFFUSION_MODEL wrapper runs inside this one (h3rt would "
                           "skip it)")

    @staticmethod
    def _refined(hidden):
        # extra_conds already ran condition_proj + the token refiner; h3rt refines itself.
        raise Fallback(f"context is refined text states (width {hidden} = hidden); set "
                       "refine_text to 'in h3rt' on the node")

    def _check_config(self, x, context, options, config):
        video, audio = x[0], x[1]
        if video.shape[1] != config["in_channels"] or audio.shape[1] != config["audio_channels"]:
            raise Fallback("latent channels differ from the checkpoint's")
        width = context.shape[-1]
        if width == config["hidden"]:
            self._refined(width)
        if width != config["text_dim"]:
            raise Fallback(f"context width {width} is neither text_dim {config['text_dim']} "
                           f"nor hidden {config['hidden']}")
        if config["pdd_heads"] > 1 and options.get("sample_sigmas") is None:
            raise Fallback("a PDD head bank needs transformer_options['sample_sigmas']")

    def _run(self, executor, x, timestep, context, options, kwargs):
        if not isinstance(x, (list, tuple)) or len(x) != 2:
            raise Fallback("x is not [video, audio]")
        self._check_call(executor, x, context, options, kwargs)
        engine = self._engine(executor)
        config = engine.config
        self._check_config(x, context, options, config)
        video, audio = x[0], x[1]
        # A CUDA engine takes ComfyUI's CUDA latents as they are (any dtype/strides h3rt reads:
        # float32 or bfloat16), on torch's current stream; the results stay on the device.
        on_device = _on_device(video) and _on_device(audio) and engine.device != "cpu"
        if _on_device(video) and not on_device:
            self._once(logging.INFO, "latents and text are copied device -> host -> device each "
                       "call (the h3rt engine runs on the CPU)")
        # _forward: sigma_v = float32(timestep / 1000) clamped at 1e-6.
        ts = _host_f32(timestep).reshape(-1)[0]
        sigma = float(max(np.float32(ts) / np.float32(1000.0), np.float32(1e-6)))
        sample_sigmas = None
        if config["pdd_heads"] > 1:
            sample_sigmas = [float(s) for s in _host_f32(options["sample_sigmas"]).reshape(-1)]
        payload = kwargs.get("minimax_payload") or {}
        # A layout already found to differ decides before any copy or noise draw below.
        layout = _comfy_layout(getattr(executor, "class_obj", None), payload, x, context)
        checked = self.layouts.get(id(layout))
        if checked is not None and checked[0] is layout and checked[1]:
            raise Fallback(checked[1])
        expect = None if checked is not None and checked[0] is layout else _expected_layout(layout)
        cond = _conditioning(payload, kwargs)
        shifts = flow_shifts(options, getattr(executor, "class_obj", None))
        if on_device:  # text: h3rt reads it on the host; an unchanged context is not recopied
            text = self.host_text.get(context) if _on_device(context) else _host_f32(context)
            args = (video, audio, sigma, text, sample_sigmas)
        else:
            args = (_host_f32(video), _host_f32(audio), sigma, _host_f32(context), sample_sigmas)
        # _forward's output: forward() around this wrapper applies the masks and the carry.
        try:
            vel_v, vel_a = engine.forward_conditioned(*args, mask_outputs=False,
                                                      expect_layout=expect, **shifts, **cond)
        except ValueError as e:
            if expect is None or not str(e).startswith("expect_layout differs"):
                raise
            why = str(e).split(": ", 1)[1]
            self._remember_layout(layout, f"ComfyUI's packed layout differs from h3rt's: {why}")
            raise Fallback(self.layouts[id(layout)][1]) from None
        if expect is not None:
            self._remember_layout(layout, None)
        # h3rt: data-ward (x0 = x + sigma v); _forward returns -v.
        if on_device:
            return [_device_result(vel_v, video), _device_result(vel_a, audio)]
        return [_like(np.negative(vel_v), video), _like(np.negative(vel_a), audio)]

    def _remember_layout(self, layout, why):
        if len(self.layouts) >= 8:  # one or two per sampling run; keep the table small
            self.layouts.clear()
        self.layouts[id(layout)] = (layout, why)

    # ---- the engine ----
    def _weights_key(self, diffusion_model):
        base = self.base_model
        return (id(diffusion_model), getattr(base, "current_weight_patches_uuid", None))

    def _engine(self, executor):
        if self.weights == "from file path":
            key = ("path", self.checkpoint_path, self.loras, self.device_memory_limit)
        else:
            dm = getattr(executor, "class_obj", None)
            if dm is None or not hasattr(dm, "state_dict"):
                raise Fallback("the executor carries no diffusion model")
            key = self._weights_key(dm) + (self.loras, self.device_memory_limit)
        if self.engine is not None and key == self.engine_key:
            return self.engine
        if self.engine_key == ("failed",) + key:
            raise Fallback("h3rt could not load these weights (logged above)")
        why = selftest_verdict() if self.device == "cuda" else None
        if why:
            raise Fallback(why)
        self.engine = None  # drop the old weights before loading new ones
        load = self.load or _import_h3rt().load
        try:
            with warnings.catch_warnings():
                # h3rt.load's "run h3rt selftest" note: selftest_verdict above ran it.
                warnings.filterwarnings("ignore", message="h3rt: h3rt's GPU test suite has run")
                self.engine = self._load(load, executor, key)
        except WeightsFallback as e:
            self.engine_key = ("failed",) + key
            self._once(logging.WARNING, f"h3rt cannot take these weights: {e}")
            raise Fallback("h3rt could not load these weights (logged above)") from None
        except Fallback:
            raise
        except Exception as e:
            self.engine_key = ("failed",) + key
            self._once(logging.WARNING, f"h3rt.load failed: {type(e).__name__}: {e}")
            raise Fallback("h3rt could not load these weights (logged above)") from None
        self.engine_key = key
        return self.engine

    def _patch_loras(self, patches, state, what):
        """patches() -> [(key, patch list)] as h3rt.load's loras (lora_patch_tensors); state():
        the model's state dict (the layers' rows, for row-range patches). Patches h3rt cannot
        merge: WeightsFallback (decided once per weights)."""
        state = functools.cache(state)  # read once, and only for row-range patches

        def rows(key):
            t = state().get(key[len("diffusion_model."):] if key.startswith("diffusion_model.")
                            else key)
            return None if t is None else int(t.shape[0])
        try:
            loras = lora_patch_tensors(patches(), rows)
        except Fallback as e:
            raise WeightsFallback(f"{what}: {e}; give the LoRA files to this node's 'loras' "
                                  "option instead of a LoRA loader node (h3rt merges them "
                                  "itself)") from None
        self._once(logging.INFO, f"merging {sum(len(m) // 3 for m, _ in loras)} {what} in h3rt "
                   "(as its 'loras' option merges files)")
        return loras

    def _load(self, load, executor, key):
        opts = dict(device=self.device, attention=engine_attention(self.attention, self.device),
                    cuda_graphs=self.cuda_graphs)
        if self.loras:
            opts["loras"] = list(self.loras)
        if self.device_memory_limit and self.device == "cpu":
            self._once(logging.INFO, "device_memory_limit applies to the cuda device; ignored")
        elif self.device_memory_limit:
            opts["device_memory_limit"] = self.device_memory_limit
        if key[0] == "path":
            path = self.checkpoint_path
            if not path or not os.path.isfile(path):
                raise Fallback(f"checkpoint_path '{path}' is not a file")
            log.warning("h3rt: loading %s: a second copy of the weights, beside ComfyUI's", path)
            progress = load_progress_bar() if self.device == "cuda" else None
            if progress is not None:  # reading a 20-66 GB file takes tens of seconds
                opts["load_progress"] = progress
            if self.file_patches:  # the LoRA loaders' patches, which the file lacks
                dm = getattr(executor, "class_obj", None)
                state = (lambda: dm.state_dict()) if hasattr(dm, "state_dict") else dict
                opts["loras"] = self._patch_loras(lambda: self.file_patches, state,
                                                  "LoRA patches of the model") + list(self.loras)
            return load(path, **opts)
        orig = restore_quant_params(executor.class_obj, executor.class_obj.state_dict())
        # LoRA applied per layer at call time (low-VRAM loads): the state dict lacks it.
        if getattr(self.base_model, "lowvram_patch_counter", 0):
            dm = executor.class_obj
            opts["loras"] = self._patch_loras(lambda: lowvram_patches(dm), lambda: orig,
                                              "low-VRAM LoRA patches") + list(self.loras)
        state = {k: _weight_for_h3rt(k, t, self.device) for k, t in orig.items()}
        moved = [k for k, t in orig.items() if _on_device(t) and not _on_device(state[k])]
        if moved:
            log.warning("h3rt: copied %d device tensors of the model to host memory for h3rt "
                        "(h3rt then holds its own copy of those on %s; int8/uint8 and bf16 weights "
                        "are used in place)", len(moved), self.device)
        model = load(state, **opts)
        log.info("h3rt: engine built (%s, hidden %d, %d layers, %s; %s)", model.device,
                 model.config["hidden"], model.config["layers"], model.precision, _build_line())
        return model


def load_progress_bar():
    """h3rt.load's load_progress(done, total) drawn on ComfyUI's progress bar, or None outside
    ComfyUI."""
    try:
        import comfy.utils
    except ImportError:
        return None
    bar = []

    def update(done, total):
        if not bar:
            bar.append(comfy.utils.ProgressBar(total))
        bar[0].update_absolute(done, total)
    return update


def parse_loras(text):
    """The node's `loras` text: one LoRA file per line (or separated by ';'), optionally
    followed by ':strength' (default 1.0), as `h3rt sample --lora F[:strength]` takes them. A
    tail that is no number belongs to the path (paths may hold colons), unless only the part
    before it is a file: then it is a bad strength (ValueError)."""
    out = []
    for item in text.replace(";", "\n").splitlines():
        item = item.strip()
        if not item:
            continue
        path, strength = item, 1.0
        head, sep, tail = item.rpartition(":")
        if sep and head:
            try:
                path, strength = head, float(tail)
            except ValueError:
                if os.path.isfile(head) and not os.path.isfile(item):
                    raise ValueError(f"h3rt: loras: '{item}': '{tail}' after the file is not a "
                                     f"strength (a number, as in {head}:0.8)") from None
        out.append((path, strength))
    return out


def check_options(weights, checkpoint_path, loras_text):
    """The node's options that would otherwise only fail at the first call, where the fallback to
    ComfyUI's forward would drop what they ask for (the LoRAs): raised when the node runs, so
    ComfyUI shows them on the node. Returns the parsed LoRA list."""
    if weights == "from file path" and not os.path.isfile(checkpoint_path or ""):
        raise ValueError(f"h3rt: checkpoint_path '{checkpoint_path}' is not a file (weights: "
                         "from file path)")
    loras = parse_loras(loras_text)
    for path, _ in loras:
        if not os.path.isfile(path):
            raise ValueError(f"h3rt: loras: '{path}' is not a file")
    return loras


def _keep_text_raw(text_states, *args, **kwargs):
    """Stands in for MiniMaxH3Model.preprocess_text_embeds: leaves the text encoder's states as
    they are, so the context reaches _forward unrefined. h3rt refines it per call; ComfyUI's
    _forward refines it itself when the width is not hidden (the same numbers, per step)."""
    return text_states


class H3rtPatchModel:
    """h3rt: run H3 in h3rt. MODEL in, the same MODEL (a clone) with h3rt's wrapper out."""

    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {
                "model": ("MODEL",),
                # sage by default: h3rt's bf16 attention kernel is ~2x slower than the cuDNN SDPA
                # ComfyUI runs on Hopper (bench/RESULTS.md, session 13: the node 10.0 s against
                # ComfyUI's 6.06 s per forward at 1344x768 with bf16 attention).
                "attention": (["sage", "bf16"], {"default": "sage"}),
                "cuda_graphs": ("BOOLEAN", {"default": True}),
                "device": (["cuda", "cpu"], {"default": "cuda"}),
                "weights": (["from the loaded model", "from file path"],),
                "refine_text": (["in h3rt", "in ComfyUI"], {"default": "in h3rt"}),
            },
            "optional": {
                "checkpoint_path": ("STRING", {"default": ""}),
                "loras": ("STRING", {"default": "", "multiline": True}),
                # e.g. "24GB": the blocks stream from host memory when the model and a step do
                # not fit (weights from the file path, or ComfyUI's weights on the CPU).
                "device_memory_limit": ("STRING", {"default": ""}),
            },
        }

    RETURN_TYPES = ("MODEL",)
    FUNCTION = "patch"
    CATEGORY = "advanced/model"
    DESCRIPTION = ("Runs MiniMax H3's forward in h3rt (t2va, first/last-frame keyframes, "
                   "references, text tags, video and audio denoise masks); other calls run "
                   "ComfyUI's forward (one log line per reason).")

    def patch(self, model, attention="sage", cuda_graphs=True, device="cuda",
              weights="from the loaded model", refine_text="in h3rt", checkpoint_path="",
              loras="", device_memory_limit=""):
        lora_list = check_options(weights, checkpoint_path, loras)
        patched = model.clone()
        wrapper = H3rtWrapper(getattr(model, "model", None), attention, cuda_graphs, device,
                              weights, checkpoint_path, loras=lora_list,
                              device_memory_limit=device_memory_limit)
        # Patches added by nodes after this one are not visible here (README: limits).
        wrapper.file_patches = [(k, list(v)) for k, v in
                                (getattr(model, "patches", None) or {}).items()]
        patched.add_wrapper_with_key(DIFFUSION_MODEL, WRAPPER_KEY, wrapper)
        if refine_text == "in h3rt":
            # extra_conds refines the text once per run; h3rt's API takes the encoder's states.
            patched.add_object_patch("diffusion_model.preprocess_text_embeds", _keep_text_raw)
        return (patched,)


NODE_CLASS_MAPPINGS = {"H3rtPatchModel": H3rtPatchModel}
NODE_DISPLAY_NAME_MAPPINGS = {"H3rtPatchModel": "h3rt: run H3 in h3rt"}
