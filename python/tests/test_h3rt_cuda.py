"""h3rt's Python package on the GPU with torch CUDA tensors (skipped without torch, a CUDA device
or a CUDA build of h3rt): int8_convrot weight bytes passed as CUDA tensors are used in place and
give the same bits as the checkpoint loaded by path; device forwards (CUDA tensors in and out,
float32/bfloat16, strided, out=, the caller's stream) give the host forward's bits."""
import json
import subprocess

import numpy as np
import pytest

import h3rt
from safetensors_np import read_safetensors
from test_h3rt import GOLDEN, WEIGHTS, find_cli, fp8_state_dict

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


def expect_used_in_place(state, on_device, path):
    """state with the on_device keys moved to the GPU: h3rt keeps those tensors where they are
    (same pointers) and computes the bits of the checkpoint loaded by path."""
    assert on_device
    state = {k: v.cuda() if k in on_device else v for k, v in state.items()}
    ptrs = {k: state[k].data_ptr() for k in on_device}
    m = h3rt.load(state, device="cuda")
    assert all(state[k].is_cuda and state[k].data_ptr() == ptrs[k] for k in on_device)
    ref = h3rt.load(path, device="cuda")
    video, audio, text = golden_inputs()
    for a, b in zip(m.forward_latents(video, audio, 0.7, text),
                    ref.forward_latents(video, audio, 0.7, text)):
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


def test_int8_weight_bytes_on_the_device_are_used_in_place(int8_file):
    state = {k: torch.from_numpy(v.copy()) for k, v in read_safetensors(int8_file).items()}
    on_device = {k for k, v in state.items() if v.dtype == torch.int8 and k.endswith(".weight")}
    expect_used_in_place(state, on_device, int8_file)


def test_loras_merge_into_int8_bytes_used_in_place(int8_file, tmp_path):
    """A LoRA whose layers are int8 bytes on the device (used in place) merges on a host copy of
    those layers: the bits of the file loaded by path with the same LoRA, given as a file or as
    in-memory tensors (torch CUDA tensors, as the ComfyUI node passes low-VRAM patches)."""
    from safetensors_np import write_safetensors
    rng = np.random.default_rng(8)
    lora = {}
    for m, out, inp in (("diffusion_model.blocks.0.attn.qkv_proj", 768, 192),
                        ("diffusion_model.blocks.1.mlp.fc1", 768, 192)):
        lora[m + ".lora_up.weight"] = (rng.standard_normal((out, 4)) * 0.1).astype(np.float32)
        lora[m + ".lora_down.weight"] = (rng.standard_normal((4, inp)) * 0.1).astype(np.float32)
        lora[m + ".alpha"] = np.array([2.0], np.float32)
    path = tmp_path / "lora.safetensors"
    write_safetensors(path, lora)
    state = {k: torch.from_numpy(v.copy()) for k, v in read_safetensors(int8_file).items()}
    state = {k: v.cuda() if v.dtype == torch.int8 and k.endswith(".weight") else v
             for k, v in state.items()}
    video, audio, text = golden_inputs()
    want = h3rt.load(int8_file, device="cuda", loras=[(path, 0.5)]).forward_latents(
        video, audio, 0.7, text)
    plain = h3rt.load(int8_file, device="cuda").forward_latents(video, audio, 0.7, text)
    on_gpu = {k: torch.from_numpy(v).cuda() for k, v in lora.items()}
    for loras in ([(path, 0.5)], [(on_gpu, 0.5)]):
        m = h3rt.load(state, device="cuda", loras=loras)
        assert m.lora_report["pairs"] == 2
        for a, b, p in zip(m.forward_latents(video, audio, 0.7, text), want, plain):
            np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))
            assert np.abs(a - p).max() > 0


def test_fp8_weight_bytes_on_the_device_load_as_the_file(tmp_path):
    # ComfyUI's fp8_scaled weights as torch.float8_e4m3fn CUDA tensors: kept where they are (the
    # fp8 GEMM reads them there; without an input_scale h3rt runs a dequantized bf16 copy) and
    # the bits of the file loaded by path.
    path, state, on_device = fp8_state_dict(torch, tmp_path)
    expect_used_in_place(state, on_device, path)


def test_bf16_weights_on_the_device_are_used_in_place():
    # The golden checkpoint's block/refiner/AdaLN/condition_proj weights are bf16 (the rest f32).
    raw = WEIGHTS.read_bytes()
    header = json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])
    state = {k: torch.from_numpy(v.copy()) for k, v in read_safetensors(WEIGHTS).items()}
    state = {k: v.to(torch.bfloat16) if header[k]["dtype"] == "BF16" else v  # exact
             for k, v in state.items()}
    on_device = {k for k, v in state.items()
                 if v.dtype == torch.bfloat16 and v.dim() == 2 and k.endswith(".weight")}
    expect_used_in_place(state, on_device, WEIGHTS)


