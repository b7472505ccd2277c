"""h3rt: the C++/CUDA runtime for MiniMax H3, from Python.

    import h3rt
    m = h3rt.load("h3.safetensors", device="cpu")        # or a state dict, or h3rt.preset("tiny")
    vel_video, vel_audio = m.forward_latents(video, audio, sigma, text)
    out = h3rt.sample(m, width=192, height=128, frames=22, steps=8, seed=440420)

Arrays go in through DLPack or the buffer protocol (numpy; torch and cupy when present) and come
back as numpy arrays (torch.from_numpy shares them). On a CUDA model, CUDA arrays (torch, cupy,
__cuda_array_interface__; float32 or bfloat16) run a device forward: rows and velocities stay on
the device, ordered on the caller's stream (torch's current one by default), results are CUDA
tensors (or out=). Velocities are h3rt's: data-ward,
x0 = x + sigma * v. ComfyUI's MiniMaxH3Model._forward returns -v (its denoised = x - sigma * out).
See __init__.pyi for every signature.
"""

import json
import os
import warnings
from collections.abc import Mapping

import numpy as np

from ._h3rt import (Cancelled, Model, __version__, audio_sigma_from_video, build_info,
                    latent_shape, sigma_grid, simple_sigmas, t2va_layout, timestep_plan)
from . import _h3rt

__all__ = ["Cancelled", "Model", "load", "preset", "sample", "t2va_layout", "timestep_plan",
           "sigma_grid", "simple_sigmas", "audio_sigma_from_video", "latent_shape", "selftest",
           "build_info", "__version__"]


def _lora_list(loras):
    """[(path or name, tensors or None, strength)] from paths, (path, strength) pairs and
    (mapping, strength) pairs."""
    out = []
    for i, item in enumerate(loras):
        if isinstance(item, (str, os.PathLike)):
            out.append((os.fspath(item), None, 1.0))
        elif isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], Mapping):
            out.append((f"loras[{i}] (in-memory tensors)", _lora_tensors(i, item[0]),
                        float(item[1])))
        elif isinstance(item, (tuple, list)) and len(item) == 2:
            out.append((os.fspath(item[0]), None, float(item[1])))
        else:
            raise TypeError("loras: expected paths, (path, strength) or (mapping, strength) "
                            "pairs, got " + repr(item))
    return out


def _lora_tensors(i, mapping):
    """A LoRA's tensors as the library reads them: host, contiguous (torch tensors on a device
    are copied to the host; they are small beside the model); a number (an alpha) as float32."""
    out = {}
    for key, v in mapping.items():
        if not isinstance(key, str):
            raise TypeError(f"loras[{i}]: keys must be strings, got {key!r}")
        if isinstance(v, (int, float)):  # an alpha given as a number
            v = np.array([v], np.float32)
        elif hasattr(v, "detach"):  # torch (cpu() of a host tensor is the tensor itself)
            v = v.detach().cpu().contiguous()
        else:
            v = np.ascontiguousarray(v)
        out[key] = v
    return out


