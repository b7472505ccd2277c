"""h3rt's Python package against the golden sets and the CLI (numpy only; torch tests skip
without torch). Run from a build with H3RT_PYTHON=ON: PYTHONPATH=build/python pytest python/tests."""
import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

import h3rt
from safetensors_np import read_safetensors, write_safetensors

SHARED = pathlib.Path(os.environ.get("H3RT_SHARED_DIR",
                                     pathlib.Path(__file__).resolve().parents[3] / "shared"))
GOLDEN = SHARED / "golden" / "h3_tiny"
COMFY = SHARED / "golden" / "h3_tiny_comfy"
WEIGHTS = GOLDEN / "weights.safetensors"



@pytest.fixture(scope="module")
def golden():
    return read_safetensors(GOLDEN / "golden.safetensors")


@pytest.fixture(scope="module")
def model():
    return h3rt.load(WEIGHTS)


def rel_max_err(got, ref):
    got, ref = np.asarray(got, np.float64).ravel(), np.asarray(ref, np.float64).ravel()
    assert got.shape == ref.shape
    return np.abs(got - ref).max() / np.abs(ref).max()


def patchify(video):
    """[1, C, T, H, W] -> rows [T*(H/2)*(W/2), 4C], feature c*4 + iy*2 + ix (golden README 3)."""
    _, c, t, h, w = video.shape
    v = video[0].reshape(c, t, h // 2, 2, w // 2, 2).transpose(1, 2, 4, 0, 3, 5)
    return v.reshape(t * (h // 2) * (w // 2), 4 * c)


def test_config_of_checkpoint_and_preset(model):
    c = model.config
    assert (c["hidden"], c["layers"], c["heads"], c["head_dim"]) == (192, 2, 2, 128)
    assert (c["text_dim"], c["in_channels"], c["audio_channels"], c["ffn"]) == (64, 24, 32, 384)
    assert c["pdd_heads"] == 1 and c["adaln"] == "full" and c["precision"] == "fp32"
    assert h3rt.preset("tiny").config["hidden"] == 192


def test_layout_and_forward_match_golden(model, golden):
    layout = h3rt.t2va_layout(10, 9, 7, 8, 12)
    for key in ("position_ids", "token_tags", "video_indices", "audio_indices", "text_indices"):
        np.testing.assert_array_equal(layout[key], golden["layout/" + key], err_msg=key)
    ts = {"timestep": golden["fwd/timestep"].astype(np.float32),
          "timestep_indices": golden["fwd/timestep_indices"]}
    vv, va = model.forward(golden["input/video_rows"], golden["input/audio_rows"],
                           golden["input/text_embeds"], layout=layout, timesteps=ts)
    # The C++ golden tests' fp32 tolerance (tests/cpu/test_model_golden.cpp).
    assert rel_max_err(vv, golden["fwd_f64/video_velocity"]) <= 1e-5
    assert rel_max_err(va, golden["fwd_f64/audio_velocity"]) <= 1e-5
    # The same timesteps from the plan builder.
    plan = h3rt.timestep_plan(layout, 1 - 0.7, 1 - h3rt.audio_sigma_from_video(0.7))
    np.testing.assert_array_equal(plan["timestep_indices"], golden["fwd/timestep_indices"])


def test_state_dict_load_equals_path(model, golden):
    state = read_safetensors(WEIGHTS)  # bf16 values upcast: exact, so fp32 runs agree
    from_dict = h3rt.load(state)
    video = golden["input/video_latents"]
    audio = golden["input/audio_latents"].transpose(1, 0, 2)[None]
    args = (video, audio, 0.7, golden["input/text_embeds"])
    for a, b in zip(from_dict.forward_latents(*args), model.forward_latents(*args)):
        np.testing.assert_array_equal(a, b)


def fp8_state_dict(torch, tmp_path):
    """The golden checkpoint quantized to fp8_scaled by the CLI: (its path, a torch state dict
    with its fp8 weights as torch.float8_e4m3fn, those keys)."""
    cli = find_cli()
    if cli is None:
        pytest.skip("no h3rt CLI next to this package (set H3RT_CLI)")
    path = tmp_path / "fp8.safetensors"
    subprocess.run([cli, "quantize-checkpoint", "--in", str(WEIGHTS), "--out", str(path),
                    "--format", "fp8"], check=True, capture_output=True)
    raw = path.read_bytes()
    header = json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])
    state = {k: torch.from_numpy(v.copy()) for k, v in read_safetensors(path).items()}
    fp8 = {k for k, e in header.items() if k != "__metadata__" and e["dtype"] == "F8_E4M3"}
    assert fp8
    for k in fp8:
        state[k] = state[k].view(torch.float8_e4m3fn)
    return path, state, fp8


def test_fp8_state_dict_equals_path(golden, tmp_path):
    """torch.float8_e4m3fn tensors (ComfyUI's fp8_scaled weights) load through DLPack as stored:
    the same bits as the fp8 checkpoint loaded by path (torch only; numpy has no fp8)."""
    torch = pytest.importorskip("torch")
    path, state, _ = fp8_state_dict(torch, tmp_path)
    video = golden["input/video_latents"]
    audio = golden["input/audio_latents"].transpose(1, 0, 2)[None]
    args = (video, audio, 0.7, golden["input/text_embeds"])
    for a, b in zip(h3rt.load(state).forward_latents(*args), h3rt.load(path).forward_latents(*args)):
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


def test_forward_latents_reproduces_comfyui_t2va(model):
    case = read_safetensors(COMFY / "t2va.safetensors")
    video = case["input/video_latents"]                           # [1, 24, T, H, W]
    audio = case["input/audio_latents"].transpose(1, 0, 2)[None]  # ComfyUI's [1, 32, 2, N]
    sigma = float(case["input/sigma_video"][0])
    vel_v, vel_a = model.forward_latents(video, audio, sigma, case["input/text_embeds"])
    assert vel_v.shape == video.shape and vel_a.shape == audio.shape
    ref_v, ref_a = case["video_velocity"][0], case["audio_velocity"][0]  # rows, data-ward
    rows_a = vel_a[0].transpose(1, 2, 0).reshape(-1, audio.shape[1])      # row ch*N + j
    # README there: within 1e-5 of max|ref| in fp32. h3rt's sign: data-ward, x0 = x + sigma v,
    # which these files store; ComfyUI's _forward itself returns the negation.
    assert rel_max_err(patchify(vel_v), ref_v) <= 1e-5
    assert rel_max_err(rows_a, ref_a) <= 1e-5
    assert rel_max_err(-patchify(vel_v), ref_v) > 1.0


def test_flow_shifts_set_the_audio_timestep(model, golden):
    """video_shift / audio_shift (ComfyUI's MiniMaxH3SigmaShift): t_audio = 1 - the video sigma
    mapped from one shift to the other in float64, written out here, then the plain forward."""
    video = golden["input/video_latents"]
    audio = golden["input/audio_latents"]                          # [2, 32, N]
    text = golden["input/text_embeds"]
    s = float(np.float32(0.7))
    base = s / (5.0 + s * (1.0 - 5.0))
    sigma_a = np.float32(2.5 * base / (1.0 + 1.5 * base))
    one = np.float32(1.0)
    layout = h3rt.t2va_layout(10, 9, 7, 8, 12)
    plan = h3rt.timestep_plan(layout, float(one - np.float32(s)), float(one - sigma_a))
    want_v, want_a = model.forward(patchify(video), audio.transpose(0, 2, 1).reshape(-1, 32), text,
                                   layout=layout, timesteps=plan)
    comfy_audio = audio.transpose(1, 0, 2)[None]
    got_v, got_a = model.forward_latents(video, comfy_audio, 0.7, text, video_shift=5.0,
                                         audio_shift=2.5)
    np.testing.assert_array_equal(patchify(got_v).view(np.uint32), want_v.view(np.uint32))
    rows_a = got_a[0].transpose(1, 2, 0).reshape(-1, 32)
    np.testing.assert_array_equal(rows_a.view(np.uint32), want_a.view(np.uint32))
    assert not np.array_equal(model.forward_latents(video, comfy_audio, 0.7, text)[1], got_a)
    cond = model.forward_conditioned(video, comfy_audio, 0.7, text, video_shift=5.0,
                                     audio_shift=2.5)
    assert not np.array_equal(model.forward_conditioned(video, comfy_audio, 0.7, text)[1], cond[1])
    with pytest.raises(ValueError, match="video_shift must be a finite number > 0, got 0"):
        model.forward_latents(video, comfy_audio, 0.7, text, video_shift=0.0)
    with pytest.raises(ValueError, match="audio_shift must be a finite number > 0, got nan"):
        model.forward_conditioned(video, comfy_audio, 0.7, text, audio_shift=float("nan"))


def test_bad_inputs_name_the_argument(model, golden):
    video = golden["input/video_latents"]
    audio = golden["input/audio_latents"].transpose(1, 0, 2)[None]
    text = golden["input/text_embeds"]
    with pytest.raises(ValueError, match=r"video: expected shape \[1, 24, T, H, W\]"):
        model.forward_latents(video[:, :20], audio, 0.7, text)
    with pytest.raises(ValueError, match=r"even H, W >= 2, got \[1, 24, 7, 8, 11\]"):
        model.forward_latents(video[..., :11], audio, 0.7, text)
    with pytest.raises(ValueError, match=r"audio: expected shape \[1, 32, 2, N\]"):
        model.forward_latents(video, golden["input/audio_latents"], 0.7, text)
    with pytest.raises(ValueError, match=r"text: expected shape \[1, L, 64\] or \[L, 64\]"):
        model.forward_latents(video, audio, 0.7, text[..., :32])
    with pytest.raises(TypeError, match="video: expected float32"):
        model.forward_latents(video.astype(np.float64), audio, 0.7, text)
    with pytest.raises(RuntimeError, match="sigma must lie in"):
        model.forward_latents(video, audio, 1.5, text)
    with pytest.raises(ValueError, match="device must be cpu or cuda"):
        h3rt.load(WEIGHTS, device="gpu")
    with pytest.raises(RuntimeError, match="no_such.safetensors"):
        h3rt.load("/no_such.safetensors")
    with pytest.raises(TypeError, match="path_or_state_dict"):
        h3rt.load(42)
    with pytest.raises(ValueError, match="video_rows: expected shape"):
        model.forward(golden["input/audio_rows"], golden["input/audio_rows"], text,
                      layout=h3rt.t2va_layout(10, 9, 7, 8, 12),
                      timesteps={"timestep": np.zeros(1, np.float32),
                                 "timestep_indices": np.zeros(196, np.int64)})


def test_sampling_numbers_are_checked_by_name(model, golden):
    with pytest.raises(ValueError, match=r"seed must be an integer in \[0, 2\*\*64\), got -1"):
        h3rt.sample(model, steps=1, seed=-1)
    with pytest.raises(TypeError, match="seed: expected an integer, got float"):
        h3rt.sample(model, steps=1, seed=1.5)
    with pytest.raises(ValueError, match="weights_seed must be an integer"):
        h3rt.preset("tiny", weights_seed=2**64)
    with pytest.raises(RuntimeError, match="video sigma shift must be a finite number > 0, got nan"):
        h3rt.sample(model, steps=1, shift=float("nan"))
    with pytest.raises(RuntimeError, match="audio seconds must be a finite number >= 0"):
        h3rt.sample(model, steps=1, audio_seconds=-1.0)
    # A forward without audio rows runs on text and video alone.
    video = golden["input/video_latents"]
    empty = np.zeros((1, 32, 2, 0), np.float32)
    vel_v, vel_a = model.forward_latents(video, empty, 0.7, golden["input/text_embeds"])
    assert vel_v.shape == video.shape and vel_a.shape == (1, 32, 2, 0)
    assert np.isfinite(vel_v).all()


class CudaInterface:
    """A device array through __cuda_array_interface__ only (as numba's): its pointer is never
    read by these tests (a CPU model refuses it first)."""
    def __init__(self, shape, typestr="<f4"):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr,
                                         "data": (0x10000, False), "strides": None,
                                         "version": 3}