def test_auto_limit_with_the_callers_device_weights(int8_file):
    # device_memory_limit="auto" over weights already on the GPU (the node's "weights from the
    # loaded model"): resolved from the free memory, those weights used in place, not streamed,
    # and the bits of the file loaded with no limit.
    state = {k: torch.from_numpy(v.copy()) for k, v in read_safetensors(int8_file).items()}
    on_device = {k for k, v in state.items() if v.dtype == torch.int8 and k.endswith(".weight")}
    state = {k: v.cuda() if k in on_device else v for k, v in state.items()}
    block_bytes = sum(state[k].numel() for k in on_device if k.startswith("blocks."))
    m = h3rt.load(state, device="cuda", device_memory_limit="auto")
    w = m.weight_streaming
    assert w["device_memory_limit_auto"] is True and w["device_memory_limit"] > 0
    assert w["streamed_at_load"] is False and w["caller_device_bytes"] == block_bytes
    video, audio, text = golden_inputs()
    ref = h3rt.load(int8_file, device="cuda")
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


# ---- device forwards: CUDA arrays in and out ----
LAYOUT_ARGS = (10, 9, 7, 8, 12)


@pytest.fixture(scope="module", params=["preset", "checkpoint"])
def cuda_model(request):
    if request.param == "preset":
        return h3rt.preset("tiny", device="cuda")
    return h3rt.load(WEIGHTS, device="cuda")


def same_bits(got, want):
    got = got.detach().cpu().numpy() if hasattr(got, "detach") else np.asarray(got)
    np.testing.assert_array_equal(np.ascontiguousarray(got).view(np.uint32),
                                  np.ascontiguousarray(want).view(np.uint32))


def rows_call(golden_file):
    ts = {"timestep": golden_file["fwd/timestep"].astype(np.float32),
          "timestep_indices": golden_file["fwd/timestep_indices"]}
    return dict(layout=h3rt.t2va_layout(*LAYOUT_ARGS), timesteps=ts)


def test_device_forward_equals_host_forward(cuda_model):
    g = read_safetensors(GOLDEN / "golden.safetensors")
    kw = rows_call(g)
    v, a, t = g["input/video_rows"], g["input/audio_rows"], g["input/text_embeds"]
    want = cuda_model.forward(v, a, t, **kw)
    got = cuda_model.forward(torch.from_numpy(v).cuda(), torch.from_numpy(a).cuda(), t, **kw)
    assert all(isinstance(x, torch.Tensor) and x.is_cuda and x.dtype == torch.float32
               for x in got)
    for x, y in zip(got, want):
        same_bits(x, y)
    # A CUDA text array is read too (copied to the host): the same bits.
    got = cuda_model.forward(torch.from_numpy(v).cuda(), torch.from_numpy(a).cuda(),
                             torch.from_numpy(t).cuda(), **kw)
    for x, y in zip(got, want):
        same_bits(x, y)


def test_device_latents_equal_host_latents(cuda_model):
    video, audio, text = golden_inputs()
    want = cuda_model.forward_latents(video, audio, 0.7, text)
    dv, da = torch.from_numpy(video).cuda(), torch.from_numpy(audio).cuda()
    for _ in range(3):  # eager, graph capture, replay
        got = cuda_model.forward_latents(dv, da, 0.7, text)
        assert got[0].shape == dv.shape and got[1].shape == da.shape
        for x, y in zip(got, want):
            same_bits(x, y)
    keyframe = [{"frame_index": 0, "latent": video[:, :, :1].copy()}]
    want = cuda_model.forward_conditioned(video, audio, 0.7, text, keyframes=keyframe)
    got = cuda_model.forward_conditioned(dv, da, 0.7, text, keyframes=keyframe)
    for x, y in zip(got, want):
        same_bits(x, y)


def test_flow_shifts_on_device_latents(cuda_model):
    """video_shift / audio_shift reach the device forward as they reach the host one."""
    video, audio, text = golden_inputs()
    dv, da = torch.from_numpy(video).cuda(), torch.from_numpy(audio).cuda()
    shifts = {"video_shift": 6.37, "audio_shift": 2.9}
    for forward in (cuda_model.forward_latents, cuda_model.forward_conditioned):
        want = forward(video, audio, 0.7, text, **shifts)
        got = forward(dv, da, 0.7, text, **shifts)
        for x, y in zip(got, want):
            same_bits(x, y)
        plain = forward(dv, da, 0.7, text)
        assert not torch.equal(plain[1], got[1])


def test_bf16_and_strided_device_latents(cuda_model):
    video, audio, text = golden_inputs()
    bv = torch.from_numpy(video).cuda().to(torch.bfloat16)
    ba = torch.from_numpy(audio).cuda().to(torch.bfloat16)
    want = cuda_model.forward_latents(bv.float().cpu().numpy(), ba.float().cpu().numpy(), 0.7,
                                      text)
    for x, y in zip(cuda_model.forward_latents(bv, ba, 0.7, text), want):
        same_bits(x, y)
    # Strided: every other element of wider tensors (a device copy inside, same values).
    wv = torch.zeros(video.shape[:-1] + (2 * video.shape[-1],), device="cuda")
    wv[..., ::2] = torch.from_numpy(video).cuda()
    wa = torch.from_numpy(audio).cuda().transpose(1, 2).contiguous().transpose(1, 2)
    assert not wv[..., ::2].is_contiguous() and not wa.is_contiguous()
    want = cuda_model.forward_latents(video, audio, 0.7, text)
    for x, y in zip(cuda_model.forward_latents(wv[..., ::2], wa, 0.7, text), want):
        same_bits(x, y)