def load(path_or_state_dict, device="cpu", precision=None, attention="bf16", cuda_graphs=True,
         fp8_activations="static", qkv_layout="auto", loras=(), lora_skip_unmatched=False,
         check_finite="first", device_memory_limit=0, weight_stream_source="auto",
         load_progress=None):
    """Loads an H3 checkpoint: a .safetensors path (memory-mapped) or a state dict of arrays under
    the original/ComfyUI key names, viewed (not copied) where the dtype is used as stored; the
    model keeps them alive, and they must not change while it runs. With device="cuda",
    int8/uint8 CUDA tensors (int8_convrot and NVFP4 weight bytes, the bulk of a quantized
    checkpoint) and 2-D bf16 '.weight' CUDA tensors (a bf16 checkpoint's linear layers) are used
    in device memory without a copy, except the few bf16 layers h3rt computes in float32 (patch
    projections, output heads, time embedder, curve AdaLN), which it copies with one warning
    line each; other CUDA tensors are copied to the host first (h3rt keeps its own device copy
    of those). The config is inferred from the
    shapes. loras: LoRA files (ComfyUI key forms) as paths or (path, strength) pairs, or a
    LoRA's tensors in memory as (mapping of file key -> array, strength), merged in order after
    loading; pairs that do not fit raise unless lora_skip_unmatched (then a warning each). check_finite: NaN/Inf checks of the inputs and every stage's output on the first
    forward ("first", default), on every forward plus the weights once ("all"), or "off"; a
    check that fails raises RuntimeError naming what holds the value (as --check-finite).
    device_memory_limit (device="cuda"): device bytes for the weights and a step's activations,
    bytes (int/float) or a string "24GB" / "24GiB"; 0: none; "auto": the GPU's free memory at
    load less a reserve (max(1.5 GiB, 5% of the card)). Over it the blocks' weights stream
    from host memory (same bits; as --device-memory-limit); a model that cannot fit it at all
    loads its blocks straight into host memory, never whole on the GPU. weight_stream_source:
    where they stream from, "pinned" (a page-locked copy of every block), "file" (read from the
    mapped checkpoint or your host tensors as needed, through two pinned staging buffers) or
    "auto" (pinned when that fits the available host memory; as --weight-stream-source).
    load_progress(done, total) (device="cuda"): called as the transformer blocks are placed,
    (0, n) first; Ctrl-C stops the load (KeyboardInterrupt). A state dict
    whose block weights are CUDA tensors is used in place and not streamed (that would free none
    of their memory): a limit that needs streaming raises; pass CPU tensors to stream them."""
    lora_list = _lora_list(loras)
    if isinstance(path_or_state_dict, (str, os.PathLike)):
        model = _h3rt._load_path(os.fspath(path_or_state_dict), device, precision, attention,
                                 cuda_graphs, fp8_activations, qkv_layout, lora_list,
                                 lora_skip_unmatched, check_finite,
                                 _size_word(device_memory_limit), weight_stream_source,
                                 load_progress)
    elif isinstance(path_or_state_dict, Mapping):
        state = {k: _placed(k, v, device) for k, v in path_or_state_dict.items()}
        model = _h3rt._load_state_dict(state, device, precision, attention, cuda_graphs,
                                       fp8_activations, qkv_layout, lora_list,
                                       lora_skip_unmatched, check_finite,
                                       _size_word(device_memory_limit), weight_stream_source,
                                       load_progress)
    else:
        raise TypeError("path_or_state_dict: expected a path or a mapping of name -> array, got "
                        + type(path_or_state_dict).__name__)
    for w in model.lora_report["warnings"]:
        warnings.warn("h3rt: " + w)
    if device == "cuda":
        _note_untested_arch()
    return model


_noted_archs = set()


def _note_untested_arch():
    """One warning per process and GPU arch the GPU test suite has not run on (h3rt.selftest)."""
    note = _h3rt._untested_arch_note()
    if note and note not in _noted_archs:
        _noted_archs.add(note)
        warnings.warn("h3rt: " + note)


def _size_word(size):
    """A device_memory_limit as the library parses it: a string as given, a number of bytes."""
    if isinstance(size, str):
        return size
    if isinstance(size, bool) or not isinstance(size, (int, float)):
        raise TypeError("device_memory_limit: expected bytes (int or float) or a string like "
                        "'24GB', got " + type(size).__name__)
    return repr(int(size)) if float(size).is_integer() else repr(float(size))