def test_device_arrays_and_out_are_refused_on_a_cpu_model(model, golden):
    video = golden["input/video_latents"]
    audio = golden["input/audio_latents"].transpose(1, 0, 2)[None].copy()
    text = golden["input/text_embeds"]
    with pytest.raises(ValueError, match="video: a device array, but the model runs on the CPU"):
        model.forward_latents(CudaInterface(video.shape), audio, 0.7, text)
    with pytest.raises(ValueError, match="audio_rows: a device array, but the model runs on"):
        model.forward(golden["input/video_rows"], CudaInterface((18, 32)), text,
                      layout=h3rt.t2va_layout(10, 9, 7, 8, 12),
                      timesteps={"timestep": np.zeros(1, np.float32),
                                 "timestep_indices": np.zeros(196, np.int64)})
    with pytest.raises(TypeError, match="video: a __cuda_array_interface__ array of typestr "
                                        "'<f8'; expected float32"):
        model.forward_latents(CudaInterface(video.shape, "<f8"), audio, 0.7, text)
    with pytest.raises(ValueError, match="out: only for CUDA inputs"):
        model.forward_latents(video, audio, 0.7, text, out=(video, audio))
    with pytest.raises(ValueError, match="out: only for CUDA inputs"):
        model.forward_conditioned(video, audio, 0.7, text, out=(video, audio))
    with pytest.raises(TypeError, match="video: expected an array"):
        model.forward_latents("not an array", audio, 0.7, text)