def test_out_is_written_in_place(cuda_model):
    video, audio, text = golden_inputs()
    dv, da = torch.from_numpy(video).cuda(), torch.from_numpy(audio).cuda()
    want = cuda_model.forward_latents(video, audio, 0.7, text)
    out = (torch.empty_like(dv), torch.empty_like(da))
    ptrs = [o.data_ptr() for o in out]
    got = cuda_model.forward_latents(dv, da, 0.7, text, out=out)
    assert [g.data_ptr() for g in got] == ptrs and got[0] is out[0]
    for x, y in zip(out, want):
        same_bits(x, y)
    half = (torch.empty_like(dv, dtype=torch.bfloat16), torch.empty_like(da, dtype=torch.bfloat16))
    cuda_model.forward_latents(dv, da, 0.7, text, out=half)
    for x, y in zip(half, want):
        np.testing.assert_array_equal(x.float().cpu().numpy(),
                                      torch.from_numpy(y).to(torch.bfloat16).float().numpy())
    with pytest.raises(ValueError, match=r"out\[1\]: expected shape \[1, 32, 2, 9\]"):
        cuda_model.forward_latents(dv, da, 0.7, text, out=(out[0], out[0]))


def _late_write(stream, dst, src):
    """On `stream`: a long matmul chain, then dst <- src (the values the forward must read)."""
    with torch.cuda.stream(stream):
        m = torch.randn(4096, 4096, device="cuda")
        for _ in range(20):
            m = m @ m / 64.0
        del m
        dst.copy_(src)


def test_caller_stream_orders_the_device_forward(cuda_model):
    video, audio, text = golden_inputs()
    want = cuda_model.forward_latents(video, audio, 0.7, text)
    src = torch.from_numpy(video).cuda()
    da = torch.from_numpy(audio).cuda()
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    dv = torch.zeros_like(src)
    _late_write(s, dv, src)
    with torch.cuda.stream(s):  # stream=None: torch's current stream (s)
        got = cuda_model.forward_latents(dv, da, 0.7, text)
        host = [g.cpu().numpy() for g in got]  # on s: after the forward
    for x, y in zip(host, want):
        same_bits(x, y)
    dv2 = torch.zeros_like(src)
    _late_write(s, dv2, src)
    got = cuda_model.forward_latents(dv2, da, 0.7, text, stream=s)  # explicit, from elsewhere
    s.synchronize()
    for x, y in zip(got, want):
        same_bits(x, y)


def test_device_argument_errors():
    m = h3rt.load(WEIGHTS, device="cuda")
    video, audio, text = golden_inputs()
    dv, da = torch.from_numpy(video).cuda(), torch.from_numpy(audio).cuda()
    with pytest.raises(TypeError, match="video: expected float32 or bfloat16"):
        m.forward_latents(dv.half(), da, 0.7, text)
    with pytest.raises(ValueError, match="one is a CUDA array and the other is not"):
        m.forward_latents(dv, audio, 0.7, text)
    with pytest.raises(TypeError, match="stream: expected None, an int handle"):
        m.forward_latents(dv, da, 0.7, text, stream="s")
    with pytest.raises(ValueError, match="audio_scale: the audio carry runs on host arrays"):
        m.forward_conditioned(dv, da, 0.7, text, audio_scale=2.0)
    with pytest.raises(ValueError, match="a device array, but the model runs on the CPU"):
        h3rt.load(WEIGHTS).forward_latents(dv, da, 0.7, text)
    if torch.cuda.device_count() > 1:
        with pytest.raises(ValueError, match="video: a CUDA array on device 1, the model runs "
                                             "on cuda:0"):
            m.forward_latents(dv.to("cuda:1"), da.to("cuda:1"), 0.7, text)


def test_sample_keeps_its_state_on_the_device(cuda_model):
    out = h3rt.sample(cuda_model, steps=3, scheduler="simple", sampler="res_multistep")
    assert out["sampler_state"] == "device"
    again = h3rt.sample(cuda_model, steps=3, scheduler="simple", sampler="res_multistep")
    np.testing.assert_array_equal(out["video_latents"].view(np.uint32),
                                  again["video_latents"].view(np.uint32))


def test_selftest_passes_on_this_gpu():
    r = h3rt.selftest(seed=11)
    assert r["passed"], json.dumps(r, indent=1)
    assert r["seed"] == 11 and r["device"] and len(r["cases"]) == 10
    assert {c["result"] for c in r["cases"]} <= {"passed", "skipped"}
