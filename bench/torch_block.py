#!/usr/bin/env python3
"""The peer number for `h3rt bench block`: one H3 DiT block written in eager PyTorch, the way a
user runs it today without h3rt, timed at the seed shape on the local GPU.

The block follows the same math as h3rt's (RMSNorm + AdaLN modulate, fused QKV, per-head Q/K
RMSNorm, split-half RoPE on 96 of 128 channels, non-causal attention, gated residuals, SwiGLU),
with random weights; the six modulation vectors are given per row (a [S, H] tensor each), so the
table gather is not timed. Projections run either in bf16 (F.linear) or as fp8 e4m3 per-tensor-scaled
GEMMs (torch._scaled_mm with a static input scale, as ComfyUI's fp8_scaled layers do: quantize
the activation, GEMM, bf16 out). Attention is torch SDPA (cuDNN backend, falling back to flash).

Reports the median block time over repeats after warm-up (CUDA events) and a per-component
attribution from events around each stage, as JSON."""
import argparse
import json
import statistics

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
    def __init__(self, out_f, in_f, fp8):
        w = torch.randn(out_f, in_f, device="cuda", dtype=torch.bfloat16) * in_f ** -0.5
        self.fp8 = fp8
        if fp8:
            self.w_scale = (w.abs().amax().float() / 448.0).reshape(())
            self.w8 = (w.float() / self.w_scale).to(torch.float8_e4m3fn).t()  # column-major
            self.x_scale = torch.tensor(4.0 / 448.0, device="cuda")  # static input scale
        else:
            self.w = w

    def __call__(self, x):
        if not self.fp8:
            return F.linear(x, self.w)
        x8 = (x.float() / self.x_scale).clamp(-448, 448).to(torch.float8_e4m3fn)
        return torch._scaled_mm(x8, self.w8, scale_a=self.x_scale, scale_b=self.w_scale,
                                out_dtype=torch.bfloat16)


class Block:
    def __init__(self, hidden, heads, ffn, fp8):
        self.H, self.heads, self.F = hidden, heads, ffn
        inner = heads * 128
        self.qkv = Linear(3 * inner, hidden, fp8)
        self.out = Linear(hidden, inner, fp8)
        self.fc1 = Linear(2 * ffn, hidden, fp8)
        self.fc2 = Linear(hidden, ffn, fp8)
        ones = lambda n: torch.ones(n, device="cuda", dtype=torch.bfloat16)
        self.norm1, self.norm2, self.qn, self.kn = ones(hidden), ones(hidden), ones(128), ones(128)

    def forward(self, x, mod, cos, sin, mark):
        S, H, nh = x.shape[0], self.H, self.heads
        shift1, scale1, gate1, shift2, scale2, gate2 = mod
        n = rms_norm(x, self.norm1) * (1 + scale1) + shift1
        mark("norm_modulate")
        qkv = self.qkv(n)
        mark("qkv_projection")
        q, k, v = qkv.view(S, 3, nh, 128).unbind(1)
        q = rope(rms_norm(q, self.qn), cos, sin)
        k = rope(rms_norm(k, self.kn), cos, sin)
        mark("rms_rope")
        q, k, v = (t.transpose(0, 1).unsqueeze(0) for t in (q, k, v))
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
        g = F.silu(h[:, : self.F]) * h[:, self.F:]
        mark("swiglu")
        y = self.fc2(g)
        mark("mlp_fc2")
        x = x + gate2 * y
        mark("residual_gates")
        return x


def run(gemm, args):
    torch.manual_seed(0)
    S, H, heads, Fd = args.seq, 5376, 56, 14336
    blk = Block(H, heads, Fd, gemm == "fp8")
    x = torch.randn(S, H, device="cuda", dtype=torch.bfloat16)
    mod = [torch.randn(S, H, device="cuda", dtype=torch.bfloat16) * 0.1 for _ in range(6)]
    ang = torch.rand(S, 1, 96, device="cuda") * 6.28
    cos, sin = ang.cos().to(torch.bfloat16), ang.sin().to(torch.bfloat16)

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
        blk.forward(x, mod, cos, sin, mark)
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
    return {"block_ms": statistics.median(plain), "components_ms": comps,
            "peak_allocated_bytes": torch.cuda.max_memory_allocated()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seq", type=int, default=37810)
    ap.add_argument("--gemm", choices=["bf16", "fp8", "both"], default="both")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    res = {"what": "eager PyTorch H3 block (peer of h3rt bench block)",
           "device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "cuda": torch.version.cuda, "seq": args.seq, "results": {}}
    for gemm in (["bf16", "fp8"] if args.gemm == "both" else [args.gemm]):
        try:
            r = run(gemm, args)
        except Exception as e:  # fp8 _scaled_mm needs sm_89+
            r = {"error": str(e)[:300]}
        res["results"][gemm] = r
        print(json.dumps({gemm: r}), flush=True)
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