def find_cli():
    if os.environ.get("H3RT_CLI"):
        return os.environ["H3RT_CLI"]
    # In-build package: <build>/python/h3rt/ next to <build>/h3rt.
    cli = pathlib.Path(h3rt.__file__).resolve().parents[2] / "h3rt"
    return str(cli) if cli.is_file() else None


def test_sample_equals_cli_bit_for_bit(tmp_path):
    cli = find_cli()
    if cli is None:
        pytest.skip("no h3rt CLI next to this package (set H3RT_CLI)")
    out = tmp_path / "latents.safetensors"
    subprocess.run([cli, "sample", "--steps", "2", "--seed", "7", "--out", str(out)], check=True,
                   capture_output=True)
    ref = read_safetensors(out)
    calls = []
    res = h3rt.sample(h3rt.preset("tiny"), steps=2, seed=7,
                      progress=lambda step, steps, s: calls.append((step, steps)))
    assert calls == [(0, 2), (1, 2), (2, 2)]
    for key in ("video_latents", "audio_latents"):
        assert res[key].shape == ref[key].shape
        np.testing.assert_array_equal(res[key].view(np.uint32), ref[key].view(np.uint32))


def test_sample_cancels_from_progress():
    with pytest.raises(h3rt.Cancelled, match="after step 1 of 2"):
        h3rt.sample(h3rt.preset("tiny"), steps=2, progress=lambda step, steps, s: step < 1)
    with pytest.raises(ValueError, match="steps must be in"):
        h3rt.sample(h3rt.preset("tiny"), steps=0)


