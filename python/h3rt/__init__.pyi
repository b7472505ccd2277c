"""Type stubs of h3rt (see __init__.py)."""
import os
from collections.abc import Callable, Mapping
from typing import Any, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

__version__: str
ArrayLike = Any  # numpy arrays; torch / cupy tensors (DLPack); host memory on CPU models
# On a CUDA model, CUDA arrays too (DLPack or __cuda_array_interface__), float32 or bfloat16.
# Outputs of a device call: torch tensors for torch inputs, else DLPack-capable CUDA arrays.
Result = Any
Stream = Any  # None, an int cudaStream_t handle, or an object with .cuda_stream

class Cancelled(RuntimeError):
    """The progress callback returned False."""

Layout = dict[str, Any]     # h3rt.t2va_layout(): sizes and numpy index arrays
Timesteps = dict[str, Any]  # h3rt.timestep_plan(): {"timestep": [M], "timestep_indices": [S]}

class Model:
    @property
    def config(self) -> dict[str, Any]:
        """hidden, layers, heads, head_dim, ffn, text_dim, in_channels, audio_channels,
        refiner_layers, video_features, freq_dim, time_embed_dim, time_embed_hidden, rope_freqs,
        pdd_heads (> 1: PDD head bank), adaln ("full" | "curve"), adaln_curve_grid/rank,
        device, precision."""
    @property
    def device(self) -> str: ...
    @property
    def precision(self) -> str: ...
    @property
    def device_peak_bytes(self) -> tuple[int, int]:
        """(allocated, reserved) peak bytes of h3rt's device memory pool (process-wide, all
        models); (0, 0) on the CPU."""
    @property
    def lora_report(self) -> dict[str, Any]:
        """What load(loras=...) merged: {"pairs": int, "layers": int, "warnings": [str]}."""
    @property
    def weight_streaming(self) -> dict[str, Any]:
        """How device_memory_limit placed the block weights, as the reports' weight_streaming:
        streamed (blocks live in host memory), streamed_blocks (how many: as few as the limit
        needs, the rest resident), source ("pinned" or "file"), streamed_at_load (they went there as
        they loaded, never whole on the GPU), load_peak_device_bytes (the load's peak in h3rt's
        device pool), caller_device_bytes (block weights used in place from CUDA tensors you
        passed), slots, slot_bytes, host_bytes, h2d_bytes_per_step, resident_weight_bytes,
        planned_device_bytes, device_memory_limit, device_memory_limit_auto (the limit came from
        "auto": the GPU's free memory at load less a reserve). Zeros on the CPU."""
    def forward(self, video_rows: ArrayLike, audio_rows: ArrayLike, text: ArrayLike, *,
                layout: Layout, timesteps: Timesteps, sigma: Optional[float] = None,
                sample_sigmas: Optional[Sequence[float]] = None, video_shift: float = 12.0,
                audio_shift: float = 3.0, out: Optional[tuple[ArrayLike, ArrayLike]] = None,
                stream: Stream = None) -> tuple[Result, Result]:
        """One forward on rows as h3rt packs them: video_rows [Nv, 96] (patchified, feature
        c*4 + iy*2 + ix), audio_rows [2N, 32] (row ch*N + j), text [L, text_dim] or
        [1, L, text_dim], float32. Returns the data-ward velocities [Nv, 96], [2N, 32].
        sigma and sample_sigmas: the sampler's schedule, needed by PDD head banks only (which
        also weight their heads by video_shift and audio_shift).

        Device forward (a CUDA model, video_rows and audio_rows both CUDA arrays on the model's
        device, float32 or bfloat16, any strides): the rows are read in place when float32 and
        contiguous (else one device copy), the velocities are float32 CUDA arrays (torch
        tensors for torch inputs), or written into out=(video, audio) (CUDA arrays of those
        shapes, float32 or bfloat16, any strides). All work is ordered on `stream` (default:
        torch's current stream for torch inputs, else the legacy default stream) and the call
        returns without waiting for it. text stays a host array (a CUDA one is copied to the
        host, which waits for the stream). New torch results come from torch.empty on torch's
        current stream: with stream= another stream, order their later use yourself (e.g.
        tensor.record_stream or a synchronize)."""
    def forward_latents(self, video: ArrayLike, audio: ArrayLike, sigma: float,
                        text: ArrayLike, sample_sigmas: Optional[Sequence[float]] = None, *,
                        video_shift: float = 12.0, audio_shift: float = 3.0,
                        out: Optional[tuple[ArrayLike, ArrayLike]] = None, stream: Stream = None
                        ) -> tuple[Result, Result]:
        """Velocities of ComfyUI-layout latents on the t2va layout: video [1, 24, T, H, W],
        audio [1, 32, 2, N], text [1, L, text_dim] or [L, text_dim], float32, at video sigma.
        t_video = 1 - sigma, t_audio = 1 - audio_sigma_from_video(sigma, video_shift,
        audio_shift) (the reference's rounding: the audio sigma is rounded to float32 first;
        forward_conditioned rounds as ComfyUI's _forward does, 1 - the sigma in float64).
        Returns (video [1, 24, T, H, W], audio [1, 32, 2, N]) velocities, data-ward:
        x0 = x + sigma * v. ComfyUI's MiniMaxH3Model._forward returns -v for the same inputs.
        CUDA latents (float32 or bfloat16, any strides) run a device forward as forward():
        patchify, the audio axis swap and back run on the device, results in the input
        layout (float32, or out=)."""
    def forward_conditioned(self, video: ArrayLike, audio: ArrayLike, sigma: float,
                            text: ArrayLike, sample_sigmas: Optional[Sequence[float]] = None, *,
                            keyframes: Sequence[Mapping[str, Any]] = (),
                            refs: Sequence[Mapping[str, Any]] = (),
                            text_tags: Optional[ArrayLike] = None,
                            video_mask: Optional[ArrayLike] = None,
                            audio_mask: Optional[ArrayLike] = None,
                            visual_cond_noise_aug: float = 0.999,
                            audio_cond_noise_aug: float = 1.0, noise_seed: int = 0,
                            audio_scale: float = 1.0, mask_outputs: bool = True,
                            video_shift: float = 12.0, audio_shift: float = 3.0,
                            expect_layout: Optional[Mapping[str, Any]] = None,
                            out: Optional[tuple[ArrayLike, ArrayLike]] = None,
                            stream: Stream = None) -> tuple[Result, Result]:
        """ComfyUI's MiniMaxH3Model.forward with a minimax_payload (first/last-frame keyframes,
        references, text tags, denoise masks), on ComfyUI-layout latents as forward_latents;
        same sign convention (data-ward). Its layout, per-row timesteps, condition noise
        augmentation, output masks and audio carry follow ComfyUI (golden set h3_tiny_comfy).
        keyframes: dicts {"frame_index" (or "resolved_frame_index"): pixel frame >= 0,
        "latent": [1, 24, vt, H, W] or None, "audio_latent": [1, 32, 2, rt] or None,
        "noise", "audio_noise": the augmentation noise in row layout (optional)}.
        refs: dicts {"kind": "image" | "video" | "video_audio" | "audio", "latent",
        "audio_latent", "noise", "audio_noise"}. Without noise h3rt draws its own (Philox from
        noise_seed: not torch's bits; ComfyUI draws torch.randn(rows.shape) from a CPU
        generator seeded with the payload seed, seed + 1 for audio, restarted per condition).
        text_tags [L]: 1 text, 0 vision-block token. video_mask [T, H, W], audio_mask [2, N]
        (leading 1-axes allowed: ComfyUI's [1, 1, 2, N]). audio_scale != 1: the audio given is
        the sampler's carried variable (payload audio_scale). mask_outputs=False returns what
        _forward returns (negated), before forward()'s mask multiply. video_shift, audio_shift:
        the flow shifts _forward reads from transformer_options (ComfyUI's MiniMaxH3SigmaShift
        node; finite and > 0): the audio timestep, the carry and PDD head weights follow them.
        expect_layout: {"segments": (start, stop, kind) triples, "position_ids": float64
        [S, 3]}, the layout the caller's model would use (ComfyUI's PackedLayout); ValueError
        "expect_layout differs from h3rt's layout: ..." naming the first difference when h3rt's
        segments or positions (compared after the float32 cast RoPE reads them through) are
        not those.
        CUDA latents run a device forward as forward_latents (condition items, masks and text
        are read on the host: CUDA ones are copied); audio_scale must then be 1 and
        mask_outputs False when masks are given (those steps run on host arrays only)."""

