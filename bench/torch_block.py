#!/usr/bin/env python3
"""The peer number for `h3rt bench block`: one H3 DiT block written in eager PyTorch, the way a
user runs it today without h3rt, timed at the seed shape on the local GPU.

The block follows the same math as h3rt's (RMSNorm + AdaLN modulate, fused QKV, per-head Q/K
RMSNorm, split-half RoPE on 96 of 128 channels, non-causal attention, gated residuals, SwiGLU),
with random weights; the six modulation vectors are given per row (a [S, H] tensor each), so the
table gather is not timed. Projections run either in bf16 (F.linear) or as fp8 e4m3 per-tensor-scaled
GEMMs (torch._scaled_mm with a static input scale, as ComfyUI's fp8_scaled layers do: quantize
the activation, GEMM, bf16 out), or (--gemm int8_convrot) through comfy-kitchen's int8_convrot
linear, the way ComfyUI runs a layer whose comfy_quant is {"format":"int8_tensorwise",
"convrot":true,"convrot_groupsize":256}: the weight is a comfy_kitchen QuantizedTensor
(TensorWiseINT8Layout, quantized once by comfy-kitchen's own quantize_int8_convrot_weight: group-256
Hadamard rotation + per-row int8), F.linear on it dispatches to torch.ops.comfy_kitchen.int8_linear
(CUDA backend: the fused rotate+quantize kernel, then the int8 GEMM with both scales, bf16 out),
and fc2 runs as ComfyUI's MLP does, comfy.ops.linear_input_act(fc2, fc1(x), "swiglu"), i.e.
int8_linear(input_act="swiglu") with SwiGLU folded into fc2's quantizer (--swiglu eager: a
separate torch SwiGLU instead). With int8_convrot the Q/K RMSNorm + RoPE also run as ComfyUI's H3
attention runs them, comfy_kitchen.rms_rope_split_half_ in place on the QKV buffer (--qk-rope torch:
the eager torch ops instead). Comfy-kitchen is imported as ComfyUI's quant_ops does (triton backend
disabled). Put comfy_kitchen on PYTHONPATH (tools/peers/unpack_comfy_kitchen.sh).

Attention is torch SDPA (cuDNN backend, falling back to flash) or (--attention sage)
SageAttention2's sageattn on the strided [1, heads, S, 128] views of q/k/v, as ComfyUI's
attention_sage calls it for H3 (skip_reshape: tensor_layout="HND", is_causal=False); build it
with tools/peers/build_sageattention.sh and put it on PYTHONPATH.

Shapes: --seq 37810 is the seed shape (1344x768, 124 frames); 864x480x124 (ComfyUI's default) is
--width 864 --height 480 --frames 124, 15499 rows as h3rt bench block counts them (100 text +
414 audio + 14985 video rows; see latent_rows).

Reports the median block time over repeats after warm-up (CUDA events) and a per-component
attribution from events around each stage, as JSON; with --energy-seconds S also the energy per
block: NVML's energy counter (nvmlDeviceGetTotalEnergyConsumption, through ctypes) around blocks
run back to back for about S seconds, as h3rt bench block reports joules_per_block."""
import argparse
import ctypes
import json
import math
import statistics
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

COMPONENTS = ["norm_modulate", "qkv_projection", "rms_rope", "attention", "output_projection",
              "residual_gates", "mlp_fc1", "swiglu", "mlp_fc2"]


def rms_norm(x, w, eps=1e-6):
    return F.rms_norm(x, (x.shape[-1],), w, eps)


def rope(x, cos, sin, rope_dim=96):
    # x [S, H, 128]; rotate-half on the first rope_dim channels.
    r, rest = x[..., :rope_dim], x[..., rope_dim:]
    h = rope_dim // 2
    rot = torch.cat([-r[..., h:], r[..., :h]], dim=-1)
    return torch.cat([r * cos + rot * sin, rest], dim=-1)