def test_sample_comfy_sampler_equals_cli_and_resumes(tmp_path):
    opts = dict(steps=6, seed=7, sampler="res_multistep", scheduler="simple", shift=12.0,
                audio_shift=3.0)
    m = h3rt.preset("tiny")
    whole = h3rt.sample(m, **opts)
    assert whole["sigmas"] == h3rt.simple_sigmas(6, 12.0)
    assert whole["sampler_state"] == "host"  # a CPU model's loop
    ckpt = tmp_path / "run.resume"
    with pytest.raises(h3rt.Cancelled, match="resume file"):
        h3rt.sample(m, checkpoint=ckpt, progress=lambda step, steps, s: step < 2, **opts)
    resumed = h3rt.sample(m, resume=ckpt, **opts)
    assert resumed["resumed_steps"] == 2
    cli = find_cli()
    ref = None
    if cli is not None:
        out = tmp_path / "latents.safetensors"
        subprocess.run([cli, "sample", "--steps", "6", "--seed", "7", "--sampler",
                        "res_multistep", "--scheduler", "simple", "--out", str(out)], check=True,
                       capture_output=True)
        ref = read_safetensors(out)
    for key in ("video_latents", "audio_latents"):
        np.testing.assert_array_equal(resumed[key].view(np.uint32), whole[key].view(np.uint32))
        if ref is not None:
            np.testing.assert_array_equal(whole[key].view(np.uint32), ref[key].view(np.uint32))
    with pytest.raises(RuntimeError, match="steps is '6' there, '7' here"):
        h3rt.sample(m, resume=ckpt, **{**opts, "steps": 7})
    with pytest.raises(ValueError, match="sampler must be"):
        h3rt.sample(m, sampler="dpm", scheduler="simple")