def load(path_or_state_dict: Union[str, os.PathLike, Mapping[str, ArrayLike]],
         device: str = "cpu", precision: Optional[str] = None, attention: str = "bf16",
         cuda_graphs: bool = True, fp8_activations: str = "static",
         qkv_layout: str = "auto",
         loras: Sequence[Union[str, os.PathLike, Tuple[Union[str, os.PathLike], float],
                               Tuple[Mapping[str, ArrayLike], float]]] = (),
         lora_skip_unmatched: bool = False, check_finite: str = "first",
         device_memory_limit: int | float | str = 0,
         weight_stream_source: str = "auto",
         load_progress: Optional[Callable[[int, int], None]] = None) -> Model: ...
def preset(name: str = "tiny", weights_seed: int = 0, device: str = "cpu",
           precision: Optional[str] = None, attention: str = "bf16",
           cuda_graphs: bool = True, check_finite: str = "first", gemm: str = "bf16",
           int8_group: int = -1, device_memory_limit: int | float | str = 0,
           weight_stream_source: str = "auto",
           load_progress: Optional[Callable[[int, int], None]] = None) -> Model: ...
def sample(model: Model, width: int = 0, height: int = 0, frames: int = 0, steps: int = 8,
           seed: int = 440420, text: Optional[ArrayLike] = None,
           progress: Optional[Callable[[int, int, float], Optional[bool]]] = None,
           audio_seconds: float = 0.0, text_tokens: int = 0, sampler: str = "euler",
           scheduler: str = "diffusers", shift: float = 12.0, audio_shift: float = 3.0,
           checkpoint: Optional[Union[str, os.PathLike]] = None, checkpoint_every: int = 0,
           resume: Optional[Union[str, os.PathLike]] = None, sparse_attention: float = 0.0,
           dense_steps: int = 10, dense_blocks: int = 2, step_cache: float = 0.0,
           step_cache_max: int = 3, video_denoise_mask: Optional[ArrayLike] = None,
           audio_denoise_mask: Optional[ArrayLike] = None,
           video_latent_image: Optional[ArrayLike] = None,
           audio_latent_image: Optional[ArrayLike] = None) -> dict[str, Any]:
    """{"video_latents": [1, 24, T, H/16, W/16], "audio_latents": [2, 32, N], "stages": [...],
    "sigmas": [...], "resumed_steps": int, "sampler_state": "device" | "host"}; the same bits as `h3rt sample` with the same
    options (scheduler diffusers|simple, sampler euler|res_multistep|euler_ancestral).
    Denoise masks (scheduler simple): video_denoise_mask [T, H/16, W/16], audio_denoise_mask
    [2, N], and the clean latents they keep (default zeros)."""