class Linear:
    def __init__(self, out_f, in_f, gemm):
        w = torch.randn(out_f, in_f, device="cuda", dtype=torch.bfloat16) * in_f ** -0.5
        self.fp8 = gemm == "fp8"
        self.int8 = gemm == "int8_convrot"
        if self.int8:
            from comfy_kitchen.tensor import QuantizedTensor
            # comfy-kitchen's own weight quantizer (quantize_int8_convrot_weight through the
            # registry): group-256 Hadamard rotation, then per-row int8 with float32 scales.
            self.w = QuantizedTensor.from_float(w, "TensorWiseINT8Layout", is_weight=True,
                                                per_channel=True, convrot=True,
                                                convrot_groupsize=256)
            del w
        elif self.fp8:
            self.w_scale = (w.abs().amax().float() / 448.0).reshape(())
            self.w8 = (w.float() / self.w_scale).to(torch.float8_e4m3fn).t()  # column-major
            self.x_scale = torch.tensor(4.0 / 448.0, device="cuda")  # static input scale
        else:
            self.w = w

    def __call__(self, x):
        if not self.fp8:
            # int8_convrot: QuantizedTensor dispatch -> torch.ops.comfy_kitchen.int8_linear
            return F.linear(x, self.w)
        x8 = (x.float() / self.x_scale).clamp(-448, 448).to(torch.float8_e4m3fn)
        return torch._scaled_mm(x8, self.w8, scale_a=self.x_scale, scale_b=self.w_scale,
                                out_dtype=torch.bfloat16)

    def swiglu_linear(self, h):
        """linear(silu(h[:, :F]) * h[:, F:]) as comfy.ops.linear_input_act(layer, h, "swiglu")
        runs it for an int8 QuantizedTensor weight: SwiGLU folded into the int8 quantizer."""
        out = self.w.linear_input_act(h, None, "swiglu")
        if out is NotImplemented:
            raise RuntimeError("comfy_kitchen refused linear_input_act(swiglu)")
        return out


class Block:
    def __init__(self, hidden, heads, ffn, gemm, attention="sdpa", qk_rope="torch",
                 swiglu="eager"):
        self.H, self.heads, self.F = hidden, heads, ffn
        self.attention, self.qk_rope, self.swiglu = attention, qk_rope, swiglu
        inner = heads * 128
        self.qkv = Linear(3 * inner, hidden, gemm)
        self.out = Linear(hidden, inner, gemm)
        self.fc1 = Linear(2 * ffn, hidden, gemm)
        self.fc2 = Linear(hidden, ffn, gemm)
        if attention == "sage":
            from sageattention import sageattn
            self.sageattn = sageattn
        ones = lambda n: torch.ones(n, device="cuda", dtype=torch.bfloat16)
        self.norm1, self.norm2, self.qn, self.kn = ones(hidden), ones(hidden), ones(128), ones(128)

    def forward(self, x, mod, rope_tab, mark):
        S, H, nh = x.shape[0], self.H, self.heads
        shift1, scale1, gate1, shift2, scale2, gate2 = mod
        n = rms_norm(x, self.norm1) * (1 + scale1) + shift1
        mark("norm_modulate")
        qkv = self.qkv(n)
        mark("qkv_projection")
        q, k, v = qkv.view(S, 3, nh, 128).unbind(1)
        if self.qk_rope == "ck":
            # As ComfyUI's H3 Attention.forward: fused per-head RMSNorm + split-half RoPE on the
            # first 96 channels, in place on the QKV buffer ([1, S, heads, 128] views).
            import comfy_kitchen as ck
            q4, k4 = q.unsqueeze(0), k.unsqueeze(0)
            ck.rms_rope_split_half_(q4, k4, rope_tab["freqs"], self.qn, self.kn,
                                    epsilon=1e-6, rot_dim=96)
        else:
            q = rope(rms_norm(q, self.qn), rope_tab["cos"], rope_tab["sin"])
            k = rope(rms_norm(k, self.kn), rope_tab["cos"], rope_tab["sin"])
        mark("rms_rope")
        q, k, v = (t.transpose(0, 1).unsqueeze(0) for t in (q, k, v))  # [1, heads, S, 128] views
        if self.attention == "sage":
            # ComfyUI's attention_sage with skip_reshape=True (what H3's attention passes)
            a = self.sageattn(q, k, v, attn_mask=None, is_causal=False, tensor_layout="HND")
        else:
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION]):
                a = F.scaled_dot_product_attention(q, k, v)
        a = a.squeeze(0).transpose(0, 1).reshape(S, nh * 128)
        mark("attention")
        y = self.out(a)
        mark("output_projection")
        x = x + gate1 * y
        n = rms_norm(x, self.norm2) * (1 + scale2) + shift2
        mark("residual_gates")
        h = self.fc1(n)
        mark("mlp_fc1")
        if self.swiglu == "fused":  # SwiGLU inside fc2's int8 quantizer: swiglu reads ~0
            mark("swiglu")
            y = self.fc2.swiglu_linear(h)
        else:
            g = F.silu(h[:, : self.F]) * h[:, self.F:]
            mark("swiglu")
            y = self.fc2(g)
        mark("mlp_fc2")
        x = x + gate2 * y
        mark("residual_gates")
        return x


def rope_tables(S):
    """cos/sin [S, 1, 96] for the torch rope (duplicated halves, as rotate-half needs) and the
    same angles as ComfyUI's H3 rope_rotation_table ([1, S, 1, 48, 2, 2]) for ck.rms_rope."""
    half = torch.rand(S, 1, 48, device="cuda") * 6.28
    ang = torch.cat([half, half], dim=-1)
    c, s = half[:, 0].cos(), half[:, 0].sin()
    freqs = torch.stack([c, -s, s, c], dim=-1).reshape(1, S, 1, 48, 2, 2).to(torch.bfloat16)
    return {"cos": ang.cos().to(torch.bfloat16), "sin": ang.sin().to(torch.bfloat16),
            "freqs": freqs}


