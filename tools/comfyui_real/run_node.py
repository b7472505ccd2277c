#!/usr/bin/env python3
"""Runs the h3rt ComfyUI node (integrations/comfyui/h3rt_node.py) inside ComfyUI's real H3 model
code, and times a ComfyUI H3 step through it.

ComfyUI's code is not part of h3rt: pass a folder holding ComfyUI's files (--comfy DIR or
COMFYUI_SRC), at least comfy/ldm/minimax/model.py (MiniMaxH3Model: forward, _forward,
PackedLayout), comfy/patcher_extension.py (WrapperExecutor, the wrapper lists) and
comfy/ldm/common_dit.py. Those run as they are. The modules whose import closure pulls in the
rest of ComfyUI are replaced by the small stand-ins in standins/comfy (each file says what it
stands in for): comfy.ops, comfy.model_management, comfy.model_prefetch, comfy.quant_ops
(= comfy_kitchen, which must be importable), comfy.ldm.modules.attention (torch SDPA, ComfyUI's
default attention on NVIDIA) and comfy.model_patcher (clone / wrappers / object patches). The
sampler side (extra_conds' text refinement and payload, transformer_options with the patcher's
wrappers, timestep = sigma * 1000) is done here as ComfyUI's samplers/model_base do it.

Mode 1 (default): the tiny golden model (shared/golden/h3_tiny weights, ComfyUI key names) on
the CPU in float32. For t2va and the conditioned cases of shared/golden/h3_tiny_comfy, one
sampler step through ComfyUI's MiniMaxH3Model.forward without the node, and one through the node
(H3rtPatchModel.patch: the wrapper registered through the patcher, text kept raw by its object
patch). Checks: the node ran h3rt (no fallback) and its output equals ComfyUI's within 1e-5 of
max|ComfyUI| (the node tests' tolerance); ComfyUI's own output against the golden capture;
three cases again with a video denoise mask and four at other flow shifts (set on the patcher as
ComfyUI's MiniMaxH3SigmaShift node sets them; the shifts must change ComfyUI's output); fallbacks
(batch 2, odd width, a dit block patch, refine_text "in ComfyUI", a payload layout whose
positions a custom node moved) log one line per reason and give ComfyUI's result. Exit status 1
when a check fails.

Mode 2 (--size WxH, --frames N): one forward at a user shape, at the H3 release config
(--config h3: 50 blocks, hidden 5376, 56 heads, ffn 14336, text 5120) with random bf16 weights
made on --device (no file), timed three ways: ComfyUI's eager forward, the node's h3rt path
(h3rt takes the model's weights in place) and h3rt's forward_latents directly. Prints a table
and writes --json. --config tiny --device cpu runs the same code at the tiny config;
--device meta only builds the model (shapes, parameter count).

  PYTHONPATH=build/python python3 tools/comfyui_real/run_node.py --comfy /path/to/comfyui-src
  PYTHONPATH=build/python python3 tools/comfyui_real/run_node.py --comfy .comfy --device cuda \\
      --size 864x480 --size 1344x768 --frames 124 --json out.json
"""
import argparse
import copy
import hashlib
import json
import logging
import math
import os
import pathlib
import statistics
import sys
import time
import types

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
REAL = ("comfy/ldm/minimax/model.py", "comfy/patcher_extension.py", "comfy/ldm/common_dit.py")
PACKAGES = ("comfy", "comfy.ldm", "comfy.ldm.modules", "comfy.ldm.minimax")
TOL = 1e-5  # the node tests' tolerance: max|got - ref| / max|ref|

# MiniMaxH3Model keyword arguments. h3: the release (the class's defaults, spelled out);
# the tiny one comes from shared/golden/h3_tiny_comfy/manifest.json's "config".
H3_CONFIG = dict(hidden_size=5376, num_layers=50, token_refiner_num_layers=2,
                 num_attention_heads=56, attention_head_dim=128, ffn_hidden_size=14336,
                 latents_dim=24, audio_latents_dim=32, patch_size=(1, 2, 2), text_dim=5120,
                 timestep_input_dim=256, time_embed_hidden_size=5376, time_embed_dim=2688,
                 rope_inv_freq_len=16)
CONFIG_KEYS = set(H3_CONFIG)