def t2va_layout(text_len: int, audio_len: int, frames: int, height: int, width: int) -> Layout: ...
def timestep_plan(layout: Layout, t_video: float, t_audio: float) -> Timesteps: ...
def sigma_grid(points: int, shift: float = 12.0) -> list[float]: ...
def latent_shape(width: int, height: int, frames: int) -> dict[str, int]:
    """{"frames", "height", "width", "audio"}: the latents of a width x height video of `frames`
    frames (latent frames covering 1, 4, 4, 4, 4 pixel frames in turn, 16x spatial, 40 audio
    latents per second at 24 fps). ValueError for sizes h3rt refuses."""
def simple_sigmas(steps: int, shift: float = 12.0) -> list[float]: ...
def selftest(seed: int = 0) -> dict[str, Any]:
    """The GPU kernels this build runs on this GPU against the CPU reference (`h3rt selftest`):
    {"passed", "device", "compute_capability", "gpu_suite_ran_on_this_arch", "seed", "cases":
    [{"name", "result": "passed" | "failed" | "skipped", "detail", "seconds"}]}. RuntimeError
    without a CUDA backend or device."""
def build_info() -> dict[str, Any]:
    """What this build holds, as `h3rt --version` prints it ("summary"): {"version", "cuda",
    "cuda_archs", "cuda_build_version", "cuda_driver_version", "cutlass_int8_sm90",
    "cutlass_int8_sm80", "summary"}. Needs no GPU."""
def audio_sigma_from_video(sigma: float, video_shift: float = 12.0,
                           audio_shift: float = 3.0) -> float: ...