def test_torch_tensors_equal_numpy(model, golden):
    torch = pytest.importorskip("torch")
    video = golden["input/video_latents"]
    audio = golden["input/audio_latents"].transpose(1, 0, 2)[None].copy()
    text = golden["input/text_embeds"]
    want = model.forward_latents(video, audio, 0.7, text)
    got = model.forward_latents(torch.from_numpy(video), torch.from_numpy(audio), 0.7,
                                torch.from_numpy(text))
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    state = {k: torch.from_numpy(v.copy()).to(torch.bfloat16) if v.dtype == np.float32 and
             not k.startswith(("video_patch", "audio_patch", "time_embedder", "final_layer.video",
                               "final_layer.audio", "rope")) else torch.from_numpy(v.copy())
             for k, v in read_safetensors(WEIGHTS).items()}
    for a, b in zip(h3rt.load(state).forward_latents(video, audio, 0.7, text), want):
        np.testing.assert_array_equal(a, b)


def test_loras_merge_on_load_from_a_path_or_a_state_dict(golden, tmp_path):
    rng = np.random.default_rng(3)
    m = "diffusion_model.blocks.0.attn.qkv_proj"
    lora = tmp_path / "lora.safetensors"
    write_safetensors(lora, {m + ".lora_B.weight": rng.standard_normal((768, 4)) * 0.1,
                             m + ".lora_A.weight": rng.standard_normal((4, 192)) * 0.1,
                             m + ".alpha": np.array(2.0)})
    video = golden["input/video_latents"]
    audio = golden["input/audio_latents"].transpose(1, 0, 2)[None].copy()
    text = golden["input/text_embeds"]
    plain = h3rt.load(WEIGHTS).forward_latents(video, audio, 0.7, text)
    a = h3rt.load(WEIGHTS, loras=[(lora, 0.5)])
    assert a.lora_report["pairs"] == 1 and a.lora_report["layers"] == 1
    # The state dict holds the bf16 weights upcast to f32: its merged layer stays f32 (the
    # stored dtype decides the rounding), so it agrees with the path's to bf16 rounding.
    b = h3rt.load(read_safetensors(WEIGHTS), loras=[(str(lora), 0.5)])
    got_a = a.forward_latents(video, audio, 0.7, text)
    for x, y, p in zip(got_a, b.forward_latents(video, audio, 0.7, text), plain):
        assert rel_max_err(y, x) <= 1e-2
        assert rel_max_err(x, p) > 1e-3
    bad = tmp_path / "bad.safetensors"
    write_safetensors(bad, {"diffusion_model.blocks.9.mlp.fc1.lora_B.weight": np.zeros((768, 2)),
                            "diffusion_model.blocks.9.mlp.fc1.lora_A.weight": np.zeros((2, 192))})
    with pytest.raises(RuntimeError, match="blocks.9.mlp.fc1"):
        h3rt.load(WEIGHTS, loras=[bad])
    with pytest.warns(UserWarning, match="skipped LoRA"):
        c = h3rt.load(WEIGHTS, loras=[bad, (lora, 0.5)], lora_skip_unmatched=True)
    assert c.lora_report["pairs"] == 1
    with pytest.raises(TypeError, match="loras"):
        h3rt.load(WEIGHTS, loras=[1])