# ---- ComfyUI's code: real files first where given, stand-ins for the rest ----
def install_comfy(src):
    src = pathlib.Path(src).resolve()
    missing = [p for p in REAL if not (src / p).is_file()]
    if missing:
        raise SystemExit(f"--comfy {src}: missing ComfyUI file(s) {missing}")
    for name in PACKAGES:
        rel = name.replace(".", "/")
        mod = types.ModuleType(name)
        # Stand-ins first: a real file of the same name in src is not used (its imports explode).
        mod.__path__ = [str(d / rel) for d in (HERE / "standins", src) if (d / rel).is_dir()]
        sys.modules[name] = mod
        if "." in name:
            parent, child = name.rsplit(".", 1)
            setattr(sys.modules[parent], child, mod)
    import comfy.ldm.minimax.model as h3  # noqa: F401  (imports the whole closure)
    import comfy.model_patcher  # noqa: F401
    prov = {}
    for name in sorted(n for n in sys.modules if n == "comfy" or n.startswith("comfy.")):
        f = getattr(sys.modules[name], "__file__", None)
        if not f:
            continue
        f = pathlib.Path(f).resolve()
        real = src in f.parents
        prov[name] = {"source": "ComfyUI" if real else "stand-in",
                      "file": str(f.relative_to(src if real else HERE)),
                      "sha256": hashlib.sha256(f.read_bytes()).hexdigest()[:16]}
    for p in REAL:
        name = p[:-3].replace("/", ".")
        if prov.get(name, {}).get("source") != "ComfyUI":
            raise SystemExit(f"{name} was not imported from {src}")
    return h3, prov


def import_node():
    sys.path.insert(0, str(REPO / "integrations" / "comfyui"))
    import h3rt_node
    return h3rt_node