class EnergyCounter:
    """NVML's total energy counter (mJ) of the GPU torch uses, read through ctypes; `mj()` is None
    where NVML or the counter is unavailable."""

    def __init__(self):
        self.lib = self.handle = None
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            if lib.nvmlInit_v2() != 0:
                return
            handle = ctypes.c_void_p()
            uuid = str(getattr(torch.cuda.get_device_properties(0), "uuid", ""))
            by_uuid = uuid and lib.nvmlDeviceGetHandleByUUID(
                ("GPU-" + uuid).encode(), ctypes.byref(handle)) == 0
            if not by_uuid and lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) != 0:
                return
            self.lib, self.handle = lib, handle
        except OSError:
            pass

    def mj(self):
        if self.lib is None:
            return None
        v = ctypes.c_ulonglong()
        ok = self.lib.nvmlDeviceGetTotalEnergyConsumption(self.handle, ctypes.byref(v)) == 0
        return v.value if ok else None


def energy_per_block(forward, block_ms, seconds):
    """Blocks back to back for about `seconds` (no sync between them) with the energy counter
    read around them: joules per block, mean watts, the block count and the wall ms per block."""
    counter = EnergyCounter()
    n = max(3, math.ceil(seconds * 1000.0 / block_ms))
    torch.cuda.synchronize()
    e0, t0 = counter.mj(), time.perf_counter()
    for _ in range(n):
        forward()
    torch.cuda.synchronize()
    e1, t1 = counter.mj(), time.perf_counter()
    if e0 is None or e1 is None:
        return {"available": False, "reason": "NVML energy counter unavailable"}
    joules = (e1 - e0) / 1000.0
    return {"available": True, "blocks": n, "joules_per_block": joules / n,
            "power_w_mean": joules / (t1 - t0), "wall_ms_per_block": (t1 - t0) * 1000.0 / n,
            "source": "NVML nvmlDeviceGetTotalEnergyConsumption around the blocks"}


def run(gemm, args):
    torch.manual_seed(0)
    S, H, heads, Fd = args.seq, 5376, 56, 14336
    int8 = gemm == "int8_convrot"
    qk_rope = args.qk_rope or ("ck" if int8 else "torch")
    swiglu = args.swiglu or ("fused" if int8 else "eager")
    if swiglu == "fused" and not int8:
        raise ValueError("--swiglu fused needs --gemm int8_convrot")
    blk = Block(H, heads, Fd, gemm, args.attention, qk_rope, swiglu)
    x = torch.randn(S, H, device="cuda", dtype=torch.bfloat16)
    mod = [torch.randn(S, H, device="cuda", dtype=torch.bfloat16) * 0.1 for _ in range(6)]
    rope_tab = rope_tables(S)
    info = {"attention": args.attention, "qk_rope": qk_rope, "swiglu": swiglu}
    if int8:
        info.update(comfy_kitchen_info(blk, x))
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()  # the peak of the timed blocks, not of that check

    def timed(instrumented):
        events = []

        def mark(name):  # an event after the stage's launches
            if instrumented:
                e = torch.cuda.Event(enable_timing=True)
                e.record()
                events.append((name, e))

        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        mark("start")
        blk.forward(x, mod, rope_tab, mark)
        end.record()
        end.synchronize()
        comps = {}
        for (_, a), (name, b) in zip(events, events[1:]):
            comps[name] = comps.get(name, 0.0) + a.elapsed_time(b)
        return start.elapsed_time(end), comps

    for _ in range(args.warmup):
        timed(False)
    plain = [timed(False)[0] for _ in range(args.iters)]
    per = [timed(True)[1] for _ in range(args.iters)]
    comps = {c: statistics.median(p[c] for p in per) for c in COMPONENTS}
    out = {"block_ms": statistics.median(plain), "components_ms": comps,
           "peak_allocated_bytes": torch.cuda.max_memory_allocated(), **info}
    if args.energy_seconds > 0:
        out["energy"] = energy_per_block(lambda: blk.forward(x, mod, rope_tab, lambda _: None),
                                         out["block_ms"], args.energy_seconds)
    return out


