#!/usr/bin/env python3
"""Times torch scaled_dot_product_attention (bf16, non-causal) at the seed attention shape on
the local GPU, per backend (cuDNN, flash), on contiguous [1, H, S, 128] tensors and on q/k/v
views of one strided QKV buffer [S, 3, H, 128]. Median of CUDA-event timings after warm-up."""
import argparse
import json

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from cuda_timing import median_ms  # bench/, the script's own folder


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", type=int, default=37810)
    ap.add_argument("--heads", type=int, default=56)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    S, H, D = args.seq, args.heads, 128
    flops = 4.0 * S * S * D * H
    qkv = torch.randn(S, 3, H, D, device="cuda", dtype=torch.bfloat16)
    strided = [qkv[:, i].unsqueeze(0).transpose(1, 2) for i in range(3)]  # [1, H, S, D] views
    contiguous = [t.contiguous() for t in strided]
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "seq": S,
           "heads": H, "flops": flops, "results": {}}
    for name, backend in [("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)]:
        for layout, (q, k, v) in [("contiguous", contiguous), ("strided", strided)]:
            key = f"{name}_{layout}"
            try:
                with sdpa_kernel([backend]):
                    ms = median_ms(lambda: F.scaled_dot_product_attention(q, k, v), args.warmup, args.iters)
                res["results"][key] = {"ms": ms, "tflops": flops / ms / 1e9}
                print(f"{key:20s} {ms:9.3f} ms  {flops / ms / 1e9:7.1f} TFLOP/s", flush=True)
            except Exception as e:  # a backend may refuse a layout
                res["results"][key] = {"error": str(e)[:200]}
                print(f"{key:20s} unavailable: {str(e)[:120]}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