def test_lora_tensors_in_memory_merge_as_the_file(golden, tmp_path):
    rng = np.random.default_rng(4)
    m = "diffusion_model.blocks.1.mlp.fc1"
    tensors = {m + ".lora_up.weight": (rng.standard_normal((768, 4)) * 0.1).astype(np.float32),
               m + ".lora_down.weight": (rng.standard_normal((4, 192)) * 0.1).astype(np.float32),
               m + ".alpha": np.array([3.0], np.float32)}
    lora = tmp_path / "lora.safetensors"
    write_safetensors(lora, tensors)
    video = golden["input/video_latents"]
    audio = golden["input/audio_latents"].transpose(1, 0, 2)[None].copy()
    text = golden["input/text_embeds"]
    # Strided (transposed) arrays are made contiguous; the result is the file's bit for bit.
    given = dict(tensors)
    given[m + ".lora_up.weight"] = np.asfortranarray(tensors[m + ".lora_up.weight"])
    given[m + ".alpha"] = 3  # a number: float32
    a = h3rt.load(WEIGHTS, loras=[(given, 0.6)])
    b = h3rt.load(WEIGHTS, loras=[(lora, 0.6)])
    assert a.lora_report == b.lora_report and a.lora_report["pairs"] == 1
    for x, y in zip(a.forward_latents(video, audio, 0.7, text),
                    b.forward_latents(video, audio, 0.7, text)):
        np.testing.assert_array_equal(x, y)
    bad = {m + ".lora_up.weight": tensors[m + ".lora_up.weight"]}
    with pytest.raises(RuntimeError, match=r"(?s)LoRA loras\[1\] \(in-memory tensors\).*"
                                           r"not the other half of the pair"):
        h3rt.load(WEIGHTS, loras=[(lora, 1.0), (bad, 1.0)])
    with pytest.raises(TypeError, match="keys must be strings"):
        h3rt.load(WEIGHTS, loras=[({1: tensors[m + ".alpha"]}, 1.0)])


def test_sample_hybrid_equals_cli_and_reports_steps(tmp_path):
    opts = dict(steps=4, seed=7, sparse_attention=1.0, dense_steps=2, dense_blocks=1,
                step_cache=50.0, step_cache_max=1)
    res = h3rt.sample(h3rt.preset("tiny"), **opts)
    h = res["hybrid"]
    assert [s["attention"] for s in h] == ["dense", "dense", "sparse", "sparse"]
    # A threshold no step misses: computed, then reused at most once in a row.
    assert [s["step_cache"] for s in h] == ["computed", "reused", "computed", "reused"]
    assert h[0]["relative_l1"] is None and h[1]["relative_l1"] >= 0
    assert h[0]["sparse_fraction"] is None
    assert h[2]["sparse_fraction"] is None or 0 < h[2]["sparse_fraction"] <= 1
    plain = h3rt.sample(h3rt.preset("tiny"), steps=4, seed=7)
    assert not np.array_equal(plain["video_latents"], res["video_latents"])
    with pytest.raises(ValueError, match="max_reuses"):
        h3rt.sample(h3rt.preset("tiny"), steps=2, step_cache=0.1, step_cache_max=0)
    cli = find_cli()
    if cli is None:
        return
    out = tmp_path / "latents.safetensors"
    subprocess.run([cli, "sample", "--steps", "4", "--seed", "7", "--sparse-attention", "1",
                    "--dense-steps", "2", "--dense-blocks", "1", "--step-cache", "50",
                    "--step-cache-max", "1", "--out", str(out)], check=True, capture_output=True)
    ref = read_safetensors(out)
    for key in ("video_latents", "audio_latents"):
        np.testing.assert_array_equal(res[key].view(np.uint32), ref[key].view(np.uint32))