class LogLines(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


# ---- the sampler side (comfy/samplers.py, comfy/model_base.py), as ComfyUI does it ----
class H3BaseModel:
    """Stands in for comfy.model_base.MiniMaxH3 (a BaseModel): the diffusion model and the two
    attributes of it the node reads."""

    def __init__(self, diffusion_model):
        # ComfyUI's layers load their weights as Parameters with requires_grad=False (the
        # in-place kitchen RoPE refuses grad-tracked norm weights).
        self.diffusion_model = diffusion_model.requires_grad_(False)
        self.current_weight_patches_uuid = None
        self.lowvram_patch_counter = 0


def prepare_run(patcher, text_states, make_payload):
    """What ComfyUI does once per sampling run: the patcher's object patches applied (model
    load), then extra_conds: diffusion_model.preprocess_text_embeds (the node's object patch
    keeps the text raw) and the minimax_payload with its PackedLayout."""
    import torch
    base = patcher.patch_model()
    try:
        with torch.no_grad():
            context = base.diffusion_model.preprocess_text_embeds(text_states)
        return context, make_payload(context)
    finally:
        patcher.unpatch_model()


def model_call(patcher, x, timestep, context, payload, sample_sigmas=None, **extra):
    """One model call of a sampling step: transformer_options with the patcher's wrappers
    (sampler_helpers.prepare_model_patcher) and the per-call keys of _calc_cond_batch, then
    BaseModel._apply_model's call diffusion_model(x, t, context=, control=None,
    transformer_options=, **extra_conds)."""
    import torch
    import comfy.patcher_extension as pe
    opts = pe.copy_nested_dicts(patcher.model_options["transformer_options"])
    opts["wrappers"] = pe.copy_nested_dicts(patcher.wrappers)
    opts["callbacks"] = pe.copy_nested_dicts(patcher.callbacks)
    opts.update(sigmas=(timestep.float() / 1000.0).reshape(1), cond_or_uncond=[0], uuids=[None])
    if sample_sigmas is not None:
        opts["sample_sigmas"] = sample_sigmas
    with torch.no_grad():
        return patcher.model.diffusion_model(x, timestep, context=context, control=None,
                                             transformer_options=opts, minimax_payload=payload,
                                             **extra)


def sampler_step(patcher, x, timestep, text_states, make_payload, **extra):
    context, payload = prepare_run(patcher, text_states, make_payload)
    return model_call(patcher, x, timestep, context, payload, **extra)


def rel_err(got, ref):
    got, ref = got.double(), ref.double()
    return float((got - ref).abs().max() / ref.abs().max())


# ---- mode 1: the tiny golden model on the CPU ----
def golden_dirs(args):
    shared = pathlib.Path(args.shared or os.environ.get("H3RT_SHARED_DIR") or REPO.parent / "shared")
    return shared / "golden" / "h3_tiny", shared / "golden" / "h3_tiny_comfy"


def tiny_config(comfy_dir):
    cfg = json.loads((comfy_dir / "manifest.json").read_text())["config"]
    out = {k: v for k, v in cfg.items() if k in CONFIG_KEYS}
    out["patch_size"] = tuple(out["patch_size"])
    return out


def to_comfy_video(rows, shape):
    """Golden video rows [Nv, 96] (patchified) -> [1, 24, T, H, W]."""
    _, c, t, h, w = shape
    return rows.reshape(t, h // 2, w // 2, c, 2, 2).permute(3, 0, 1, 4, 2, 5).reshape(shape)


def to_comfy_audio(rows, n):
    """Golden audio rows [2N, 32] (row ch*N + j) -> [1, 32, 2, N]."""
    return rows.reshape(2, n, -1).permute(2, 0, 1)[None]


def golden_case(h3, f, entry):
    """(x, timestep, text, make_payload, extra) of one golden case: the payload as
    model_base.MiniMaxH3.extra_conds builds it (golden README section 3), with ComfyUI's
    PackedLayout built for the context it is given."""
    import torch
    video = f["input/video_latents"]
    audio = f["input/audio_latents"].permute(1, 0, 2)[None].contiguous()  # [1, 32, 2, N]
    p = entry["payload"]

    def tensor(j):
        return None if j is None else f[j.split(" ")[0]]

    def audio_t(j):
        a = tensor(j)
        return None if a is None else a.permute(1, 0, 2)[None].contiguous()

    keyframes = [{"resolved_frame_index": k["resolved_frame_index"], "latent": tensor(k.get("latent")),
                  "audio_latent": audio_t(k.get("audio_latent"))} for k in p.get("keyframes", [])]
    refs = []
    for r in p.get("refs", []):
        d = {k: v for k, v in r.items() if k not in ("latent", "audio_latent")}
        if "latent" in r:
            d["latent"] = tensor(r["latent"])
        if "audio_latent" in r:
            d["audio_latent"] = audio_t(r["audio_latent"])
        refs.append(d)

    def make_payload(context):
        out = {"text_token_tags": f["input/text_token_tags"].long(),
               "seed": int(f["input/payload_seed"][0]), "audio_scale": 1.0}
        for key in ("visual_cond_noise_aug", "audio_cond_noise_aug", "audio_scale"):
            if isinstance(p.get(key), (int, float)):
                out[key] = float(p[key])
        if keyframes:
            out["keyframes"] = keyframes
        if refs:
            out["refs"] = refs
        cv = [d["latent"] for d in keyframes + refs if d.get("latent") is not None]
        ca = [d["audio_latent"] for d in keyframes + refs if d.get("audio_latent") is not None]
        if cv:
            out["cond_video_latents"] = cv
        if ca:
            out["cond_audio_latents"] = ca
        _, _, t, hh, ww = video.shape
        out["layout"] = h3.PackedLayout(context.shape[1], t, (hh + 1) // 2 * 2, (ww + 1) // 2 * 2,
                                        audio.shape[-1], keyframes=keyframes or None,
                                        refs=refs or None)
        return out

    extra = {}
    if "input/audio_denoise_mask" in f:
        extra["audio_denoise_mask"] = f["input/audio_denoise_mask"].reshape(1, 1, 2, -1)
    return [video, audio], f["input/timestep"].float(), f["input/text_embeds"].float(), \
        make_payload, extra


def build_tiny(h3, tiny_dir, comfy_dir):
    import torch
    from safetensors.torch import load_file
    import comfy.ops
    dm = h3.MiniMaxH3Model(**tiny_config(comfy_dir), dtype=torch.float32, device="cpu",
                           operations=comfy.ops.disable_weight_init)
    dm.load_state_dict(load_file(str(tiny_dir / "weights.safetensors")), strict=True)
    return dm.eval()


def tiny_suite(h3, node, args):
    import torch
    from safetensors.torch import load_file
    from comfy.model_patcher import ModelPatcher
    tiny_dir, comfy_dir = golden_dirs(args)
    manifest = json.loads((comfy_dir / "manifest.json").read_text())
    base = ModelPatcher(H3BaseModel(build_tiny(h3, tiny_dir, comfy_dir)))
    (patched,) = node.H3rtPatchModel().patch(base, device="cpu")
    wrapper = patched.wrappers["diffusion_model"]["h3rt"][0]
    log = LogLines()
    logging.getLogger("h3rt").addHandler(log)
    logging.getLogger("h3rt").setLevel(logging.INFO)
    results, failures = [], []

    def check(ok, what):
        if not ok:
            failures.append(what)
        return ok

    cases = args.cases.split(",") if args.cases else sorted(
        c for c in manifest["cases"] if c != "t2va_diffusers")
    if not args.cases:
        cases += [c + "+video_mask" for c in ("t2va", "fl2va_first", "audio_mask")]
        cases += [c + "+shift" for c in ("t2va", "fl2va_first", "audio_mask", "t2va_audio_carry")]
    for name in cases:
        golden, _, variant = name.partition("+")
        masked = variant == "video_mask"
        f = load_file(str(comfy_dir / f"{golden}.safetensors"))
        x, ts, text, make_payload, extra = golden_case(h3, f, manifest["cases"][golden])
        if masked:
            extra["denoise_mask"] = video_mask(x[0])
        b, p = (shifted(base), shifted(patched)) if variant == "shift" else (base, patched)
        before = dict(wrapper.calls)
        ref = sampler_step(b, x, ts, text, make_payload, **extra)
        got = sampler_step(p, x, ts, text, make_payload, **extra)
        if variant == "shift":  # the shifts must matter, far past the tolerance
            plain = sampler_step(base, x, ts, text, make_payload, **extra)
            effect = max(rel_err(ref[0], plain[0]), rel_err(ref[1], plain[1]))
            check(effect > 100 * TOL, f"{name}: the shifts changed ComfyUI's output by only "
                  f"{effect:.2e}")
        ran_h3rt = wrapper.calls["h3rt"] == before["h3rt"] + 1
        ev, ea = rel_err(got[0], ref[0]), rel_err(got[1], ref[1])
        # ComfyUI's own forward against what ComfyUI computed when the golden set was made
        # (checks the stand-ins). audio_velocity is forward()'s audio at the golden's commit
        # (carry converted, times the audio mask); audio_velocity_network is _forward's: a
        # ComfyUI whose forward() leaves the mask to the sampler matches that one.
        gv = rel_err(ref[0], -to_comfy_video(f["video_velocity"][0], x[0].shape))
        gold_a = {k: rel_err(ref[1], -to_comfy_audio(f[k][0], x[1].shape[-1]))
                  for k in ("audio_velocity", "audio_velocity_network") if k in f}
        ga_key = min(gold_a, key=gold_a.get)
        ga = gold_a[ga_key]
        row = {"case": name, "node_ran_h3rt": ran_h3rt, "node_vs_comfy_video": ev,
               "node_vs_comfy_audio": ea, "comfy_vs_golden_video": gv, "comfy_vs_golden_audio": ga,
               "golden_audio_matched": ga_key,
               "dtype_shape_ok": all(g.dtype == r.dtype and g.shape == r.shape
                                     for g, r in zip(got, ref))}
        if variant:  # no golden: video masks (its ComfyUI commit raised on them), other shifts
            gv = ga = None
            ga_key = ("none: no golden for video masks" if masked else
                      f"none: no golden at shifts {SHIFTS}; they change ComfyUI's output by "
                      f"{effect:.2e}")
            row.update(comfy_vs_golden_video=None, comfy_vs_golden_audio=None,
                       golden_audio_matched=ga_key)
        ok = (check(ran_h3rt, f"{name}: the node fell back") & check(ev <= TOL, f"{name}: video")
              & check(ea <= TOL, f"{name}: audio") & check(row["dtype_shape_ok"], f"{name}: dtype")
              & check(bool(variant) or (gv <= TOL and ga <= TOL), f"{name}: ComfyUI vs golden"))
        row["ok"] = bool(ok)
        results.append(row)
        gold = f"{gv:.2e} {ga:.2e} ({ga_key})" if gv is not None else ga_key
        print(f"{name:28s} h3rt={'yes' if ran_h3rt else 'NO ':3s} node-vs-ComfyUI video {ev:.2e} "
              f"audio {ea:.2e} | ComfyUI-vs-golden {gold} {'ok' if ok else 'FAIL'}")

    fallbacks = fallback_suite(h3, node, base, patched, wrapper, log, manifest, comfy_dir, check)
    logging.getLogger("h3rt").removeHandler(log)
    return {"cases": results, "fallbacks": fallbacks, "failures": failures,
            "wrapper_calls": dict(wrapper.calls)}


# Flow shifts as ComfyUI's MiniMaxH3SigmaShift node sets them (Python floats, neither exact in
# float32), on a clone of the patcher.
SHIFTS = (6.37, 2.9)


def shifted(patcher):
    m = patcher.clone()
    to = m.model_options["transformer_options"] = dict(m.model_options["transformer_options"])
    to["minimax_h3_sigma_shift_video"], to["minimax_h3_sigma_shift_audio"] = SHIFTS
    return m


def video_mask(video):
    """A video denoise mask [1, 1, T, H, W] (ComfyUI's 1 = generate): the first latent frame
    kept, a ragged 0.5 region (not on 2x2 patch bounds) in the next, the rest generated."""
    import torch
    m = torch.ones(1, 1, *video.shape[2:])
    m[:, :, 0] = 0.0
    m[:, :, 1, 1:4, :5] = 0.5
    return m


def fallback_suite(h3, node, base, patched, wrapper, log, manifest, comfy_dir, check):
    """Calls the node must leave to ComfyUI: one log line per reason, ComfyUI's result."""
    import torch
    from safetensors.torch import load_file
    f = load_file(str(comfy_dir / "t2va.safetensors"))
    x, ts, text, make_payload, _ = golden_case(h3, f, manifest["cases"]["t2va"])
    (in_comfy,) = node.H3rtPatchModel().patch(base, device="cpu", refine_text="in ComfyUI")
    # A block patch as a model patch (e.g. H3's Fun ControlNet) adds: here an identity one.
    patched_dit = patched.clone()
    patched_dit.model_options["transformer_options"]["patches_replace"] = {
        "dit": {("double_block", 0): lambda args, extra: extra["original_block"](args)}}
    odd = [x[0][..., :7].contiguous(), x[1]]
    b2 = [torch.cat([x[0]] * 2), torch.cat([x[1]] * 2)]

    def moved_layout(context):  # as a custom node that changes PackedLayout's positions does
        payload = make_payload(context)
        layout = copy.copy(payload["layout"])
        layout.position_ids = layout.position_ids.clone()
        a, b, _ = next(s for s in layout.segments if s[2] == "video")
        layout.position_ids[a:b, 0] += 1.0  # the target video one step later in time
        payload["layout"] = layout
        return payload

    cases = [
        ("batch 2", patched, b2, torch.cat([text] * 2), {}, "batch size > 1"),
        ("odd width", patched, odd, text, {}, "odd latent height or width"),
        ("patches_replace dit", patched_dit, x, text, {}, "patches_replace['dit']"),
        ("refine in ComfyUI", in_comfy, x, text, {}, "refined text states"),
        ("changed layout", patched, x, text, {}, "packed layout differs", moved_layout),
    ]
    out = []
    for name, p, xx, tt, extra, reason, *mk in cases:
        mk = mk[0] if mk else make_payload
        w = p.wrappers["diffusion_model"]["h3rt"][0]
        n0, calls0 = len(log.lines), dict(w.calls)
        results = []
        for patcher in (base, p, p):  # ComfyUI alone, then the node twice
            try:
                results.append(sampler_step(patcher, xx, ts, tt, mk, **extra))
            except Exception as e:  # ComfyUI's own answer to this call (batch 2: it raises)
                results.append(f"{type(e).__name__}: {e}")
        lines = [m for m in log.lines[n0:] if reason in m]
        same = all(_same(r, results[0]) for r in results[1:])
        fell = w.calls["comfyui"] - calls0["comfyui"] == 2 and w.calls["h3rt"] == calls0["h3rt"]
        row = {"call": name, "log_lines": lines, "fell_back_twice": fell,
               "same_result_as_comfyui": same,
               "comfyui_result": results[0] if isinstance(results[0], str) else "tensors"}
        row["ok"] = bool(check(len(lines) == 1, f"fallback {name}: {len(lines)} log lines")
                         & check(fell, f"fallback {name}: ran h3rt")
                         & check(same, f"fallback {name}: result differs from ComfyUI's"))
        out.append(row)
        print(f"fallback {name:18s} log lines {len(lines)} same result {same} "
              f"{'ok' if row['ok'] else 'FAIL'}  [{lines[0] if lines else ''}]")
    return out


def _same(a, b):
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return all(rel_err(x, y) <= TOL for x, y in zip(a, b))


# ---- mode 2: one forward at a user shape, timed ----
def latent_shape(width, height, frames):
    """ComfyUI's H3 latent for a width x height x frames video (h3rt.latent_shape: 16x spatial,
    latent frames covering 1, 4, 4, 4, 4 pixel frames in turn, 40 audio latents per second)."""
    if width % 32 or height % 32:
        raise SystemExit("--size: width and height must be multiples of 32")
    import h3rt
    try:
        s = h3rt.latent_shape(width, height, frames)
    except ValueError as e:
        raise SystemExit(f"--size / --frames: {e}")
    return s["frames"], s["height"], s["width"], s["audio"]


def random_weights_(dm, seed):
    """Random weights in place (any device): projections N(0, 1/fan_in), AdaLN projections
    at half that scale, norms 1, biases N(0, 0.02); the RoPE inverse frequencies
    10000^(-i/16)."""
    import torch
    g = torch.Generator(device=next(dm.parameters()).device).manual_seed(seed)
    with torch.no_grad():
        for name, p in dm.named_parameters():
            if p.dim() == 2:
                std = (0.5 if "adaln" in name else 1.0) / math.sqrt(p.shape[1])
                p.normal_(0.0, std, generator=g)
            elif "norm" in name.rsplit(".", 2)[-2]:
                p.fill_(1.0)
            else:
                p.normal_(0.0, 0.02, generator=g)
        inv = dm.rope.inv_freq
        inv.copy_(10000.0 ** (-torch.arange(inv.numel(), dtype=torch.float32) / inv.numel()))


def build_random(h3, config, dtype, device, seed):
    import torch
    import comfy.ops
    t0 = time.perf_counter()
    dm = h3.MiniMaxH3Model(**config, dtype=dtype, device=device,
                           operations=comfy.ops.disable_weight_init)
    params = sum(p.numel() for p in dm.parameters())
    if device != "meta":
        random_weights_(dm, seed)
        if device == "cuda":
            torch.cuda.synchronize()
    return dm.eval(), params, time.perf_counter() - t0


class Timer:
    def __init__(self, device):
        self.cuda = device == "cuda"

    def __call__(self, fn, repeat):
        import torch
        times, out = [], None
        for _ in range(repeat):
            if self.cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = fn()
            if self.cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        return out, times


def sdpa_kernels(device, heads, seq, dtype):
    """Names of the CUDA kernels one torch SDPA call runs at this head layout (which attention
    ComfyUI's default path used)."""
    import torch
    import torch.nn.functional as F
    if device != "cuda":
        return ["(cpu)"]
    try:
        q = torch.randn(1, heads, min(seq, 4096), 128, device="cuda", dtype=dtype)
        F.scaled_dot_product_attention(q, q, q)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            F.scaled_dot_product_attention(q, q, q)
            torch.cuda.synchronize()
        return sorted({e.key for e in prof.key_averages()
                       if "CUDA" in str(getattr(e, "device_type", ""))})
    except Exception as e:  # the profiler is information only
        return [f"(profiler failed: {type(e).__name__}: {e})"]


def device_used_gib(device):
    """Device memory in use by everything (torch and h3rt's own allocations)."""
    import torch
    if device != "cuda":
        return None
    free, total = torch.cuda.mem_get_info()
    return round((total - free) / 2**30, 2)


def kitchen_info():
    try:
        import comfy.quant_ops
        ck = comfy.quant_ops.ck
        info = {"file": ck.__file__,
                "backends": {k: ("disabled" if v.get("disabled") else
                                 "available" if v.get("available") else "unavailable")
                             for k, v in ck.list_backends().items()}}
        try:
            from comfy_kitchen.backends import cuda as ckc
            info["cuda_extension"] = bool(ckc._EXT_AVAILABLE)
        except Exception as e:  # no CUDA backend in this build
            info["cuda_extension"] = f"unavailable: {e}"
        return info
    except Exception as e:
        return {"error": str(e)}


def timing_suite(h3, node, args):
    import torch
    from comfy.model_patcher import ModelPatcher
    t_start = time.perf_counter()
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    if args.config == "h3":
        config = dict(H3_CONFIG)
    else:
        config = tiny_config(golden_dirs(args)[1])
    dm, params, build_s = build_random(h3, config, dtype, args.device, args.seed)
    report = {"config": args.config, "model_config": {k: list(v) if isinstance(v, tuple) else v
                                                      for k, v in config.items()},
              "device": args.device, "dtype": args.dtype, "parameters": params,
              "build_s": round(build_s, 2), "torch": torch.__version__,
              "comfy_kitchen": kitchen_info(), "runs": []}
    if args.device == "cuda":
        report["gpu"] = torch.cuda.get_device_name()
        report["device_used_gib_after_build"] = device_used_gib(args.device)
    print(f"MiniMaxH3Model ({args.config}): {params / 1e9:.3f} B parameters, built in "
          f"{build_s:.1f} s on {args.device}")
    if args.device == "meta":
        report["state_dict_keys"] = len(dm.state_dict())
        return report
    base = ModelPatcher(H3BaseModel(dm))
    (patched,) = node.H3rtPatchModel().patch(base, device="cuda" if args.device == "cuda" else "cpu",
                                             attention=args.attention,
                                             cuda_graphs=not args.no_cuda_graphs)
    wrapper = patched.wrappers["diffusion_model"]["h3rt"][0]
    log = LogLines()
    logging.getLogger("h3rt").addHandler(log)
    logging.getLogger("h3rt").setLevel(logging.INFO)
    g = torch.Generator(device="cpu").manual_seed(args.seed + 1)
    for size in args.size:
        width, height = (int(v) for v in size.lower().split("x"))
        t, hh, ww, n = latent_shape(width, height, args.frames)
        rows = args.text_tokens + 2 * n + t * (hh // 2) * (ww // 2)
        run = {"size": f"{width}x{height}", "frames": args.frames, "latent": [t, hh, ww, n],
               "text_tokens": args.text_tokens, "rows": rows, "sigma": args.sigma}
        report["runs"].append(run)
        print(f"\n{run['size']} x {args.frames} frames: latent T={t} H={hh} W={ww}, N={n}, "
              f"{rows} rows")
        try:
            time_one_shape(h3, args, config, dtype, base, patched, wrapper, run, g,
                           (t, hh, ww, n), t_start)
        except Exception as e:  # keep what was measured, report the rest
            run["error"] = f"{type(e).__name__}: {e}"
            print(f"  error: {run['error']}")
        run["log"] = list(log.lines)
        log.lines.clear()
        _print_run(run)
        if args.json:  # after every shape: a run cut short still leaves its numbers
            pathlib.Path(args.json).write_text(json.dumps(report, indent=1, default=str))
        if args.device == "cuda":
            torch.cuda.empty_cache()
    logging.getLogger("h3rt").removeHandler(log)
    report["total_s"] = round(time.perf_counter() - t_start, 1)
    return report


def time_one_shape(h3, args, config, dtype, base, patched, wrapper, run, g, shape, t_start):
    import torch
    t, hh, ww, n = shape
    dev = args.device
    timer = Timer(dev)
    # The sampler's inputs as BaseModel._apply_model hands them over (the model's dtype).
    video = torch.randn(1, 24, t, hh, ww, generator=g).to(dev, dtype)
    audio = torch.randn(1, 32, 2, n, generator=g).to(dev, dtype)
    text = torch.randn(1, args.text_tokens, config["text_dim"], generator=g).to(dev, dtype)
    ts = torch.tensor([args.sigma * 1000.0], dtype=torch.float32, device=dev)
    x = [video, audio]

    def make_payload(context):
        return {"seed": 0, "audio_scale": 1.0, "layout": h3.PackedLayout(context.shape[1], t, hh, ww, n)}

    # ComfyUI's eager forward (the peer users run): refined text, as extra_conds gives it.
    eager = None
    if run["rows"] > args.eager_max_rows:
        run["comfyui_eager"] = f"skipped: {run['rows']} rows > --eager-max-rows {args.eager_max_rows}"
    elif time.perf_counter() - t_start > args.budget_s:
        run["comfyui_eager"] = f"skipped: past --budget-s {args.budget_s}"
    else:
        context, payload = prepare_run(base, text, make_payload)
        try:
            if dev == "cuda":
                torch.cuda.reset_peak_memory_stats()
            eager, times = timer(lambda: model_call(base, x, ts, context, payload), 1 + args.repeat)
            run["comfyui_eager"] = _times(times, dev)
            run["comfyui_eager"]["finite"] = all(bool(torch.isfinite(o).all()) for o in eager)
            run["attention"] = {
                "comfyui": "torch scaled_dot_product_attention (the stand-in of ComfyUI's "
                           "default attention_pytorch)",
                "kernels": sdpa_kernels(dev, config["num_attention_heads"], run["rows"], dtype)}
        except torch.cuda.OutOfMemoryError as e:
            run["comfyui_eager"] = f"skipped: out of memory ({str(e).splitlines()[0]})"
        del context, payload
        if dev == "cuda":
            torch.cuda.empty_cache()
    # The node: its first call builds the engine (weights taken in place) and captures graphs.
    context, payload = prepare_run(patched, text, make_payload)
    calls0 = dict(wrapper.calls)
    run["device_used_gib_before_node"] = device_used_gib(dev)
    _, t_first = timer(lambda: model_call(patched, x, ts, context, payload), 1)
    run["node_first_call_s"] = round(t_first[0], 3)
    run["device_used_gib_after_engine"] = device_used_gib(dev)
    node_out, times = timer(lambda: model_call(patched, x, ts, context, payload), 1 + args.repeat)
    run["node_h3rt"] = _times(times, dev)
    run["node_h3rt"]["finite"] = all(bool(torch.isfinite(o).all()) for o in node_out)
    run["node_ran_h3rt"] = wrapper.calls["h3rt"] - calls0["h3rt"] == 2 + args.repeat
    engine = wrapper.engine
    if engine is not None:
        run["engine"] = {"device": engine.device, "precision": engine.precision}
        sigma = float(max(ts.float().cpu()[0] / 1000.0, 1e-6))
        if dev == "cuda":
            lat, raw = x, context
        else:
            lat, raw = [a.float().numpy() for a in x], context.float().numpy()
        _, times = timer(lambda: engine.forward_latents(lat[0], lat[1], sigma, raw), 1 + args.repeat)
        run["h3rt_direct"] = _times(times, dev)
    if eager is not None:
        run["node_vs_comfyui_rel_max"] = [rel_err(a.float().cpu(), b.float().cpu())
                                         for a, b in zip(node_out, eager)]


def _times(times, device):
    """Median of the timed calls (the first of several is a warm-up), and peak memory."""
    import torch
    timed = times[1:] if len(times) > 1 else times
    out = {"median_s": round(statistics.median(timed), 4), "calls_s": [round(v, 4) for v in times]}
    if device == "cuda":
        out["peak_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    return out


def _print_run(run):
    def cell(v):
        return f"{v['median_s']:9.3f} s" if isinstance(v, dict) else "   skipped"
    print(f"  {'ComfyUI eager forward':34s}{cell(run.get('comfyui_eager'))}")
    print(f"  {'node (h3rt through the wrapper)':34s}{cell(run.get('node_h3rt'))}  "
          f"(first call {run.get('node_first_call_s', float('nan')):.2f} s, "
          f"h3rt ran: {run.get('node_ran_h3rt')})")
    print(f"  {'h3rt forward_latents directly':34s}{cell(run.get('h3rt_direct'))}")
    if isinstance(run.get("comfyui_eager"), str):
        print(f"  eager: {run['comfyui_eager']}")
    if "node_vs_comfyui_rel_max" in run:
        v, a = run["node_vs_comfyui_rel_max"]
        print(f"  node vs ComfyUI output: max|diff|/max|ComfyUI| video {v:.3g} audio {a:.3g}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--comfy", default=os.environ.get("COMFYUI_SRC"),
                    help="folder with ComfyUI's files (or COMFYUI_SRC)")
    ap.add_argument("--shared", help="h3rt's shared/ folder (default: H3RT_SHARED_DIR, ../shared)")
    ap.add_argument("--cases", help="comma-separated golden cases (default: all but t2va_diffusers)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda", "meta"])
    ap.add_argument("--size", action="append", help="WxH: time one forward at this video size")
    ap.add_argument("--frames", type=int, default=124)
    ap.add_argument("--config", choices=["h3", "tiny"], default="h3")
    ap.add_argument("--dtype", choices=["bf16", "f32"], default="bf16")
    ap.add_argument("--text-tokens", type=int, default=100)
    ap.add_argument("--sigma", type=float, default=0.7)
    ap.add_argument("--repeat", type=int, default=3, help="timed calls after one warm-up")
    ap.add_argument("--attention", choices=["bf16", "sage"], default="sage")
    ap.add_argument("--no-cuda-graphs", action="store_true")
    ap.add_argument("--eager-max-rows", type=int, default=10**9,
                    help="skip ComfyUI's eager forward above this many packed rows")
    ap.add_argument("--budget-s", type=float, default=420.0,
                    help="skip further eager runs once this many seconds have passed")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the report here")
    args = ap.parse_args()
    if not args.comfy:
        ap.error("give --comfy DIR or COMFYUI_SRC")
    logging.basicConfig(level=logging.WARNING, format="%(name)s %(levelname)s: %(message)s")
    h3, prov = install_comfy(args.comfy)
    node = import_node()
    print("ComfyUI modules:")
    for name, p in prov.items():
        print(f"  {name:32s} {p['source']:8s} {p['file']} (sha256 {p['sha256']})")
    if args.size or args.device == "meta":
        if args.device == "meta" and not args.size:
            args.size = []
        report = timing_suite(h3, node, args)
        failed = [r for r in report["runs"] if not r.get("node_ran_h3rt")]
    else:
        report = tiny_suite(h3, node, args)
        failed = report["failures"]
        print(f"\n{len(report['cases'])} cases, {len(report['fallbacks'])} fallbacks: "
              + ("all checks passed" if not failed else f"FAILED: {failed}"))
    report["comfyui_modules"] = prov
    sources = pathlib.Path(args.comfy) / "SOURCES.txt"  # where the folder's files came from
    if sources.is_file():
        report["comfyui_sources"] = sources.read_text()
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(report, indent=1, default=str))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
