#!/usr/bin/env python3
"""Host cost per call of the ComfyUI node's route, forward_conditioned (plain t2va included, with
and without flow shifts), against forward_latents: torch CUDA latents of 864x480x124 on the tiny
preset, where the compute is small and the host work shows. Prints ms per call: wall (a loop of
30 calls after 5, one sync) and host (the call's own return), two rounds. Reports only.

On the GPU machine, from a CUDA build with H3RT_PYTHON=ON:
  PYTHONPATH=build-device/python python3 tools/device/node_route_cost.py"""
import statistics
import time

import numpy as np
import torch

import h3rt

m = h3rt.preset("tiny", device="cuda", attention="bf16")
s = h3rt.latent_shape(864, 480, 124)
g = torch.Generator(device="cuda").manual_seed(0)
video = torch.randn(1, 24, s["frames"], s["height"], s["width"], device="cuda", generator=g)
audio = torch.randn(1, 32, 2, s["audio"], device="cuda", generator=g)
text = np.random.default_rng(0).standard_normal((1, 100, 64)).astype(np.float32)
tags = np.ones(100, np.int64)
calls = {
    "forward_latents": lambda: m.forward_latents(video, audio, 0.7, text),
    "forward_conditioned": lambda: m.forward_conditioned(video, audio, 0.7, text, text_tags=tags,
                                                         mask_outputs=False),
    "forward_conditioned_shifted": lambda: m.forward_conditioned(
        video, audio, 0.7, text, text_tags=tags, mask_outputs=False, video_shift=6.37,
        audio_shift=2.9),
}
for rnd in range(2):
    for name, f in calls.items():
        for _ in range(5):
            f()
        torch.cuda.synchronize()
        host = []
        t0 = time.perf_counter()
        for _ in range(30):
            h = time.perf_counter()
            f()
            host.append(time.perf_counter() - h)
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) / 30
        print(f"round {rnd} {name:28s} wall {wall * 1e3:7.3f} ms/call, host p50 "
              f"{statistics.median(host) * 1e3:7.3f} ms")
