"""h3rt's Python package on the GPU with torch CUDA tensors (skipped without torch, a CUDA device
or a CUDA build of h3rt): int8_convrot weight bytes passed as CUDA tensors are used in place and
give the same bits as the checkpoint loaded by path; CUDA input arrays are refused with a clear
error (device-array inputs are not zero-copy yet)."""
import subprocess

import numpy as np
import pytest

import h3rt
from safetensors_np import read_safetensors
from test_h3rt import GOLDEN, WEIGHTS, find_cli

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device for torch", allow_module_level=True)
try:
    h3rt.preset("tiny", device="cuda")
except RuntimeError as e:  # a CPU-only build of h3rt
    pytest.skip(f"h3rt without CUDA: {e}", allow_module_level=True)


@pytest.fixture(scope="module")
def int8_file(tmp_path_factory):
    cli = find_cli()
    if cli is None:
        pytest.skip("no h3rt CLI next to this package (set H3RT_CLI)")
    out = tmp_path_factory.mktemp("int8") / "int8_convrot.safetensors"
    subprocess.run([cli, "quantize-checkpoint", "--in", str(WEIGHTS), "--out", str(out),
                    "--format", "int8_convrot", "--group-size", "64"], check=True,
                   capture_output=True)
    return out


def golden_inputs():
    g = read_safetensors(GOLDEN / "golden.safetensors")
    video = g["input/video_latents"]
    audio = g["input/audio_latents"].transpose(1, 0, 2)[None].copy()
    return video, audio, g["input/text_embeds"]


def test_int8_weight_bytes_on_the_device_are_used_in_place(int8_file):
    state = {k: torch.from_numpy(v.copy()) for k, v in read_safetensors(int8_file).items()}
    on_device = {k for k, v in state.items() if v.dtype == torch.int8 and k.endswith(".weight")}
    assert on_device, "the int8 checkpoint has int8 weights"
    state = {k: v.cuda() if k in on_device else v for k, v in state.items()}
    ptrs = {k: state[k].data_ptr() for k in on_device}
    m = h3rt.load(state, device="cuda")
    assert all(state[k].is_cuda and state[k].data_ptr() == ptrs[k] for k in on_device)
    ref = h3rt.load(int8_file, device="cuda")
    video, audio, text = golden_inputs()
    for a, b in zip(m.forward_latents(video, audio, 0.7, text),
                    ref.forward_latents(video, audio, 0.7, text)):
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


def test_device_tensors_for_a_cpu_model_move_to_the_host(int8_file):
    state = {k: torch.from_numpy(v.copy()).cuda() for k, v in read_safetensors(int8_file).items()}
    video, audio, text = golden_inputs()
    got = h3rt.load(state).forward_latents(video, audio, 0.7, text)
    want = h3rt.load(int8_file).forward_latents(video, audio, 0.7, text)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_cuda_input_arrays_are_refused_clearly():
    m = h3rt.load(WEIGHTS, device="cuda")
    video, audio, text = golden_inputs()
    with pytest.raises(NotImplementedError, match="video"):
        m.forward_latents(torch.from_numpy(video).cuda(), audio, 0.7, text)