def test_sample_sparse_check_reports_check_steps():
    opts = dict(steps=4, seed=7, sparse_attention=0.5, dense_steps=1, dense_blocks=0,
                sparse_check=2, sparse_check_bound=0.0)
    h = h3rt.sample(h3rt.preset("tiny"), **opts)["hybrid"]
    assert [s["sparse_check"] is not None for s in h] == [False, True, False, True]
    c = h[1]["sparse_check"]
    assert c["tiles_per_block"] > 0 and c["blocks"] == [0, 1]
    assert len(c["rel_l1"]) == 2 and all(len(row) == 2 for row in c["rel_l1"])
    assert c["dense_heads"] == 4 and len(c["turned_dense"]) == 4  # bound 0: every head
    assert h[2]["sparse_fraction"] == 1.0
    with pytest.raises(ValueError, match="sparse_check must be in"):
        h3rt.sample(h3rt.preset("tiny"), steps=2, sparse_attention=1.0, sparse_check=-1)


def test_check_finite_names_the_input_and_can_be_off():
    video = np.zeros((1, 24, 7, 8, 12), np.float32)
    video[0, 3, 2, 1, 5] = np.nan
    audio, text = np.zeros((1, 32, 2, 9), np.float32), np.zeros((1, 10, 64), np.float32)
    with pytest.raises(RuntimeError, match="input video latents"):
        h3rt.load(WEIGHTS).forward_latents(video, audio, 0.5, text)
    vv, _ = h3rt.load(WEIGHTS, check_finite="off").forward_latents(video, audio, 0.5, text)
    assert np.isnan(vv).any()  # unchecked: the NaN flows through
    with pytest.raises(ValueError, match="check_finite"):
        h3rt.preset("tiny", check_finite="sometimes")


def test_device_memory_limit_is_parsed_and_needs_cuda():
    with pytest.raises(ValueError, match="device_memory_limit"):
        h3rt.preset("tiny", device_memory_limit="24 elephants")
    with pytest.raises(TypeError, match="device_memory_limit"):
        h3rt.preset("tiny", device_memory_limit=[24])
    for size in ("24GB", 24e9, 24 << 30):  # a limit on the CPU backend is refused
        with pytest.raises(RuntimeError, match="device_memory_limit applies to device cuda"):
            h3rt.preset("tiny", device_memory_limit=size)
    m = h3rt.preset("tiny", device_memory_limit=0)
    assert m.config["hidden"] == 192
    w = m.weight_streaming  # the CPU backend never streams: every field zero or False
    assert w["streamed"] is False and w["streamed_at_load"] is False
    assert w["load_peak_device_bytes"] == 0 and w["device_memory_limit"] == 0
    assert set(w) >= {"slots", "host_bytes", "h2d_bytes_per_step", "caller_device_bytes"}
    assert w["streamed_blocks"] == 0
    assert w["source"] == ""  # set ("pinned" or "file") only when the blocks stream
    a = h3rt.preset("tiny", device_memory_limit="auto").weight_streaming  # CPU: no limit
    assert a["device_memory_limit"] == 0 and a["device_memory_limit_auto"] is False


def test_weight_stream_source_is_parsed_and_needs_a_limit():
    with pytest.raises(ValueError, match="weight_stream_source must be auto, pinned or file"):
        h3rt.preset("tiny", weight_stream_source="disk")
    with pytest.raises(RuntimeError, match="weight_stream_source file applies when"):
        h3rt.preset("tiny", weight_stream_source="file")
    assert h3rt.preset("tiny", weight_stream_source="auto").config["layers"] > 0