def comfy_kitchen_info(blk, x):
    """Which comfy-kitchen backend serves the block's int8 linear, checked once, plus a
    relative error of the QKV projection against bf16 F.linear on the dequantized weight."""
    import comfy_kitchen as ck
    from comfy_kitchen.registry import registry
    qt = blk.qkv.w
    kw = {"x": x, "weight": qt._qdata, "weight_scale": qt._params.scale, "bias": None,
          "out_dtype": x.dtype, "convrot": True, "convrot_groupsize": 256, "input_act": None,
          "input_act_weight": None, "input_act_eps": 0.0, "residual": None,
          "residual_scale": None}
    xs = x[:4096]
    ref = F.linear(xs, qt.dequantize().to(torch.bfloat16)).float()
    got = F.linear(xs, qt).float()
    try:
        import importlib.metadata as md
        version = md.version("comfy-kitchen")
    except Exception:  # noqa: BLE001
        version = getattr(ck, "__version__", "unknown")
    return {"comfy_kitchen": version,
            "int8_linear_backend": registry.get_capable_backend("int8_linear", kw),
            "weight_scale_shape": list(qt._params.scale.shape),
            "qkv_rel_l2_vs_dequantized_bf16": ((got - ref).norm() / ref.norm()).item()}


def import_comfy_kitchen():
    """As ComfyUI's comfy/quant_ops.py: import comfy_kitchen and, with no --enable-triton-backend,
    disable its triton backend (so the CUDA backend serves int8_linear)."""
    import comfy_kitchen as ck
    from comfy_kitchen.backends import cuda as ck_cuda
    if not ck_cuda._EXT_AVAILABLE:
        raise RuntimeError(f"comfy_kitchen CUDA extension unavailable: {ck_cuda._EXT_ERROR}")
    ck.registry.disable("triton")
    return ck


def latent_rows(width, height, frames, text_len=100):
    """Rows of h3rt bench block's packed sequence for a video of width x height x frames
    (apps/cli/request.cpp latent_shape_for + make_t2va_layout): text_len text rows (h3rt's
    bench default, 100), 2 x ceil(frames / 24 * 40) audio rows, and (H/32) * (W/32) rows per
    latent frame, a latent frame covering 1, 4, 4, 4, 4 video frames in turn.
    1344x768x124 -> 37810 (the seed shape); 864x480x124 -> 15499."""
    if width % 32 or height % 32:
        raise ValueError("width and height must be multiples of 32")
    t = covered = 0
    while covered < frames:
        covered += (1, 4, 4, 4, 4)[t % 5]
        t += 1
    if covered != frames:
        raise ValueError(f"--frames {frames} is not a whole number of latent frames")
    audio = math.ceil(frames / 24.0 * 40.0 - 1e-9)
    return text_len + 2 * audio + t * (height // 32) * (width // 32)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seq", type=int, default=37810,
                    help="rows: 37810 is the seed shape (1344x768x124), 15499 is 864x480x124")
    ap.add_argument("--width", type=int, help="video width in pixels (with --height/--frames: "
                    "rows as h3rt computes them; overrides --seq)")
    ap.add_argument("--height", type=int)
    ap.add_argument("--frames", type=int)
    ap.add_argument("--gemm", choices=["bf16", "fp8", "int8_convrot", "both"], default="both",
                    help="both: bf16 and fp8")
    ap.add_argument("--attention", choices=["sdpa", "sage"], default="sdpa")
    ap.add_argument("--qk-rope", choices=["torch", "ck"], default=None,
                    help="Q/K RMSNorm+RoPE: eager torch, or comfy_kitchen.rms_rope_split_half_ "
                    "in place as ComfyUI's H3 (default: ck with int8_convrot, else torch)")
    ap.add_argument("--swiglu", choices=["eager", "fused"], default=None,
                    help="fused: SwiGLU folded into fc2's int8 quantizer as ComfyUI's H3 MLP "
                    "(default with int8_convrot), eager: torch SwiGLU then fc2")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--energy-seconds", type=float, default=0.0,
                    help="also measure joules per block over about this many seconds of blocks "
                    "run back to back (NVML energy counter; 0: not measured)")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    shape = [args.width, args.height, args.frames]
    if any(v is not None for v in shape):
        if None in shape:
            ap.error("--width, --height and --frames go together")
        args.seq = latent_rows(*shape)
    if args.gemm == "int8_convrot" or args.qk_rope == "ck":
        import_comfy_kitchen()
    res = {"what": "eager PyTorch H3 block (peer of h3rt bench block)",
           "device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "cuda": torch.version.cuda, "seq": args.seq, "attention": args.attention,
           "results": {}}
    if None not in shape:
        res["video"] = {"width": args.width, "height": args.height, "frames": args.frames}
    for gemm in (["bf16", "fp8"] if args.gemm == "both" else [args.gemm]):
        try:
            r = run(gemm, args)
        except Exception as e:  # fp8 _scaled_mm needs sm_89+; int8_convrot needs comfy_kitchen
            r = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        res["results"][gemm] = r
        print(json.dumps({gemm: r}), flush=True)
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