def _seed(value, what):
    """A seed as the library takes it: an integer in [0, 2**64) (ComfyUI's seed range)."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{what}: expected an integer, got {type(value).__name__}")
    value = int(value)
    if not 0 <= value < 2**64:
        raise ValueError(f"{what} must be an integer in [0, 2**64), got {value}")
    return value


def _placed(key, v, device):
    """v where h3rt reads it: torch CUDA tensors stay on the device for a CUDA model as
    int8/uint8/float8_e4m3fn '.weight' bytes and 2-D bf16 '.weight' tensors; other CUDA tensors
    (scales, markers, norms, biases, f32/f16 layers) move to the host."""
    dev = getattr(v, "device", None)
    if getattr(dev, "type", "cpu") in ("cpu", None) or not hasattr(v, "cpu"):
        return v
    import torch
    weight = device == "cuda" and key.endswith(".weight")
    stored = (torch.int8, torch.uint8, getattr(torch, "float8_e4m3fn", torch.int8))
    if weight and (v.dtype in stored or (v.dtype == torch.bfloat16 and v.dim() == 2)):
        return v.detach().contiguous()
    return v.detach().cpu()


def preset(name="tiny", weights_seed=0, device="cpu", precision=None, attention="bf16",
           cuda_graphs=True, check_finite="first", gemm="bf16", int8_group=-1,
           device_memory_limit=0, weight_stream_source="auto", load_progress=None):
    """A built-in model with deterministic synthetic weights: "tiny" (the golden set's
    dimensions) or "h3" (the release's; GPU only in practice). gemm "fp8", "int8" or "nvfp4"
    (device="cuda" only) quantizes the block projections on the GPU as `h3rt sample --gemm`
    (int8_group: the int8 convrot group, 0 for none, -1 the preset's: 256 for h3, 64 tiny).
    device_memory_limit, weight_stream_source, load_progress: as load ("file" holds the
    synthetic blocks in pageable host memory)."""
    model = _h3rt._load_preset(name, _seed(weights_seed, "weights_seed"), device, precision,
                               attention, cuda_graphs, check_finite, gemm, int(int8_group),
                               _size_word(device_memory_limit), weight_stream_source,
                               load_progress)
    if device == "cuda":
        _note_untested_arch()
    return model


def sample(model, width=0, height=0, frames=0, steps=8, seed=440420, text=None, progress=None,
           audio_seconds=0.0, text_tokens=0, sampler="euler", scheduler="diffusers", shift=12.0,
           audio_shift=3.0, checkpoint=None, checkpoint_every=0, resume=None,
           sparse_attention=0.0, dense_steps=10, dense_blocks=2, step_cache=0.0,
           step_cache_max=3, video_denoise_mask=None, audio_denoise_mask=None,
           video_latent_image=None, audio_latent_image=None, sparse_check=0,
           sparse_check_bound=0.05):
    """The whole denoising loop, the same noise and bits as `h3rt sample` with the same
    options. Returns {"video_latents": [1,24,T,H/16,W/16], "audio_latents": [2,32,N],
    "stages": [per-step seconds], "sigmas": the schedule, "resumed_steps", "sampler_state":
    "device" when a CUDA model's loop kept the latents on the GPU between steps, else "host"}.
    progress(step, steps, seconds) is called before the first step and after each; returning
    False (or Ctrl-C) raises h3rt.Cancelled. scheduler "diffusers" (the reference's Euler,
    default) or "simple" (ComfyUI's schedule and loop) with sampler "euler", "res_multistep" or
    "euler_ancestral"; shift / audio_shift the sigma shifts. checkpoint: a resume file written
    every checkpoint_every steps and when cancelled; resume: continue from one (refused,
    naming the difference, when it comes from another model or request).
    The hybrid (off by default; `h3rt sample --sparse-attention/--dense-steps/--dense-blocks/
    --step-cache/--step-cache-max/--sparse-check/--sparse-check-bound`): sparse_attention
    tau > 0 runs block-sparse attention (CUDA, attention="sage") from step dense_steps on, in
    blocks from dense_blocks on; sparse_check K > 0 recomputes a seeded sample of query tiles
    densely on the first sparse step and every K-th after it and turns the (block, head) pairs
    whose relative L1 reaches sparse_check_bound dense for the rest of the run; step_cache > 0
    reuses the rest of the network when block 0's residual moved by less than that relative
    L1, at most step_cache_max steps in a row. out["hybrid"] says per step what ran
    ({"attention", "sparse_fraction", "step_cache", "relative_l1", "sparse_check"}; the last
    None except on check steps: {"tiles_per_block", "blocks", "rel_l1" [block][head],
    "turned_dense" [(block, head)], "dense_heads"}).
    Denoise masks (scheduler="simple"; float32, 1 generate, 0 keep): video_denoise_mask
    [T, H/16, W/16], audio_denoise_mask [2, N], with the clean latents they keep,
    video_latent_image [1, 24, T, H/16, W/16] and audio_latent_image [2, 32, N] (absent: zeros),
    blended in as ComfyUI's KSamplerX0Inpaint does (as `h3rt sample` with those tensors in an
    inputs or conditioning file)."""
    return _h3rt._sample(model, width, height, frames, steps, _seed(seed, "seed"), text, progress,
                         audio_seconds, text_tokens, sampler, scheduler, float(shift),
                         float(audio_shift), None if checkpoint is None else str(checkpoint),
                         checkpoint_every, None if resume is None else str(resume),
                         float(sparse_attention), int(dense_steps), int(dense_blocks),
                         float(step_cache), int(step_cache_max), int(sparse_check),
                         float(sparse_check_bound), video_denoise_mask,
                         audio_denoise_mask, video_latent_image, audio_latent_image)


def selftest(seed=0):
    """The GPU kernels this build runs on this GPU against the CPU reference on fresh random data
    (`h3rt selftest`; include/h3rt/selftest.h says what each case checks). Returns the report as
    a dict: "passed" (bool), "device", "compute_capability", "gpu_suite_ran_on_this_arch",
    "seed" (the one used; seed=0 draws a fresh one) and "cases" (name, result "passed" /
    "failed" / "skipped", detail, seconds). Raises RuntimeError when the build has no CUDA
    backend or no CUDA device is available."""
    return json.loads(_h3rt._selftest(int(_seed(seed, "seed"))))
