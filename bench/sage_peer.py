#!/usr/bin/env python3
"""Side-by-side comparison of h3rt's Sage attention with the public SageAttention2 (`sageattn`)
on the same inputs, on the GPU machine (build the peer first: tools/peers/build_sageattention.sh).

  accuracy: for each input family (N(0,1); a large shared K offset; a few outlier channels;
            smooth spatio-temporal Q/K that make attention local; S not a multiple of 128; a tiny
            S), both outputs are compared with an fp64 reference: relative L2 and cosine.
            h3rt runs through `h3rt bench attention --inputs/--outputs` on the bf16 QKV rows
            [S, 3*H*128] that the model produces; sageattn reads strided NHD views of the same
            rows (its documented layout), so neither side copies its input here.
  timing:   sageattn's whole call at the seed shape (S=37,810, 56 heads), strided NHD views and
            contiguous HND tensors, with PyTorch's cuDNN SDPA (bf16) timed beside it; CUDA events,
            median of --iters after --warmup.

Usage: PYTHONPATH=/tmp/sage-peer python3 bench/sage_peer.py --h3rt build-device/h3rt --json out.json
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from cuda_timing import median_ms  # bench/, the script's own folder

D = 128


def family(name, s, h, gen):
    """QKV rows [S, 3, H, 128] (bf16) of one input family."""
    def normal(*shape):
        return torch.randn(*shape, generator=gen, device="cuda", dtype=torch.float32)

    qkv = normal(s, 3, h, D)
    if name == "k_offset":  # a shared K offset much larger than the per-token variation
        qkv[:, 1] += 8.0 * normal(1, h, D)
    elif name == "outliers":  # a few channels 20x larger in Q and K
        ch = torch.randperm(D, generator=gen, device="cuda")[:4]
        qkv[:, 0:2, :, ch] *= 20.0
    elif name == "smooth":  # tokens on a (t, y, x) grid; Q/K smooth in position -> local attention
        side = max(1, round((s / 8) ** (1 / 2)))
        idx = torch.arange(s, device="cuda", dtype=torch.float32)
        pos = torch.stack([idx // (side * side), (idx // side) % side, idx % side], 1) / side
        freq = 6.0 * normal(3, 64)
        phase = 2 * math.pi * torch.rand(64, generator=gen, device="cuda")
        feat = torch.cat([torch.sin(pos @ freq + phase), torch.cos(pos @ freq + phase)], 1)
        for j in range(2):  # Q and K: the same smooth features through per-head projections
            proj = normal(h, D, D) / math.sqrt(D)
            qkv[:, j] = 3.0 * torch.einsum("sc,hdc->shd", feat, proj) + 0.1 * normal(s, h, D)
    return qkv.to(torch.bfloat16)


def reference_f64(qkv):
    """softmax(q k^T / sqrt(128)) v in fp64, [S, H*128]."""
    s, _, h, _ = qkv.shape
    out = torch.empty(s, h, D, dtype=torch.float64, device="cuda")
    for hh in range(h):
        q, k, v = (qkv[:, j, hh].double() for j in range(3))
        for r in range(0, s, 4096):
            p = torch.softmax(q[r:r + 4096] @ k.T / math.sqrt(D), dim=-1)
            out[r:r + 4096, hh] = p @ v
    return out.reshape(s, h * D)


def errors(out, ref):
    o = out.double().reshape(-1)
    r = ref.reshape(-1)
    return {"rel_l2": ((o - r).norm() / r.norm()).item(),
            "cosine": F.cosine_similarity(o, r, dim=0).item()}


def sage_nhd(sageattn, qkv):
    q, k, v = (qkv[:, j].unsqueeze(0) for j in range(3))  # strided [1, S, H, D] views
    return sageattn(q, k, v, tensor_layout="NHD", is_causal=False)[0]


def accuracy(args, sageattn):
    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    cases = [(f, args.acc_seq, args.acc_heads) for f in ("normal", "k_offset", "outliers", "smooth")]
    cases += [("normal_s1000", 1000, 2), ("normal_s77", 77, 2)]
    inputs = {}
    for name, s, h in cases:
        inputs[name] = family(name.split("_s")[0], s, h, gen)
    with tempfile.TemporaryDirectory() as tmp:
        fin, fout = os.path.join(tmp, "qkv.safetensors"), os.path.join(tmp, "out.safetensors")
        save_file({n: x.reshape(x.shape[0], -1).cpu() for n, x in inputs.items()}, fin)
        subprocess.run([args.h3rt, "bench", "attention", "--inputs", fin, "--outputs", fout],
                       check=True)
        ours = load_file(fout)
    res = {}
    for name, qkv in inputs.items():
        ref = reference_f64(qkv)
        e_ours = errors(ours[name].cuda(), ref)
        e_sage = errors(sage_nhd(sageattn, qkv).reshape(qkv.shape[0], -1), ref)
        res[name] = {"seq": qkv.shape[0], "heads": qkv.shape[2], "h3rt": e_ours,
                     "sageattn": e_sage, "rel_l2_ratio": e_ours["rel_l2"] / e_sage["rel_l2"]}
        print(f"{name:14s} S={qkv.shape[0]:6d}  h3rt rel L2 {e_ours['rel_l2']:.5f} cos "
              f"{e_ours['cosine']:.6f} | sageattn rel L2 {e_sage['rel_l2']:.5f} cos "
              f"{e_sage['cosine']:.6f} | ratio {res[name]['rel_l2_ratio']:.3f}", flush=True)
    return res


def timing(args, sageattn):
    gen = torch.Generator(device="cuda").manual_seed(args.seed + 1)
    s, h = args.seq, args.heads
    qkv = family("k_offset", s, h, gen)
    q, k, v = (qkv[:, j].unsqueeze(0) for j in range(3))
    qh, kh, vh = (x.transpose(1, 2).contiguous() for x in (q, k, v))  # [1, H, S, D]
    flops = 4.0 * s * s * D * h
    res = {"seq": s, "heads": h, "flops": flops}
    runs = {
        "sageattn_nhd_strided_ms": lambda: sageattn(q, k, v, tensor_layout="NHD"),
        "sageattn_hnd_contiguous_ms": lambda: sageattn(qh, kh, vh, tensor_layout="HND"),
    }
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(qh, kh, vh)
    runs["cudnn_sdpa_bf16_ms"] = cudnn
    for name, fn in runs.items():
        res[name] = median_ms(fn, args.warmup, args.iters)
        print(f"{name:28s} {res[name]:8.3f} ms  {flops / res[name] / 1e9:6.1f} TFLOP/s", flush=True)
    ref = F.scaled_dot_product_attention(qh, kh, vh).float()
    res["sageattn_rel_l2_vs_cudnn"] = ((sageattn(qh, kh, vh, tensor_layout="HND").float() - ref)
                                       .norm() / ref.norm()).item()
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--h3rt", required=True, help="path of the h3rt binary (CUDA build)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--seq", type=int, default=37810)
    ap.add_argument("--heads", type=int, default=56)
    ap.add_argument("--acc-seq", type=int, default=37810, help="S of the accuracy cases")
    ap.add_argument("--acc-heads", type=int, default=2, help="heads of the accuracy cases")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--skip-timing", action="store_true")
    args = ap.parse_args()
    try:
        from sageattention import sageattn
    except ImportError as e:
        sys.exit(f"sage_peer: cannot import sageattention ({e}); build it with "
                 "tools/peers/build_sageattention.sh and put it on PYTHONPATH")
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "accuracy": accuracy(args, sageattn)}
    if not args.skip_timing:
        out["timing"] = timing(args, sageattn)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