def test_sample_denoise_masks_keep_the_clean_latent_and_equal_cli(tmp_path):
    m = h3rt.preset("tiny")
    opts = dict(width=64, height=64, frames=5, text_tokens=3, steps=3, seed=5,
                scheduler="simple", sampler="res_multistep")
    plain = h3rt.sample(m, **opts)
    t, h, w = plain["video_latents"].shape[2:]
    n = plain["audio_latents"].shape[2]
    rng = np.random.default_rng(0)
    vmask = rng.choice([0.0, 0.5, 1.0], size=(t, h, w)).astype(np.float32)
    amask = rng.choice([0.0, 0.25, 1.0], size=(2, n)).astype(np.float32)
    vimg = rng.standard_normal((1, 24, t, h, w)).astype(np.float32)
    aimg = rng.standard_normal((2, 32, n)).astype(np.float32)
    got = h3rt.sample(m, video_denoise_mask=vmask, audio_denoise_mask=amask,
                      video_latent_image=vimg, audio_latent_image=aimg, **opts)
    keep_v, keep_a = vmask == 0, amask == 0
    np.testing.assert_array_equal(got["video_latents"][0][:, keep_v], vimg[0][:, keep_v])
    np.testing.assert_array_equal(got["audio_latents"].transpose(0, 2, 1)[keep_a],
                                  aimg.transpose(0, 2, 1)[keep_a])
    assert not np.array_equal(got["video_latents"], plain["video_latents"])
    with pytest.raises(ValueError, match="video_denoise_mask"):
        h3rt.sample(m, video_denoise_mask=vmask[:1], **opts)
    with pytest.raises(ValueError, match="gemm"):
        h3rt.preset("tiny", gemm="int4")
    cli = find_cli()
    if cli is None:
        return
    cond, out = tmp_path / "masks.safetensors", tmp_path / "latents.safetensors"
    write_safetensors(cond, {"input/video_denoise_mask": vmask, "input/audio_denoise_mask": amask,
                             "input/video_latent_image": vimg, "input/audio_latent_image": aimg})
    subprocess.run([cli, "sample", "--width", "64", "--height", "64", "--frames", "5",
                    "--text-tokens", "3", "--steps", "3", "--seed", "5", "--scheduler", "simple",
                    "--sampler", "res_multistep", "--conditioning", str(cond), "--out", str(out)],
                   check=True, capture_output=True)
    ref = read_safetensors(out)
    for key in ("video_latents", "audio_latents"):
        np.testing.assert_array_equal(got[key].view(np.uint32), ref[key].view(np.uint32))


def test_latent_shape_is_the_clis():
    # 864x480 and 1344x768 at 124 frames: 37 latent frames, 207 audio latents (bench defaults)
    assert h3rt.latent_shape(864, 480, 124) == {"frames": 37, "height": 30, "width": 54,
                                                "audio": 207}
    assert h3rt.latent_shape(1344, 768, 124) == {"frames": 37, "height": 48, "width": 84,
                                                 "audio": 207}
    assert h3rt.latent_shape(192, 128, 1)["frames"] == 1
    with pytest.raises(ValueError, match="123"):
        h3rt.latent_shape(864, 480, 123)


def test_selftest_arguments_and_without_a_gpu():
    with pytest.raises(TypeError, match="seed"):
        h3rt.selftest(seed=1.5)
    with pytest.raises(ValueError, match="seed"):
        h3rt.selftest(seed=-1)
    try:
        import torch
        if torch.cuda.is_available():
            pytest.skip("a GPU is present: test_h3rt_cuda.py runs the self-test")
    except ImportError:
        pass
    with pytest.raises(RuntimeError, match="no CUDA device|built without CUDA"):
        h3rt.selftest()


def test_untested_arch_note_warns_once_per_arch(monkeypatch):
    monkeypatch.setattr(h3rt, "_noted_archs", set())
    note = "h3rt's GPU test suite has run on sm_90 only; on this sm_121 GPU run `h3rt selftest`"
    monkeypatch.setattr(h3rt._h3rt, "_untested_arch_note", lambda: note)
    with pytest.warns(UserWarning, match="sm_121 GPU run `h3rt selftest`"):
        h3rt._note_untested_arch()
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        h3rt._note_untested_arch()  # the same arch again: silent
        monkeypatch.setattr(h3rt._h3rt, "_untested_arch_note", lambda: "")
        h3rt._note_untested_arch()  # sm_90: nothing to say



def test_build_info_names_version_and_backend():
    info = h3rt.build_info()
    assert info["version"] == h3rt.__version__
    assert info["summary"].startswith(f"h3rt {h3rt.__version__}\n")
    if info["cuda"]:
        for arch in info["cuda_archs"].split(","):
            assert f"sm_{arch}" in info["summary"]
        assert info["cuda_build_version"] >= 11000
    else:
        assert "CPU only" in info["summary"]
