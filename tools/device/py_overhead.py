#!/usr/bin/env python3
"""Python forward overhead over the C++ forward (issue 16 targets: < 1% at the seed shape, < 50 us
per call at the tiny shape). Reports only; no thresholds.

On the GPU machine, from a CUDA build with H3RT_PYTHON=ON:
  PYTHONPATH=build-device/python python3 tools/device/py_overhead.py --preset tiny \
      --cli build-device/h3rt
  PYTHONPATH=build-device/python python3 tools/device/py_overhead.py --preset h3 \
      --width 1344 --height 768 --frames 124 --attention sage --reps 5 --cli build-device/h3rt

Per call (CUDA graphs warm, the text unchanged so the refiner does not rerun):
  - wall: a loop of calls with one torch.cuda.synchronize() at the end, divided by the calls
    (torch CUDA latents in and out: the device forward, no host round trip of the latents);
  - host: the time the Python call itself takes to return (it does not wait for the GPU);
  - gpu: CUDA events on torch's current stream around each call (h3rt's work is ordered on it);
  - the same wall for numpy (host) latents, for comparison;
  - the C++ figures when --cli is given: `h3rt bench step --device-io` for the same shape runs
    the same work without Python (the Python module's CUDA-latents path in C++: the strided_copy
    patchify, forward_request with device rows, the unpatchify into out latents; the same model,
    sigma, text and stream), timed the same way: its device_io.forward_ms_per_call_wall; and, for
    reference only, its graph step_ms_p50 (host rows in, velocities copied to the host: not the
    same work).
The overhead is python wall - C++ device-io wall per call (us and % of the C++ figure), for the
device calls with new result tensors (device_latents) and with out= (device_latents_out, the
same outputs as the C++ call).
"""
import argparse
import json
import subprocess
import time

import numpy as np
import torch

import h3rt

def inputs(model, a):
    c = model.config
    try:
        s = h3rt.latent_shape(a.width, a.height, a.frames)
    except ValueError as e:
        raise SystemExit(f"--width / --height / --frames: {e}")
    T, H, W, N = s["frames"], s["height"], s["width"], s["audio"]
    g = torch.Generator(device="cuda").manual_seed(0)
    video = torch.randn(1, c["in_channels"], T, H, W, device="cuda", generator=g)
    audio = torch.randn(1, c["audio_channels"], 2, N, device="cuda", generator=g)
    text = np.random.default_rng(0).standard_normal((a.text, c["text_dim"])).astype(np.float32)
    return video, audio, text


def timed(call, reps):
    for _ in range(3):  # eager, capture, replay
        call()
    torch.cuda.synchronize()
    host, gpu = [], []
    t0 = time.perf_counter()
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        h0 = time.perf_counter()
        call()
        host.append(time.perf_counter() - h0)
        e1.record()
        gpu.append((e0, e1))
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) / reps
    return {"wall_ms": wall * 1e3, "host_ms": 1e3 * float(np.median(host)),
            "gpu_ms": float(np.median([a.elapsed_time(b) for a, b in gpu]))}


def cpp_figures(a):
    """`h3rt bench step --device-io` for the same shape: (device-io report, graph step ms)."""
    cmd = [a.cli, "bench", "step", "--preset", a.preset, "--attention", a.attention,
           "--width", str(a.width), "--height", str(a.height), "--frames", str(a.frames),
           "--reps", str(a.reps), "--device-io", "--out", "-"]
    rep = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    return rep["device_io"], rep["step_ms_p50_cuda_graph"]


def overhead(r, cpp_ms):
    """Python wall - C++ device-io wall per call, in us and % of the C++ figure."""
    for k in ("device_latents", "device_latents_out"):
        d = r[k]["wall_ms"] - cpp_ms
        r[k]["python_minus_cpp_device_io_us_per_call"] = 1e3 * d
        r[k]["python_minus_cpp_device_io_pct"] = 100.0 * d / cpp_ms


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="tiny", choices=["tiny", "h3"])
    p.add_argument("--width", type=int, default=192)
    p.add_argument("--height", type=int, default=128)
    p.add_argument("--frames", type=int, default=22)
    p.add_argument("--text", type=int, help="text tokens (default: 10, 100 for h3, as bench step)")
    p.add_argument("--attention", default="bf16", choices=["bf16", "sage"])
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--cli", help="the h3rt CLI, for the C++ `bench step --device-io` figures")
    a = p.parse_args()
    preset_text = 100 if a.preset == "h3" else 10
    if a.cli and a.text not in (None, preset_text):
        raise SystemExit(f"--text {a.text}: `bench step` runs the preset's {preset_text} text "
                         "tokens; leave --text out with --cli")
    a.text = a.text or preset_text
    model = h3rt.preset(a.preset, device="cuda", attention=a.attention)
    video, audio, text = inputs(model, a)
    out = (torch.empty_like(video), torch.empty_like(audio))
    host_v, host_a = video.cpu().numpy(), audio.cpu().numpy()
    r = {"shape": {"video": list(video.shape), "audio": list(audio.shape), "text": a.text},
         "device_latents": timed(lambda: model.forward_latents(video, audio, 0.7, text), a.reps),
         "device_latents_out": timed(
             lambda: model.forward_latents(video, audio, 0.7, text, out=out), a.reps),
         "host_latents": timed(lambda: model.forward_latents(host_v, host_a, 0.7, text),
                               max(1, a.reps // 5))}
    del model, video, audio, out  # the bench loads its own model(s) on the same GPU
    if a.cli:
        dev, step = cpp_figures(a)
        r["cpp_device_io"] = dev
        r["cpp_bench_step_graph_ms_reference"] = step  # host rows in and out: other work
        overhead(r, dev["forward_ms_per_call_wall"])
    print(json.dumps(r, indent=2))
    if a.cli:
        cpp = dev["forward_ms_per_call_wall"]
        print(f"C++ device-io forward (bench step --device-io): {1e3 * cpp:.1f} us per call "
              f"(wall; GPU p50 {1e3 * dev['forward_ms_p50_gpu']:.1f} us)")
        for k in ("device_latents", "device_latents_out"):
            print(f"Python overhead, {k}: python wall {1e3 * r[k]['wall_ms']:.1f} us - C++ "
                  f"device-io wall = {r[k]['python_minus_cpp_device_io_us_per_call']:.1f} us "
                  f"per call ({r[k]['python_minus_cpp_device_io_pct']:.2f}% of the C++ call)")
        print(f"(reference, not the same work: bench step graph step_ms_p50 = "
              f"{1e3 * step:.1f} us, host rows in and out)")


if __name__ == "__main__":
    main()
