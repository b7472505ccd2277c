"""The ComfyUI node (integrations/comfyui/h3rt_node.py) against a stand-in of ComfyUI, numpy only.

The stand-in, written here from ComfyUI's public behaviour (no ComfyUI code):
- FakeExecutor: comfy.patcher_extension.WrapperExecutor. Built from (original, class_obj,
  wrappers, idx); calling it runs wrappers[idx + 1](next_executor, *args, **kwargs), or the
  original once no wrapper is left; the first wrapper is the outermost.
- FakeH3.forward: comfy.ldm.minimax.model.MiniMaxH3Model.forward with audio_scale 1 (no carry):
  it collects transformer_options["wrappers"]["diffusion_model"] (every key, in insertion order)
  and runs _forward inside them with _forward's arguments (x, timestep, context,
  transformer_options, minimax_payload=, denoise_mask=, audio_denoise_mask=). FakeH3._forward
  records the call and returns a marker result; state_dict() returns numpy arrays.
- FakePatcher: comfy.model_patcher.ModelPatcher: .model (a BaseModel with .diffusion_model,
  current_weight_patches_uuid, lowvram_patch_counter), clone() (copies wrappers' lists and
  object_patches, shares the model), add_wrapper_with_key, add_object_patch, model_options.
- sample_call: what the sampler does per step: transformer_options = the patcher's
  model_options["transformer_options"] with the patcher's wrappers merged in, then
  diffusion_model.forward(...).

The numeric test loads the tiny golden weights into h3rt through the node (a numpy state dict)
and compares with ComfyUI's captured t2va forward; it skips when h3rt is not importable.
"""
import json
import logging
import os
import pathlib
import sys
import types

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "python" / "tests"))
import h3rt_node  # noqa: E402
from safetensors_np import read_safetensors  # noqa: E402  (the package tests' golden reader)

SHARED = pathlib.Path(os.environ.get("H3RT_SHARED_DIR",
                                     pathlib.Path(__file__).resolve().parents[4] / "shared"))
WEIGHTS = SHARED / "golden" / "h3_tiny" / "weights.safetensors"
COMFY = SHARED / "golden" / "h3_tiny_comfy"



# ---- the ComfyUI stand-in ----
class FakeExecutor:
    def __init__(self, original, class_obj, wrappers, idx):
        self.original, self.class_obj, self.wrappers, self.idx = original, class_obj, wrappers, idx

    def execute(self, *args, **kwargs):
        if self.idx == len(self.wrappers):
            return self.original(*args, **kwargs)
        return self.wrappers[self.idx](self, *args, **kwargs)

    def __call__(self, *args, **kwargs):
        return FakeExecutor(self.original, self.class_obj, self.wrappers, self.idx + 1).execute(
            *args, **kwargs)


COMFY_MARK = 7.0  # what FakeH3._forward returns everywhere


class FakeH3:
    hidden_size = 192  # MiniMaxH3Model's attribute of that name

    def __init__(self, state):
        self.state = state
        self.forward_calls = []

    def state_dict(self):
        return dict(self.state)

    def forward(self, x, timestep, context, transformer_options={}, minimax_payload=None,
                denoise_mask=None, audio_denoise_mask=None, **kwargs):
        wrappers = [w for ws in transformer_options.get("wrappers", {})
                    .get("diffusion_model", {}).values() for w in ws]
        return FakeExecutor(self._forward, self, wrappers, 0).execute(
            x, timestep, context, transformer_options, minimax_payload=minimax_payload,
            denoise_mask=denoise_mask, audio_denoise_mask=audio_denoise_mask, **kwargs)

    def _forward(self, x, timestep, context, transformer_options={}, **kwargs):
        self.forward_calls.append((x, timestep, context, transformer_options, kwargs))
        return [np.full_like(x[0], COMFY_MARK), np.full_like(x[1], COMFY_MARK)]


class FakePatcher:
    def __init__(self, diffusion_model):
        self.model = types.SimpleNamespace(diffusion_model=diffusion_model,
                                           current_weight_patches_uuid=None,
                                           lowvram_patch_counter=0)
        self.wrappers, self.object_patches = {}, {}
        self.model_options = {"transformer_options": {}}

    def clone(self):
        n = FakePatcher.__new__(FakePatcher)
        n.model = self.model
        n.wrappers = {k: {k1: list(w) for k1, w in v.items()} for k, v in self.wrappers.items()}
        n.object_patches = dict(self.object_patches)
        n.model_options = {"transformer_options": dict(self.model_options["transformer_options"])}
        return n

    def add_wrapper_with_key(self, wrapper_type, key, fn):
        self.wrappers.setdefault(wrapper_type, {}).setdefault(key, []).append(fn)

    def add_object_patch(self, name, obj):
        self.object_patches[name] = obj


def sample_call(patcher, x, timestep, context, **kwargs):
    to = dict(patcher.model_options["transformer_options"])
    to["wrappers"] = patcher.wrappers
    to.update(kwargs.pop("extra_options", {}))
    return patcher.model.diffusion_model.forward(x, timestep, context, to, **kwargs)


# ---- a stand-in engine (the tiny config) for everything but the numbers ----
TINY = {"hidden": 192, "text_dim": 64, "in_channels": 24, "audio_channels": 32, "pdd_heads": 1,
        "layers": 2}


class FakeEngine:
    device, precision = "cpu", "fp32"

    def __init__(self, config=TINY, fail=False):
        self.config, self.fail, self.calls, self.shifts = dict(config), fail, [], []

    # The node runs every call through forward_conditioned (_forward's timesteps); this engine
    # has no forward_latents, so a call there would fail.
    def forward_conditioned(self, video, audio, sigma, text, sample_sigmas=None, *, video_shift,
                            audio_shift, **kw):
        self.calls.append((video, audio, sigma, text, sample_sigmas, kw))
        self.shifts.append((video_shift, audio_shift))
        if self.fail:
            raise RuntimeError("h3rt: simulated failure")
        return 2.0 * video, 3.0 * audio  # distinct per stream, so swaps and signs show


class DeviceArray(np.ndarray):
    """Stands in for a CUDA torch tensor: .device.type "cuda" and detach(); cpu() fails (the node
    must hand it to a CUDA engine as it is); neg_() and to(dtype=) as torch's."""
    device = types.SimpleNamespace(type="cuda")

    def detach(self):
        return self

    def cpu(self):
        raise AssertionError("a device tensor was copied to the host")

    def neg_(self):
        np.negative(self, out=self)
        return self

    def to(self, dtype=None):
        return self.astype(dtype).view(DeviceArray)


class DeviceContext(DeviceArray):
    """A CUDA context stand-in the node may copy to the host (torch's float().cpu().contiguous()
    .numpy(), counted) and clone on the device."""
    copies = 0

    def float(self):
        return self

    def cpu(self):
        DeviceContext.copies += 1
        host = np.array(self, np.float32)
        return types.SimpleNamespace(contiguous=lambda: types.SimpleNamespace(numpy=lambda: host))

    def clone(self):
        return np.array(self, copy=True).view(DeviceContext)


class CudaEngine(FakeEngine):
    """A CUDA h3rt engine: device forwards return float32 CUDA arrays."""
    device, precision = "NVIDIA H200 (sm_90)", "bf16"

    def forward_conditioned(self, video, audio, sigma, text, sample_sigmas=None, **kw):
        self.calls.append((video, audio, sigma, text, sample_sigmas, kw))
        self.shifts.append((kw.pop("video_shift"), kw.pop("audio_shift")))
        return ((2.0 * video).astype(np.float32).view(DeviceArray),
                (3.0 * audio).astype(np.float32).view(DeviceArray))


class Loader:
    def __init__(self, engine=None, error=None):
        self.engine, self.error, self.calls = engine or FakeEngine(), error, []

    def __call__(self, src, **opts):
        self.calls.append((src, opts))
        if self.error:
            raise self.error
        return self.engine


def t2va_payload(L=12):
    layout = types.SimpleNamespace(segments=[(0, L, "text"), (L, L + 22, "audio"),
                                             (L + 22, L + 102, "video")])
    return {"text_token_tags": np.ones(L, np.int64), "seed": 1000, "audio_scale": 1.0,
            "layout": layout}


def inputs(seed=0, batch=1, h=8, w=8, width=64, dtype=np.float32):
    rng = np.random.default_rng(seed)
    video = rng.standard_normal((batch, 24, 5, h, w)).astype(dtype)
    audio = rng.standard_normal((batch, 32, 2, 11)).astype(dtype)
    context = rng.standard_normal((batch, 12, width)).astype(dtype)
    return [video, audio], np.array([700.0], np.float32), context


def patched(loader, **node_opts):
    base = FakePatcher(FakeH3({"w": np.zeros(3, np.float32)}))
    node_opts.setdefault("device", "cpu")
    (out,) = h3rt_node.H3rtPatchModel().patch(base, **node_opts)
    wrapper = out.wrappers["diffusion_model"]["h3rt"][0]
    wrapper.load = loader
    return base, out, wrapper


# ---- the node ----
def test_node_registration_and_patch_returns_a_clone():
    assert h3rt_node.NODE_CLASS_MAPPINGS == {"H3rtPatchModel": h3rt_node.H3rtPatchModel}
    assert h3rt_node.NODE_DISPLAY_NAME_MAPPINGS["H3rtPatchModel"] == "h3rt: run H3 in h3rt"
    req = h3rt_node.H3rtPatchModel.INPUT_TYPES()["required"]
    assert req["model"] == ("MODEL",) and req["attention"][0] == ["sage", "bf16"]
    assert req["device"][0] == ["cuda", "cpu"] and req["cuda_graphs"][0] == "BOOLEAN"
    assert h3rt_node.H3rtPatchModel.RETURN_TYPES == ("MODEL",)
    assert getattr(h3rt_node.H3rtPatchModel, h3rt_node.H3rtPatchModel.FUNCTION)
    base, out, wrapper = patched(Loader(), attention="sage", cuda_graphs=False)
    assert out is not base and out.model is base.model
    assert base.wrappers == {} and base.object_patches == {}
    assert list(out.wrappers["diffusion_model"]) == ["h3rt"]
    assert isinstance(wrapper, h3rt_node.H3rtWrapper)
    assert (wrapper.attention, wrapper.cuda_graphs, wrapper.device) == ("sage", False, "cpu")
    keep = out.object_patches["diffusion_model.preprocess_text_embeds"]
    t = np.ones((1, 3, 64), np.float32)
    assert keep(t) is t
    (plain,) = h3rt_node.H3rtPatchModel().patch(base, refine_text="in ComfyUI")
    assert plain.object_patches == {}


def test_default_attention_is_sage_on_the_gpu():
    req = h3rt_node.H3rtPatchModel.INPUT_TYPES()["required"]
    assert req["attention"][1]["default"] == "sage"
    assert h3rt_node.H3rtWrapper().attention == "sage"
    assert h3rt_node.engine_attention("sage", "cuda") == "sage"
    assert h3rt_node.engine_attention("bf16", "cuda") == "bf16"
    assert h3rt_node.engine_attention("sage", "cpu") == "bf16"


def test_h3rt_path_call_order_and_contract():
    loader = Loader()
    base, out, wrapper = patched(loader)
    x, ts, ctx = inputs()
    res = sample_call(out, x, ts, ctx, minimax_payload=t2va_payload())
    assert base.model.diffusion_model.forward_calls == []  # ComfyUI's _forward did not run
    assert len(loader.calls) == 1 and isinstance(loader.calls[0][0], dict)
    assert loader.calls[0][1] == {"device": "cpu", "attention": "bf16", "cuda_graphs": True}
    (video, audio, sigma, text, sample_sigmas, kw), = loader.engine.calls
    assert kw["mask_outputs"] is False and kw["keyframes"] == [] and kw["refs"] == []
    assert "video_mask" not in kw and "audio_mask" not in kw
    np.testing.assert_array_equal(video, x[0])
    np.testing.assert_array_equal(audio, x[1])
    np.testing.assert_array_equal(text, ctx)
    assert sigma == float(np.float32(700.0) / np.float32(1000.0)) and sample_sigmas is None
    # _forward's contract: [video, audio], input layouts and dtypes, sign = -(h3rt's velocity).
    assert isinstance(res, list) and len(res) == 2
    assert res[0].shape == x[0].shape and res[1].shape == x[1].shape
    assert res[0].dtype == x[0].dtype and res[1].dtype == x[1].dtype
    np.testing.assert_array_equal(res[0], -2.0 * x[0])
    np.testing.assert_array_equal(res[1], -3.0 * x[1])
    # The engine is built once per patched model, shared by its clones.
    sample_call(out.clone(), x, ts, ctx, minimax_payload=t2va_payload())
    assert len(loader.calls) == 1 and len(loader.engine.calls) == 2
    assert wrapper.calls == {"h3rt": 2, "comfyui": 0}


def test_frame_count_in_the_payload_runs_in_h3rt():
    # ComfyUI versions whose PackedLayout anchors a last-frame keyframe by frame_count put it in
    # the payload; it acts through the layout, which the node checks, so the call runs in h3rt.
    loader = Loader()
    _, out, wrapper = patched(loader)
    x, ts, ctx = inputs()
    sample_call(out, x, ts, ctx, minimax_payload=dict(t2va_payload(), frame_count=124))
    assert wrapper.calls == {"h3rt": 1, "comfyui": 0}


def test_flow_shifts_reach_h3rt_per_call():
    # ComfyUI's MiniMaxH3SigmaShift node sets both options; _forward reads them per call, else the
    # model's sigma_shift_video / sigma_shift_audio, else 12 and 3.
    loader = Loader()
    base, out, wrapper = patched(loader)
    x, ts, ctx = inputs()
    shifted = {"minimax_h3_sigma_shift_video": 5.0, "minimax_h3_sigma_shift_audio": 2.5}
    sample_call(out, x, ts, ctx, minimax_payload=t2va_payload(), extra_options=shifted)
    sample_call(out, x, ts, ctx, minimax_payload=t2va_payload())
    base.model.diffusion_model.sigma_shift_video = 7.0
    sample_call(out, x, ts, ctx, minimax_payload=t2va_payload(),
                extra_options={"minimax_h3_sigma_shift_audio": 4.0})
    mask = np.full((1, 1, 5, 8, 8), 0.5, np.float32)
    sample_call(out, x, ts, ctx, minimax_payload=t2va_payload(), denoise_mask=mask,
                extra_options=shifted)
    assert loader.engine.shifts == [(5.0, 2.5), (12.0, 3.0), (7.0, 4.0), (5.0, 2.5)]
    assert "video_mask" in loader.engine.calls[3][5]
    assert wrapper.calls == {"h3rt": 4, "comfyui": 0}


def test_output_dtype_follows_the_inputs():
    _, out, _ = patched(Loader())
    x, ts, ctx = inputs(dtype=np.float16)
    res = sample_call(out, x, ts, ctx, minimax_payload=t2va_payload())
    assert res[0].dtype == np.float16 and res[1].dtype == np.float16
    np.testing.assert_array_equal(res[1], (-3.0 * x[1].astype(np.float32)).astype(np.float16))


def test_cuda_engine_takes_device_latents_without_host_copies():
    loader = Loader(CudaEngine())
    _, out, wrapper = patched(loader, device="cuda")
    x, ts, ctx = inputs(dtype=np.float16)
    x = [a.view(DeviceArray) for a in x]
    ctx = ctx.view(DeviceContext)
    res = sample_call(out, x, ts, ctx, minimax_payload=t2va_payload())
    (video, audio, _, text, _, _), = loader.engine.calls
    assert video is x[0] and audio is x[1]  # as ComfyUI holds them
    assert type(text) is np.ndarray and text.dtype == np.float32  # h3rt reads text on the host
    np.testing.assert_array_equal(text, ctx.astype(np.float32))
    assert wrapper.calls == {"h3rt": 1, "comfyui": 0}
    for r, a, k in zip(res, x, (2.0, 3.0)):
        assert isinstance(r, DeviceArray) and r.dtype == np.float16 and r.shape == a.shape
        np.testing.assert_array_equal(r, (-k * a.astype(np.float32)).astype(np.float16))


def selftest_report(passed, device="GPU B (sm_121)"):
    cases = [{"name": "sage attention S=77 H=3", "result": "passed", "detail": "w4: ok",
              "seconds": 0.1},
             {"name": "forward nvfp4", "result": "passed" if passed else "failed",
              "detail": "ok" if passed else "video max |error| 9 > 3x the CPU bf16 forward's 0.1",
              "seconds": 0.2}]
    return {"passed": passed, "device": device, "seed": 7, "cases": cases}


@pytest.fixture
def gpu_arch(monkeypatch):
    """Sets torch's current GPU as the node sees it: gpu_arch((12, 1), report) with the stand-in
    h3rt.selftest() returning `report` (an Exception instance: raising it); returns the list of
    selftest calls."""
    calls = []
    monkeypatch.setattr(h3rt_node, "_SELFTESTS", {})

    def set_arch(cc, report=None, index=0):
        monkeypatch.setattr(h3rt_node, "_cuda_capability", lambda: (index, cc))

        def run():
            calls.append(cc)
            if isinstance(report, Exception):
                raise report
            return report
        monkeypatch.setattr(h3rt_node, "_run_selftest", run)
        return calls
    return set_arch


class NotingLoader(Loader):
    """h3rt.load on an untested arch: it warns to run h3rt selftest (h3rt._note_untested_arch)."""

    def __call__(self, src, **opts):
        import warnings
        warnings.warn("h3rt: h3rt's GPU test suite has run on sm_90 only; on this sm_121 GPU run "
                      "`h3rt selftest` once to check its kernels against the CPU reference")
        return super().__call__(src, **opts)


def test_blackwell_gpu_runs_the_selftest_once_before_the_first_engine(gpu_arch, caplog,
                                                                      recwarn):
    caplog.set_level(logging.INFO, logger="h3rt")
    calls = gpu_arch((12, 1), selftest_report(True))
    for _ in range(2):  # two patched models in one process: one self-test
        loader = NotingLoader(CudaEngine())
        _, out, wrapper = patched(loader, device="cuda")
        x, ts, ctx = inputs()
        sample_call(out, x, ts, ctx, minimax_payload=t2va_payload())
        assert wrapper.calls == {"h3rt": 1, "comfyui": 0} and len(loader.calls) == 1
    assert calls == [(12, 1)]
    assert any("self-test passed" in r.getMessage() for r in caplog.records)
    assert not [w for w in recwarn if "selftest" in str(w.message)]  # the node ran it already


def test_failed_selftest_sends_every_call_to_comfyui_naming_the_case(gpu_arch, caplog):
    caplog.set_level(logging.INFO, logger="h3rt")
    calls = gpu_arch((12, 1), selftest_report(False))
    loader = Loader(CudaEngine())
    base, out, wrapper = patched(loader, device="cuda")
    x, ts, ctx = inputs()
    for _ in range(2):
        res = sample_call(out, x, ts, ctx, minimax_payload=t2va_payload())
        assert np.all(res[0] == COMFY_MARK)
    assert wrapper.calls == {"h3rt": 0, "comfyui": 2} and loader.calls == [] and calls == [(12, 1)]
    msgs = [r.getMessage() for r in caplog.records]
    assert any("self-test failed on GPU B (sm_121) (seed 7): forward nvfp4: video max" in m
               for m in msgs), msgs
    # a report names the build (h3rt --version), or why the package is missing
    try:
        import h3rt
        build = f"please report it with: h3rt {h3rt.__version__}; CUDA backend: "
    except ImportError:
        build = "please report it with: the h3rt package is not importable"
    assert any(build in m for m in msgs), msgs
    # device cpu never asks
    _, out, _ = patched(Loader(), device="cpu")
    sample_call(out, x, ts, ctx, minimax_payload=t2va_payload())
    assert calls == [(12, 1)]


def test_selftest_that_raises_is_a_fallback_and_hopper_is_not_checked(gpu_arch, caplog):
    caplog.set_level(logging.INFO, logger="h3rt")
    gpu_arch((10, 0), RuntimeError("boom"))
    _, out, wrapper = patched(Loader(CudaEngine()), device="cuda")
    x, ts, ctx = inputs()
    sample_call(out, x, ts, ctx, minimax_payload=t2va_payload())
    assert wrapper.calls == {"h3rt": 0, "comfyui": 1}
    assert any("h3rt.selftest raised RuntimeError: boom" in r.getMessage()
               for r in caplog.records)
    calls = gpu_arch((9, 0), RuntimeError("never called"), index=1)  # the suite's own arch
    _, out, wrapper = patched(Loader(CudaEngine()), device="cuda")
    sample_call(out, x, ts, ctx, minimax_payload=t2va_payload())
    assert wrapper.calls == {"h3rt": 1, "comfyui": 0} and calls == [(10, 0)]  # sm_100's run


def test_unchanged_cuda_context_is_copied_to_the_host_once():
    loader = Loader(CudaEngine())
    _, out, wrapper = patched(loader, device="cuda")
    x, ts, cond = inputs(seed=1)
    uncond = inputs(seed=2)[2]
    x = [a.view(DeviceArray) for a in x]
    DeviceContext.copies = 0

    def call(ctx):  # a new tensor each call, as ComfyUI rebuilds the context every step
        sample_call(out, x, ts, np.array(ctx, copy=True).view(DeviceContext),
                    minimax_payload=t2va_payload())
        text = loader.engine.calls[-1][3]
        np.testing.assert_array_equal(text, np.asarray(ctx, np.float32))
        return text

    texts = [call(c) for c in (cond, uncond) * 3]  # CFG: cond and uncond alternate
    assert DeviceContext.copies == 2 and wrapper.host_text.copies == 2
    assert all(t is texts[0] for t in texts[::2]) and all(t is texts[1] for t in texts[1::2])
    changed = cond.copy()
    changed[0, 3, 5] += 1.0  # one value: a new prompt
    call(changed)
    assert DeviceContext.copies == 3
    same = np.array(changed, copy=True).view(DeviceContext)
    sample_call(out, x, ts, same, minimax_payload=t2va_payload())
    same[0, 0, 0] = 7.0  # the same tensor changed in place: compared by value, copied again
    sample_call(out, x, ts, same, minimax_payload=t2va_payload())
    assert DeviceContext.copies == 4
    np.testing.assert_array_equal(loader.engine.calls[-1][3], np.asarray(same, np.float32))
    assert wrapper.calls == {"h3rt": 9, "comfyui": 0}


def test_host_text_compares_torch_tensors_by_value():
    torch = pytest.importorskip("torch")
    h = h3rt_node.HostText()
    a = torch.randn(1, 12, 64).to(torch.bfloat16)
    first = h.get(a)
    assert first.dtype == np.float32 and h.copies == 1
    np.testing.assert_array_equal(first, a.float().numpy())
    assert h.get(a.clone()) is first and h.copies == 1  # equal values: the same host copy
    b = a.clone()
    b[0, 0, 0] += 1
    assert h.get(b) is not first and h.copies == 2
    assert h.get(a) is first and h.copies == 2  # two kept: cond and uncond
    assert h.get(a.float()) is not first and h.copies == 3  # another dtype: copied
    n = a.clone()
    n[0, 1, 1] = float("nan")
    h.get(n)
    h.get(n)
    assert h.copies == 5  # NaN never equals itself: copied every time


def test_full_masks_and_outer_wrappers_still_run_in_h3rt():
    loader = Loader()
    _, out, wrapper = patched(loader)
    seen = []

    def outer(executor, *args, **kwargs):
        seen.append("outer")
        return executor(*args, **kwargs)

    # An outer wrapper (registered first) runs around h3rt; masks of all ones mean "no mask".
    out.wrappers["diffusion_model"] = {"outer": [outer], **out.wrappers["diffusion_model"]}
    x, ts, ctx = inputs()
    sample_call(out, x, ts, ctx, minimax_payload=t2va_payload(),
                denoise_mask=np.ones((1, 1, 5, 8, 8), np.float32),
                audio_denoise_mask=np.ones((1, 1, 2, 11), np.float32))
    assert seen == ["outer"] and wrapper.calls == {"h3rt": 1, "comfyui": 0}


def test_pdd_bank_gets_the_sample_sigmas():
    engine = FakeEngine(dict(TINY, pdd_heads=4))
    _, out, _ = patched(Loader(engine))
    x, ts, ctx = inputs()
    sigmas = np.array([1.0, 0.7, 0.3, 0.0], np.float32)
    sample_call(out, x, ts, ctx, minimax_payload=t2va_payload(),
                extra_options={"sample_sigmas": sigmas})
    assert engine.calls[0][4] == pytest.approx([1.0, 0.7, 0.3, 0.0])


def _inner_wrapper(out):
    out.add_wrapper_with_key("diffusion_model", "other", lambda ex, *a, **k: ex(*a, **k))


# (name, how to make the call ComfyUI-only, a piece of the log line)
FALLBACKS = [
    ("batch", lambda o: {"x": inputs(batch=2)}, "batch size > 1"),
    ("cond latents", lambda o: {"payload": {"cond_video_latents": [np.zeros(1)]}},
     "'cond_video_latents' without keyframes or refs"),
    ("layout", lambda o: {"payload": {"layout": types.SimpleNamespace(
        segments=[(0, 12, "text"), (12, 28, "cond"), (28, 50, "audio"), (50, 130, "video")])}},
     "['cond']"),
    ("mask rank", lambda o: {"kw": {"denoise_mask": np.full((1, 5, 8, 8), 0.5, np.float32)}},
     "denoise_mask of shape (1, 5, 8, 8)"),
    ("payload key", lambda o: {"payload": {"temporal_stretch": 30.0}},
     "minimax_payload has keys h3rt does not compute: ['temporal_stretch']"),
    ("keyframe key", lambda o: {"payload": {"keyframes": [
        {"resolved_frame_index": 0, "latent": np.ones((1, 24, 1, 8, 8), np.float32),
         "kind": "context", "num_frames": 1}]}},
     "keyframes[0] has keys h3rt does not compute: ['kind', 'num_frames']"),
    ("ref key", lambda o: {"payload": {"refs": [
        {"kind": "audio", "ref_audio_t": 3, "audio_latent": np.ones((1, 32, 2, 3), np.float32),
         "strength": 0.5}]}},
     "refs[0] has keys h3rt does not compute: ['strength']"),
    ("refined text", lambda o: {"x": inputs(width=192)}, "refined text states"),
    ("other width", lambda o: {"x": inputs(width=32)}, "neither text_dim"),
    ("odd size", lambda o: {"x": inputs(h=7)}, "odd latent"),
    ("dit patch", lambda o: {"opts": {"patches_replace": {"dit": {("double_block", 0): 1}}}},
     "patches_replace"),
    ("attention override", lambda o: {"opts": {"optimized_attention_override": print}},
     "attention override"),
    ("inner wrapper", lambda o: _inner_wrapper(o) or {}, "another DIFFUSION_MODEL wrapper"),
    ("lowvram lora", lambda o: setattr(o.model, "lowvram_patch_counter", 3) or {},
     "low-VRAM LoRA patches, but the model has no modules()"),
]


@pytest.mark.parametrize("name,make,reason", FALLBACKS, ids=[f[0] for f in FALLBACKS])
def test_fallback_runs_comfyui_and_logs_once(name, make, reason, caplog):
    loader = Loader()
    base, out, wrapper = patched(loader)
    case = make(out)
    x, ts, ctx = case.get("x", inputs())
    payload = dict(t2va_payload(), **case.get("payload", {}))
    caplog.set_level(logging.INFO, logger="h3rt")
    for _ in range(2):
        res = sample_call(out, x, ts, ctx, minimax_payload=payload,
                          extra_options=case.get("opts", {}), **case.get("kw", {}))
        assert all(np.all(r == COMFY_MARK) for r in res)  # ComfyUI's own result
    calls = base.model.diffusion_model.forward_calls
    assert len(calls) == 2 and calls[0][0] is not None
    assert calls[0][4]["minimax_payload"] is payload  # the arguments passed through unchanged
    assert loader.engine.calls == []
    if name not in ("other width",):  # decided from the call alone: no weights were loaded
        assert loader.calls == []
    lines = [r.getMessage() for r in caplog.records if reason in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in caplog.records]
    assert wrapper.calls == {"h3rt": 0, "comfyui": 2}


def test_h3rt_errors_fall_back_and_log_once(caplog):
    caplog.set_level(logging.INFO, logger="h3rt")
    engine = FakeEngine(fail=True)
    base, out, wrapper = patched(Loader(engine))
    x, ts, ctx = inputs()
    for _ in range(2):
        res = sample_call(out, x, ts, ctx, minimax_payload=t2va_payload())
        assert np.all(res[0] == COMFY_MARK)
    assert len(engine.calls) == 2 and len(base.model.diffusion_model.forward_calls) == 2
    assert len([r for r in caplog.records if "simulated failure" in r.getMessage()]) == 1


def test_load_failure_is_not_retried(caplog):
    caplog.set_level(logging.INFO, logger="h3rt")
    loader = Loader(error=TypeError("state dict 'w': unsupported dtype float8"))
    base, out, _ = patched(loader)
    x, ts, ctx = inputs()
    for _ in range(3):
        sample_call(out, x, ts, ctx, minimax_payload=t2va_payload())
    assert len(loader.calls) == 1 and len(base.model.diffusion_model.forward_calls) == 3
    assert len([r for r in caplog.records if "float8" in r.getMessage()]) == 1


class QuantH3(FakeH3):
    """A model holding int8 layers as ComfyUI does: state_dict() writes each comfy_quant as
    {"format": ...} alone (comfy/ops.py), and the weight's layout parameters (comfy-kitchen's
    QuantizedTensor._params: convrot, convrot_groupsize, transposed) sit on the module."""

    def __init__(self, state, params):
        super().__init__(state)
        self.params = params  # layer name -> _params (None: a weight without them)

    def named_modules(self):
        for name, p in self.params.items():
            weight = types.SimpleNamespace(**({} if p is None else {"_params": p}))
            yield name, types.SimpleNamespace(weight=weight)


def marker(conf):
    return np.frombuffer(json.dumps(conf).encode(), np.uint8).copy()


def convrot(g, transposed=False):
    return types.SimpleNamespace(convrot=True, convrot_groupsize=g, transposed=transposed)


def test_int8_rotation_is_restored_from_the_loaded_model():
    # ComfyUI's state dict of an int8_convrot layer says only "int8_tensorwise": the rotation
    # comes back from the weight's layout parameters, as the checkpoint file held it.
    state = {"a.weight": np.zeros((4, 64), np.int8), "a.weight_scale": np.ones((4, 1), np.float32),
             "a.comfy_quant": marker({"format": "int8_tensorwise"}),
             "b.weight": np.zeros((4, 64), np.int8), "b.weight_scale": np.ones((4, 1), np.float32),
             "b.comfy_quant": marker({"format": "int8_tensorwise"}),
             "c.weight": np.zeros((4, 64), np.float32),
             "d.comfy_quant": marker({"format": "float8_e4m3fn"})}
    plain = types.SimpleNamespace(convrot=False, convrot_groupsize=256, transposed=False)
    loader = Loader()
    base = FakePatcher(QuantH3(state, {"a": convrot(64), "b": plain, "d": None}))
    (out,) = h3rt_node.H3rtPatchModel().patch(base, device="cpu")
    out.wrappers["diffusion_model"]["h3rt"][0].load = loader
    x, ts, ctx = inputs()
    sample_call(out, x, ts, ctx, minimax_payload=t2va_payload())
    got = loader.calls[0][0]

    def conf(k):
        return json.loads(bytes(got[k]).decode())
    assert conf("a.comfy_quant") == {"format": "int8_tensorwise", "convrot": True,
                                     "convrot_groupsize": 64}
    assert conf("b.comfy_quant") == {"format": "int8_tensorwise", "convrot": False}
    assert conf("d.comfy_quant") == {"format": "float8_e4m3fn"}  # not int8: as it was
    np.testing.assert_array_equal(got["a.weight"], state["a.weight"])
    assert json.loads(bytes(state["a.comfy_quant"]).decode()) == {"format": "int8_tensorwise"}


@pytest.mark.parametrize("fmt,params,reason", [
    ("int8_tensorwise", None,
     "int8 layer 'a': its rotation (convrot) cannot be read from the loaded model"),
    ("int8_tensorwise", convrot(64, transposed=True),
     "int8_tensorwise layer 'a' is held transposed"),
    ("float8_e4m3fn", types.SimpleNamespace(transposed=True),
     "float8_e4m3fn layer 'a' is held transposed")])
def test_quantized_layers_h3rt_cannot_read_run_comfyui(fmt, params, reason, caplog):
    state = {"a.weight": np.zeros((4, 64), np.int8), "a.weight_scale": np.ones((4, 1), np.float32),
             "a.comfy_quant": marker({"format": fmt})}
    loader = Loader()
    base = FakePatcher(QuantH3(state, {"a": params}))
    (out,) = h3rt_node.H3rtPatchModel().patch(base, device="cpu")
    wrapper = out.wrappers["diffusion_model"]["h3rt"][0]
    wrapper.load = loader
    caplog.set_level(logging.INFO, logger="h3rt")
    x, ts, ctx = inputs()
    for _ in range(3):
        res = sample_call(out, x, ts, ctx, minimax_payload=t2va_payload())
        assert all(np.all(r == COMFY_MARK) for r in res)
    assert loader.calls == [] and wrapper.calls == {"h3rt": 0, "comfyui": 3}
    assert len([r for r in caplog.records if reason in r.getMessage()]) == 1
    # A marker that already carries the rotation needs nothing from the module.
    state["a.comfy_quant"] = marker({"format": "int8_tensorwise", "convrot": True})
    assert h3rt_node.restore_quant_params(QuantH3(state, {}), state) == state


def test_int8_convrot_model_from_comfyui_gives_the_files_numbers(tmp_path):
    """The real engine: an int8_convrot checkpoint (the CLI's, group 64) as ComfyUI's loaded
    model hands it over (markers without the rotation, the rotation on the modules) gives the
    bits of the file loaded by path; the same state without the rotation restored is another
    model (the silent error this guards against)."""
    h3rt = pytest.importorskip("h3rt")
    import subprocess
    from test_h3rt import find_cli
    cli = find_cli()
    if cli is None:
        pytest.skip("no h3rt CLI next to this package (set H3RT_CLI)")
    path = tmp_path / "int8_convrot.safetensors"
    subprocess.run([cli, "quantize-checkpoint", "--in", str(WEIGHTS), "--out", str(path),
                    "--format", "int8_convrot", "--group-size", "64"], check=True,
                   capture_output=True)
    state, params = {}, {}
    for k, v in read_safetensors(path).items():
        if k.endswith(".comfy_quant"):
            conf = json.loads(bytes(v).decode())
            params[k[:-len(".comfy_quant")]] = convrot(conf["convrot_groupsize"])
            v = marker({"format": conf["format"]})  # what ComfyUI's state_dict() writes
        state[k] = v
    assert params
    base = FakePatcher(QuantH3(state, params))
    (out,) = h3rt_node.H3rtPatchModel().patch(base, device="cpu")
    case = read_safetensors(COMFY / "t2va.safetensors")
    video = case["input/video_latents"]
    audio = case["input/audio_latents"].transpose(1, 0, 2)[None]
    text = case["input/text_embeds"]
    res = sample_call(out, [video, audio], np.array([700.0], np.float32), text,
                      minimax_payload=t2va_payload())
    sigma = float(np.float32(700.0) / np.float32(1000.0))
    want = h3rt.load(str(path)).forward_conditioned(video, audio, sigma, text)
    for r, w in zip(res, want):
        np.testing.assert_array_equal(r.view(np.uint32), np.negative(w).view(np.uint32))
    unrotated = h3rt.load(state).forward_conditioned(video, audio, sigma, text)
    assert np.abs(unrotated[0] - want[0]).max() > 0.1 * np.abs(want[0]).max()


def test_new_weight_patches_rebuild_the_engine():
    loader = Loader()
    _, out, _ = patched(loader)
    x, ts, ctx = inputs()
    sample_call(out, x, ts, ctx, minimax_payload=t2va_payload())
    out.model.current_weight_patches_uuid = "lora-1"  # ComfyUI patched other weights in
    sample_call(out, x, ts, ctx, minimax_payload=t2va_payload())
    sample_call(out, x, ts, ctx, minimax_payload=t2va_payload())
    assert len(loader.calls) == 2


def test_h3rt_not_importable_falls_back(monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="h3rt")
    monkeypatch.setitem(sys.modules, "h3rt", None)  # import h3rt raises ImportError
    base, out, wrapper = patched(None)
    x, ts, ctx = inputs()
    sample_call(out, x, ts, ctx, minimax_payload=t2va_payload())
    assert len(base.model.diffusion_model.forward_calls) == 1
    assert any("not importable" in r.getMessage() for r in caplog.records)


def test_file_path_weights_load_by_path(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="h3rt")
    ckpt = tmp_path / "h3.safetensors"
    ckpt.write_bytes(b"")
    loader = Loader()
    _, out, _ = patched(loader, weights="from file path", checkpoint_path=str(ckpt))
    x, ts, ctx = inputs()
    sample_call(out, x, ts, ctx, minimax_payload=t2va_payload())
    assert loader.calls[0][0] == str(ckpt)
    assert any("second copy" in r.getMessage() for r in caplog.records)


def test_loras_reach_h3rt_load_and_key_the_engine(tmp_path):
    assert h3rt_node.parse_loras("a.safetensors:0.5\n b.safetensors ;c:/x.safetensors") == [
        ("a.safetensors", 0.5), ("b.safetensors", 1.0), ("c:/x.safetensors", 1.0)]
    ckpt = tmp_path / "h3.safetensors"
    ckpt.write_bytes(b"")
    lora = tmp_path / "t.safetensors"
    lora.write_bytes(b"")
    loader = Loader()
    _, out, wrapper = patched(loader, weights="from file path", checkpoint_path=str(ckpt),
                              loras=f"{lora}:0.75")
    x, ts, ctx = inputs()
    sample_call(out, x, ts, ctx, minimax_payload=t2va_payload())
    assert loader.calls[0][1]["loras"] == [(str(lora), 0.75)]
    wrapper.loras = ((str(lora), 1.0),)  # another strength: a new engine
    sample_call(out, x, ts, ctx, minimax_payload=t2va_payload())
    assert len(loader.calls) == 2 and loader.calls[1][1]["loras"] == [(str(lora), 1.0)]
    _, out, _ = patched(loader)  # weights from the loaded model, no loras: none passed
    sample_call(out, x, ts, ctx, minimax_payload=t2va_payload())
    assert "loras" not in loader.calls[2][1]


# ---- low-VRAM LoRA patches (comfy.model_patcher.LowVramPatch in modules' weight_function) ----
class LowVramPatch:
    """comfy.model_patcher.LowVramPatch: the weight key and the patcher's whole patches dict."""

    def __init__(self, key, patches):
        self.key, self.patches = key, patches


class LoRAAdapter:
    """comfy.weight_adapter.LoRAAdapter: name "lora", weights (up, down, alpha, mid, dora_scale,
    reshape)."""
    name = "lora"

    def __init__(self, up, down, alpha=None, mid=None, dora=None, reshape=None):
        self.weights = (up, down, alpha, mid, dora, reshape)


class PatchedH3(FakeH3):
    """A model loaded in low-VRAM mode: modules() yields layers whose weight_function holds one
    LowVramPatch each, as ComfyUI sets them on layers it did not patch in place."""

    def __init__(self, state, patches):
        super().__init__(state)
        self.patches = patches
        self.bias_patch = False

    def modules(self):
        yield types.SimpleNamespace(weight_function=[], bias_function=None)  # the model itself
        for i, key in enumerate(self.patches):
            f = LowVramPatch(key, self.patches)  # older ComfyUI: the callable alone, not a list
            yield types.SimpleNamespace(weight_function=[f] if i % 2 == 0 else f,
                                        bias_function=[f] if self.bias_patch else [])


def lowvram_patched(loader, state, patches, **node_opts):
    base = FakePatcher(PatchedH3(state, patches))
    base.model.lowvram_patch_counter = len(patches)
    (out,) = h3rt_node.H3rtPatchModel().patch(base, device="cpu", **node_opts)
    wrapper = out.wrappers["diffusion_model"]["h3rt"][0]
    wrapper.load = loader
    return base, out, wrapper


def test_lowvram_lora_patches_reach_h3rt_as_tensors():
    rng = np.random.default_rng(5)
    qkv, fc1 = "diffusion_model.blocks.0.attn.qkv_proj", "diffusion_model.blocks.1.mlp.fc1"
    a_up, a_down = rng.standard_normal((768, 4)), rng.standard_normal((4, 192))
    b_up, b_down = rng.standard_normal((256, 2)), rng.standard_normal((2, 192))
    c_up, c_down = rng.standard_normal((768, 3)), rng.standard_normal((3, 192))
    patches = {
        qkv + ".weight": [(0.5, LoRAAdapter(a_up, a_down, 8.0), 1.0, None, None),
                          # a to_k LoRA on the fused qkv: rows [256, 512), the older tuple form
                          (0.25, ("lora", (b_up, b_down, None, None, None)), 1.0,
                           (0, 256, 256), None)],
        fc1 + ".weight": [(2.0, LoRAAdapter(c_up, c_down, np.float32(6.0)), 1.0, None, None)]}
    state = {"blocks.0.attn.qkv_proj.weight": np.zeros((768, 192), np.float32),
             "blocks.1.mlp.fc1.weight": np.zeros((768, 192), np.float32)}
    loader = Loader()
    _, out, wrapper = lowvram_patched(loader, state, patches, loras="")
    x, ts, ctx = inputs()
    sample_call(out, x, ts, ctx, minimax_payload=t2va_payload())
    assert wrapper.calls == {"h3rt": 1, "comfyui": 0}
    (first, s1), (second, s2) = loader.calls[0][1]["loras"]
    assert s1 == s2 == 1.0
    assert sorted(first) == sorted(f"{m}.{k}" for m in (qkv, fc1)
                                   for k in ("lora_up.weight", "lora_down.weight", "alpha"))
    assert first[qkv + ".lora_up.weight"] is a_up and first[qkv + ".lora_down.weight"] is a_down
    assert first[qkv + ".alpha"].tolist() == [4.0]  # strength x alpha
    assert first[fc1 + ".alpha"].tolist() == [12.0]
    # The layer's second patch in the second mapping, its rows placed, zero elsewhere; no alpha:
    # strength x rank (ComfyUI's scale of 1).
    assert sorted(second) == [qkv + ".alpha", qkv + ".lora_down.weight", qkv + ".lora_up.weight"]
    up = second[qkv + ".lora_up.weight"]
    assert up.shape == (768, 2) and np.array_equal(up[256:512], b_up)
    assert not up[:256].any() and not up[512:].any()
    assert second[qkv + ".alpha"].tolist() == [0.5]


LOWVRAM_REFUSED = [
    ("dora", lambda u, d: (1.0, LoRAAdapter(u, d, None, None, np.ones(4))), "DoRA"),
    ("mid", lambda u, d: (1.0, LoRAAdapter(u, d, None, np.ones((4, 4)))), "LoCon mid"),
    ("strength_model", lambda u, d: (1.0, LoRAAdapter(u, d), 0.5, None, None), "strength_model"),
    ("loha", lambda u, d: (1.0, ("loha", (u, d))), "a tuple adapter"),
    ("column offset", lambda u, d: (1.0, LoRAAdapter(u, d), 1.0, (1, 0, 96), None),
     "offset (1, 0, 96) is not a row range"),
]


@pytest.mark.parametrize("name,patch,reason", LOWVRAM_REFUSED, ids=[c[0] for c in LOWVRAM_REFUSED])
def test_lowvram_patches_h3rt_cannot_merge_run_comfyui(name, patch, reason, caplog):
    caplog.set_level(logging.INFO, logger="h3rt")
    key = "diffusion_model.blocks.0.mlp.fc2.weight"
    p = patch(np.ones((192, 4)), np.ones((4, 768)))
    loader = Loader()
    base, out, wrapper = lowvram_patched(loader, {"blocks.0.mlp.fc2.weight": np.zeros((192, 768))},
                                         {key: [p]})
    x, ts, ctx = inputs()
    for _ in range(2):
        sample_call(out, x, ts, ctx, minimax_payload=t2va_payload())
    assert loader.calls == [] and wrapper.calls == {"h3rt": 0, "comfyui": 2}
    lines = [r.getMessage() for r in caplog.records if reason in r.getMessage()]
    assert len(lines) == 1 and f"low-VRAM LoRA patches: patch 0 of '{key}'" in lines[0], lines
    assert "'loras' option" in lines[0]


def test_lowvram_bias_patches_run_comfyui(caplog):
    caplog.set_level(logging.INFO, logger="h3rt")
    loader = Loader()
    base, out, wrapper = lowvram_patched(loader, {}, {"diffusion_model.blocks.0.mlp.fc2.weight": [
        (1.0, LoRAAdapter(np.ones((192, 4)), np.ones((4, 768))))]})
    base.model.diffusion_model.bias_patch = True
    x, ts, ctx = inputs()
    sample_call(out, x, ts, ctx, minimax_payload=t2va_payload())
    assert loader.calls == [] and wrapper.calls == {"h3rt": 0, "comfyui": 1}
    assert any("patch of a bias" in r.getMessage() for r in caplog.records)


def test_lowvram_lora_gives_the_bits_of_the_file_through_loras():
    """The real engine: the tiny model with a LoRA left as ComfyUI's low-VRAM patches gives the
    bits of the same LoRA file given to the node's loras option, and differs from no LoRA."""
    h3rt = pytest.importorskip("h3rt")
    rng = np.random.default_rng(6)
    m = "diffusion_model.blocks.1.attn.out_proj"
    up = (rng.standard_normal((192, 4)) * 0.2).astype(np.float32)
    down = (rng.standard_normal((4, 256)) * 0.2).astype(np.float32)  # out_proj: [192, 256]
    state = read_safetensors(WEIGHTS)
    case = read_safetensors(COMFY / "t2va.safetensors")
    video = case["input/video_latents"]
    audio = case["input/audio_latents"].transpose(1, 0, 2)[None]
    text = case["input/text_embeds"]
    sigma = float(np.float32(700.0) / np.float32(1000.0))
    results = []
    for patches in ({m + ".weight": [(0.5, LoRAAdapter(up, down, 2.0), 1.0, None, None)]}, {}):
        base = FakePatcher(PatchedH3(state, patches))
        base.model.lowvram_patch_counter = len(patches)
        (out,) = h3rt_node.H3rtPatchModel().patch(base, device="cpu")
        results.append(sample_call(out, [video, audio], np.array([700.0], np.float32), text,
                                   minimax_payload=t2va_payload()))
    path = pathlib.Path(os.environ.get("TMPDIR", "/tmp")) / f"h3rt_lowvram_{os.getpid()}.st"
    from safetensors_np import write_safetensors
    write_safetensors(path, {m + ".lora_up.weight": up, m + ".lora_down.weight": down,
                             m + ".alpha": np.array([2.0], np.float32)})
    try:
        want = h3rt.load(state, loras=[(str(path), 0.5)]).forward_conditioned(video, audio,
                                                                              sigma, text)
    finally:
        path.unlink()
    for r, w, plain in zip(results[0], want, results[1]):
        np.testing.assert_array_equal(r.view(np.uint32), np.negative(w).view(np.uint32))
        assert np.abs(r - plain).max() > 1e-4


def test_options_that_would_drop_what_they_ask_for_are_refused_on_the_node(tmp_path):
    """A LoRA line that names no file or has a bad strength, or a checkpoint_path that is not a
    file: raised when the node runs (a fallback to ComfyUI's forward would drop the LoRAs)."""
    lora = tmp_path / "t.safetensors"
    lora.write_bytes(b"")
    loader = Loader()
    with pytest.raises(ValueError, match=r"loras: '.*missing.safetensors' is not a file"):
        patched(loader, loras=f"{lora}\n{tmp_path}/missing.safetensors:0.5")
    with pytest.raises(ValueError, match=r"'abc' after the file is not a strength"):
        patched(loader, loras=f"{lora}:abc")
    with pytest.raises(ValueError, match=r"checkpoint_path '.*nope' is not a file"):
        patched(loader, weights="from file path", checkpoint_path=str(tmp_path / "nope"))
    with pytest.raises(ValueError, match=r"checkpoint_path '' is not a file"):
        patched(loader, weights="from file path")
    patched(loader, loras=f"{lora}:0.5")  # a good list passes
    assert loader.calls == []


def test_device_memory_limit_reaches_h3rt_load_and_keys_the_engine(tmp_path, caplog):
    ckpt = tmp_path / "h3.safetensors"
    ckpt.write_bytes(b"")
    loader = Loader(engine=CudaEngine())
    _, out, wrapper = patched(loader, device="cuda", weights="from file path",
                              checkpoint_path=str(ckpt), device_memory_limit=" 24GB ")
    x, ts, ctx = inputs()
    sample_call(out, x, ts, ctx, minimax_payload=t2va_payload())
    assert loader.calls[0][1]["device_memory_limit"] == "24GB"
    wrapper.device_memory_limit = "16GB"  # another limit: a new engine
    sample_call(out, x, ts, ctx, minimax_payload=t2va_payload())
    assert len(loader.calls) == 2 and loader.calls[1][1]["device_memory_limit"] == "16GB"
    _, out, _ = patched(loader, device="cuda", weights="from file path",
                        checkpoint_path=str(ckpt))  # none given: none passed
    sample_call(out, x, ts, ctx, minimax_payload=t2va_payload())
    assert "device_memory_limit" not in loader.calls[2][1]
    caplog.set_level(logging.INFO, logger="h3rt")
    _, out, _ = patched(loader, device="cpu", weights="from file path",
                        checkpoint_path=str(ckpt), device_memory_limit="24GB")
    sample_call(out, x, ts, ctx, minimax_payload=t2va_payload())
    assert "device_memory_limit" not in loader.calls[3][1]
    assert any("applies to the cuda device" in r.getMessage() for r in caplog.records)


def test_loading_from_the_file_path_draws_comfyuis_progress_bar(tmp_path, monkeypatch):
    bars = []

    class ProgressBar:  # comfy.utils.ProgressBar's two calls the node makes
        def __init__(self, total):
            self.total, self.values = total, []
            bars.append(self)

        def update_absolute(self, value, total=None):
            self.values.append((value, total))

    utils = types.ModuleType("comfy.utils")
    utils.ProgressBar = ProgressBar
    comfy = types.ModuleType("comfy")
    comfy.utils = utils
    monkeypatch.setitem(sys.modules, "comfy", comfy)
    monkeypatch.setitem(sys.modules, "comfy.utils", utils)
    ckpt = tmp_path / "h3.safetensors"
    ckpt.write_bytes(b"")
    loader = Loader(engine=CudaEngine())
    _, out, _ = patched(loader, device="cuda", weights="from file path", checkpoint_path=str(ckpt))
    x, ts, ctx = inputs()
    sample_call(out, x, ts, ctx, minimax_payload=t2va_payload())
    progress = loader.calls[0][1]["load_progress"]
    for done in range(4):  # as h3rt calls it: (0, n), then after each block
        progress(done, 3)
    assert len(bars) == 1 and bars[0].total == 3
    assert bars[0].values == [(0, 3), (1, 3), (2, 3), (3, 3)]
    _, out, _ = patched(loader, device="cpu", weights="from file path", checkpoint_path=str(ckpt))
    sample_call(out, x, ts, ctx, minimax_payload=t2va_payload())
    assert "load_progress" not in loader.calls[1][1]  # the CPU backend uploads nothing


def test_a_limit_h3rt_refuses_falls_back_with_its_message(caplog):
    err = RuntimeError("device_memory_limit 16 GB: the model's block weights are the caller's "
                       "CUDA tensors")
    loader = Loader(engine=CudaEngine(), error=err)
    _, out, wrapper = patched(loader, device="cuda", device_memory_limit="16GB")
    x, ts, ctx = inputs()
    with caplog.at_level(logging.WARNING, logger="h3rt"):
        sample_call(out, x, ts, ctx, minimax_payload=t2va_payload())
    assert wrapper.calls["comfyui"] == 1 and wrapper.calls["h3rt"] == 0
    assert any("caller's CUDA tensors" in r.getMessage() for r in caplog.records)


# ---- the numbers: h3rt through the node against ComfyUI's captured _forward ----
def rel_max_err(got, ref):
    got, ref = np.asarray(got, np.float64).ravel(), np.asarray(ref, np.float64).ravel()
    assert got.shape == ref.shape
    return np.abs(got - ref).max() / np.abs(ref).max()


def test_node_reproduces_comfyui_t2va_forward():
    pytest.importorskip("h3rt")
    case = read_safetensors(COMFY / "t2va.safetensors")
    base = FakePatcher(FakeH3(read_safetensors(WEIGHTS)))  # the model's own state dict
    (out,) = h3rt_node.H3rtPatchModel().patch(base, device="cpu")
    wrapper = out.wrappers["diffusion_model"]["h3rt"][0]
    video = case["input/video_latents"]                           # [1, 24, T, H, W]
    audio = case["input/audio_latents"].transpose(1, 0, 2)[None]  # ComfyUI's [1, 32, 2, N]
    payload = t2va_payload()
    payload["text_token_tags"] = case["input/text_token_tags"]
    res = sample_call(out, [video, audio], case["input/timestep"], case["input/text_embeds"],
                      minimax_payload=payload)
    assert wrapper.calls == {"h3rt": 1, "comfyui": 0}
    assert base.model.diffusion_model.forward_calls == []
    # The file stores data-ward velocities (rows); _forward returned their negation.
    _, c, t, h, w = video.shape
    ref_v = -case["video_velocity"][0].reshape(t, h // 2, w // 2, c, 2, 2) \
        .transpose(3, 0, 1, 4, 2, 5).reshape(video.shape)
    n = audio.shape[-1]
    ref_a = -case["audio_velocity"][0].reshape(2, n, audio.shape[1]).transpose(2, 0, 1)[None]
    assert res[0].dtype == np.float32 and res[0].shape == video.shape
    assert res[1].shape == audio.shape
    assert rel_max_err(res[0], ref_v) <= 1e-5
    assert rel_max_err(res[1], ref_a) <= 1e-5
    assert rel_max_err(-res[0], ref_v) > 1.0  # the sign is checked, not only magnitudes


def test_node_takes_comfyuis_timesteps_and_shifts_in_h3rt():
    """The real engine: a plain t2va call gives forward_conditioned's bits (_forward's audio
    timestep, rounded once), which forward_latents' reference timestep misses at this sigma, and
    MiniMaxH3SigmaShift's options reach h3rt's numbers."""
    h3rt = pytest.importorskip("h3rt")
    case = read_safetensors(COMFY / "t2va.safetensors")
    base = FakePatcher(FakeH3(read_safetensors(WEIGHTS)))
    (out,) = h3rt_node.H3rtPatchModel().patch(base, device="cpu")
    video = case["input/video_latents"]
    audio = case["input/audio_latents"].transpose(1, 0, 2)[None]
    text = case["input/text_embeds"]
    payload = dict(t2va_payload(), text_token_tags=case["input/text_token_tags"])
    engine = h3rt.load(str(WEIGHTS))
    sigma = np.float32(0.85)  # audio sigma 0.34: 1 - f32(0.34..) != f32(1 - 0.34..)
    base_sigma = float(sigma) / (12.0 - 11.0 * float(sigma))
    sigma_a = 3.0 * base_sigma / (1.0 + 2.0 * base_sigma)
    assert np.float32(1) - np.float32(sigma_a) != np.float32(1.0 - sigma_a)
    ts = np.array([sigma * np.float32(1000)], np.float32)
    for shifts in ({}, {"minimax_h3_sigma_shift_video": 5.0, "minimax_h3_sigma_shift_audio": 2.5}):
        res = sample_call(out, [video, audio], ts, text, minimax_payload=payload,
                          extra_options=shifts)
        kw = {"video_shift": 5.0, "audio_shift": 2.5} if shifts else {}
        want = engine.forward_conditioned(video, audio, float(sigma), text, **kw)
        for r, w in zip(res, want):
            np.testing.assert_array_equal(r.view(np.uint32), np.negative(w).view(np.uint32))
        if not shifts:
            latents = engine.forward_latents(video, audio, float(sigma), text)
            assert not np.array_equal(latents[1], want[1])
            plain = res
    assert not np.array_equal(plain[1], res[1])  # the shifts change the audio velocity


def test_a_changed_comfyui_layout_runs_comfyui(caplog):
    """The payload's PackedLayout (ComfyUI's, captured in the golden file) is checked against
    h3rt's once per layout object: equal, h3rt runs; one whose positions a custom node moved
    runs ComfyUI's forward, with one log line naming the first difference."""
    h3rt = pytest.importorskip("h3rt")  # noqa: F841
    case = read_safetensors(COMFY / "t2va.safetensors")
    base = FakePatcher(FakeH3(read_safetensors(WEIGHTS)))
    (out,) = h3rt_node.H3rtPatchModel().patch(base, device="cpu")
    wrapper = out.wrappers["diffusion_model"]["h3rt"][0]
    video = case["input/video_latents"]
    audio = case["input/audio_latents"].transpose(1, 0, 2)[None]
    kinds = ("text", "cond", "cond_audio", "ref_img", "ref_audio", "audio", "video")

    def layout(moved):
        pos = case["layout/position_ids"].copy()
        if moved:
            pos[40, 0] += 1.0  # a video row one step later in time
        return types.SimpleNamespace(
            signature=(12, *video.shape[2:], audio.shape[-1]), position_ids=pos,
            segments=[(int(a), int(b), kinds[k]) for a, b, k in case["layout/segments"]])

    caplog.set_level(logging.INFO, logger="h3rt")
    for moved in (False, True):
        payload = dict(t2va_payload(), layout=layout(moved),
                       text_token_tags=case["input/text_token_tags"])
        for _ in range(2):
            res = sample_call(out, [video, audio], case["input/timestep"],
                              case["input/text_embeds"], minimax_payload=payload)
        if not moved:
            assert wrapper.calls == {"h3rt": 2, "comfyui": 0}
    assert all(np.all(r == COMFY_MARK) for r in res)
    assert wrapper.calls == {"h3rt": 2, "comfyui": 2}
    lines = [r.getMessage() for r in caplog.records if "packed layout" in r.getMessage()]
    assert lines == ["h3rt: running ComfyUI's forward: ComfyUI's packed layout differs from "
                     "h3rt's: position_ids row 40 (as float32): the caller's (13, 8, 16), "
                     "h3rt's (12, 8, 16)"]


def test_cuda_node_runs_torch_latents_with_shifts_in_h3rt():
    """A CUDA engine with ComfyUI's CUDA tensors (torch): results stay on the device and equal
    forward_conditioned's on the same tensors, at the default and at MiniMaxH3SigmaShift's
    shifts (skipped without torch on a GPU or a CUDA build of h3rt)."""
    h3rt = pytest.importorskip("h3rt")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for torch")
    try:
        engine = h3rt.load(str(WEIGHTS), device="cuda", attention="bf16")
    except RuntimeError as e:
        pytest.skip(f"h3rt without CUDA: {e}")
    case = read_safetensors(COMFY / "t2va.safetensors")
    base = FakePatcher(FakeH3(read_safetensors(WEIGHTS)))
    (out,) = h3rt_node.H3rtPatchModel().patch(base, device="cuda", attention="bf16")
    wrapper = out.wrappers["diffusion_model"]["h3rt"][0]
    video = torch.from_numpy(case["input/video_latents"]).cuda()
    audio = torch.from_numpy(case["input/audio_latents"].transpose(1, 0, 2)[None].copy()).cuda()
    text = case["input/text_embeds"]
    ts = torch.tensor([850.0], device="cuda")
    sigma = float(np.float32(850.0) / np.float32(1000.0))
    for shifts in ({}, {"minimax_h3_sigma_shift_video": 6.37, "minimax_h3_sigma_shift_audio": 2.9}):
        res = sample_call(out, [video, audio], ts, torch.from_numpy(text).cuda(),
                          minimax_payload=t2va_payload(), extra_options=shifts)
        kw = {"video_shift": 6.37, "audio_shift": 2.9} if shifts else {}
        want = engine.forward_conditioned(video, audio, sigma, text, **kw)
        for r, w in zip(res, want):
            assert r.is_cuda and r.dtype == torch.float32
            assert torch.equal(r, -w)
    assert wrapper.calls == {"h3rt": 2, "comfyui": 0}


def test_file_path_weights_merge_the_models_lora_patches(tmp_path, caplog):
    """Weights from the file path: the LoRA loaders' patches on the model given to the node (the
    file lacks them) reach h3rt.load as in-memory LoRAs before the node's own loras; patches h3rt
    cannot merge run ComfyUI's forward, naming the patch."""
    caplog.set_level(logging.INFO, logger="h3rt")
    ckpt = tmp_path / "h3.safetensors"
    ckpt.write_bytes(b"")
    lora = tmp_path / "a.safetensors"
    lora.write_bytes(b"")
    key = "diffusion_model.blocks.0.attn.qkv_proj.weight"
    up, down = np.ones((768, 2), np.float32), np.ones((2, 192), np.float32)
    for patch, merged in (((0.5, LoRAAdapter(up, down, 4.0), 1.0, None, None), True),
                          ((1.0, ("diff", (np.ones((768, 192)),)), 1.0, None, None), False)):
        loader = Loader()
        base = FakePatcher(FakeH3({}))
        base.patches = {key: [patch]}
        (out,) = h3rt_node.H3rtPatchModel().patch(base, device="cpu", weights="from file path",
                                                  checkpoint_path=str(ckpt), loras=f"{lora}:0.3")
        base.patches[key].append(patch)  # added after the node: not seen (README: limits)
        out.wrappers["diffusion_model"]["h3rt"][0].load = loader
        x, ts, ctx = inputs()
        res = sample_call(out, x, ts, ctx, minimax_payload=t2va_payload())
        if merged:
            (mapping, one), rest = loader.calls[0][1]["loras"][0], loader.calls[0][1]["loras"][1:]
            assert one == 1.0 and rest == [(str(lora), 0.3)]
            assert mapping[key[:-7] + ".lora_up.weight"] is up
            assert mapping[key[:-7] + ".alpha"].tolist() == [2.0]
        else:
            assert loader.calls == [] and np.all(res[0] == COMFY_MARK)
            assert any(f"LoRA patches of the model: patch 0 of '{key}': a tuple adapter" in
                       r.getMessage() for r in caplog.records)


# ---- conditioning: the payload reaches h3rt's forward_conditioned ----
def test_conditioned_calls_run_in_h3rt_with_the_payload():
    loader = Loader()
    base, out, wrapper = patched(loader)
    x, ts, ctx = inputs()
    key = np.ones((1, 24, 1, 8, 8), np.float32)
    payload = dict(t2va_payload(), keyframes=[{"resolved_frame_index": 0, "latent": key}],
                   refs=[{"kind": "audio", "audio_latent": np.ones((1, 32, 2, 3), np.float32)}],
                   text_token_tags=np.array([1, 0] + [1] * 10), seed=5,
                   audio_cond_noise_aug=0.9)
    drawn = []
    h3rt_node.comfy_noise, real = (lambda shape, seed: drawn.append((shape, seed)) or
                                   np.zeros(shape, np.float32)), h3rt_node.comfy_noise
    try:
        mask = np.full((1, 1, 2, 11), 0.5, np.float32)
        res = sample_call(out, x, ts, ctx, minimax_payload=payload, audio_denoise_mask=mask)
    finally:
        h3rt_node.comfy_noise = real
    assert wrapper.calls == {"h3rt": 1, "comfyui": 0}
    video, audio, sigma, text, _, kw = loader.engine.calls[0]
    assert np.array_equal(res[0], -2.0 * x[0]) and np.array_equal(res[1], -3.0 * x[1])
    assert kw["mask_outputs"] is False and kw["noise_seed"] == 5
    assert kw["keyframes"][0]["frame_index"] == 0
    assert np.array_equal(kw["keyframes"][0]["latent"], key)
    assert kw["refs"][0]["kind"] == "audio" and "audio_noise" in kw["refs"][0]
    assert kw["audio_cond_noise_aug"] == 0.9 and kw["visual_cond_noise_aug"] == 0.999
    assert list(kw["text_tags"][:3]) == [1, 0, 1] and kw["audio_mask"].shape == (2, 11)
    assert "video_mask" not in kw  # no video mask given
    # Video condition noise from the payload seed, audio from seed + 1 (ComfyUI's _forward).
    assert drawn == [((16, 96), 5), ((6, 32), 6)]


def test_video_denoise_mask_runs_in_h3rt():
    """Regression (found running the node inside ComfyUI's real model code, at ComfyUI
    2d2a8ae7): _forward takes a video denoise_mask (per-row timesteps from each 2x2 patch's
    maximum); the node used to leave every such call to ComfyUI because the golden's ComfyUI
    commit raised on it. The mask now reaches forward_conditioned as _forward reads it,
    mask[0, 0] = [T, H, W] (tools/comfyui_real/run_node.py compares the numbers with ComfyUI)."""
    loader = Loader()
    _, out, wrapper = patched(loader)
    x, ts, ctx = inputs()
    mask = np.ones((1, 1, 5, 8, 8), np.float32)
    mask[:, :, :2] = 0.0
    mask[:, :, 2, :3, 1:] = 0.5
    res = sample_call(out, x, ts, ctx, minimax_payload=t2va_payload(), denoise_mask=mask)
    assert wrapper.calls == {"h3rt": 1, "comfyui": 0}
    kw = loader.engine.calls[0][5]
    assert kw["mask_outputs"] is False and "audio_mask" not in kw
    np.testing.assert_array_equal(kw["video_mask"], mask[0, 0])
    assert kw["keyframes"] == [] and kw["refs"] == []
    np.testing.assert_array_equal(res[0], -2.0 * x[0])
    # A mask that generates everything is no mask: the plain forward.
    sample_call(out, x, ts, ctx, minimax_payload=t2va_payload(),
                denoise_mask=np.ones((1, 1, 5, 8, 8), np.float32))
    assert "video_mask" not in loader.engine.calls[1][5]


def _comfy_payload(f, entry):
    """A case's minimax_payload as extra_conds builds it, from the golden file alone."""
    def t(j):
        return None if j is None else f[j.split(" ")[0]]

    def audio(j):
        a = t(j)
        return None if a is None else np.ascontiguousarray(a.transpose(1, 0, 2)[None])

    p = entry["payload"]
    out = dict(t2va_payload(), seed=int(f["input/payload_seed"][0]),
               text_token_tags=f["input/text_token_tags"])
    out["keyframes"] = [{"resolved_frame_index": k["resolved_frame_index"],
                         "latent": t(k.get("latent")), "audio_latent": audio(k.get("audio_latent"))}
                        for k in p.get("keyframes", [])]
    out["refs"] = [{"kind": r["kind"], "latent": t(r.get("latent")),
                    "audio_latent": audio(r.get("audio_latent"))} for r in p.get("refs", [])]
    for key in ("visual_cond_noise_aug", "audio_cond_noise_aug", "audio_scale"):
        if isinstance(p.get(key), (int, float)):
            out[key] = float(p[key])
    return out


def _golden_noise(f):
    """comfy_noise's stand-in without torch: the draws stored in the case, by shape and seed."""
    seed = int(f["input/payload_seed"][0])
    table = {(f[n].shape, seed + (1 if "/audio_" in n else 0)): f[n]
             for n in f if n.startswith("cond/") and "_noise_" in n}
    return lambda shape, s: table[(tuple(shape), s)]


COMFY_CASES = sorted(__import__("json").loads((COMFY / "manifest.json").read_text())["cases"]) \
    if COMFY.exists() else []


@pytest.mark.parametrize("case", COMFY_CASES)
def test_node_reproduces_comfyui_conditioned_forward(case, monkeypatch):
    """_forward's output (before forward()'s masks and carry) for every golden case."""
    pytest.importorskip("h3rt")
    import json
    entry = json.loads((COMFY / "manifest.json").read_text())["cases"][case]
    f = read_safetensors(COMFY / f"{case}.safetensors")
    try:
        import torch  # noqa: F401  (the real draw; the README: it equals the stored noise)
    except ImportError:
        monkeypatch.setattr(h3rt_node, "comfy_noise", _golden_noise(f))
    base = FakePatcher(FakeH3(read_safetensors(WEIGHTS)))  # the set's weights (manifest)
    (out,) = h3rt_node.H3rtPatchModel().patch(base, device="cpu")
    wrapper = out.wrappers["diffusion_model"]["h3rt"][0]
    video = f["input/video_latents"]
    rows_a = f.get("fwd/audio_rows_network")  # the carried case: _forward's audio input
    n = f["input/audio_latents"].shape[-1]
    audio = (f["input/audio_latents"].transpose(1, 0, 2)[None] if rows_a is None else
             rows_a.reshape(2, n, -1).transpose(2, 0, 1)[None])
    kw = {}
    if "input/audio_denoise_mask" in f:
        kw["audio_denoise_mask"] = f["input/audio_denoise_mask"]
    res = sample_call(out, [np.ascontiguousarray(video), np.ascontiguousarray(audio)],
                      f["input/timestep"], f["input/text_embeds"],
                      minimax_payload=_comfy_payload(f, entry), **kw)
    assert wrapper.calls == {"h3rt": 1, "comfyui": 0}
    _, c, t, h, w = video.shape
    ref_v = -f["video_velocity"][0].reshape(t, h // 2, w // 2, c, 2, 2) \
        .transpose(3, 0, 1, 4, 2, 5).reshape(video.shape)
    net_a = f.get("audio_velocity_network", f["audio_velocity"])[0]
    ref_a = -net_a.reshape(2, n, audio.shape[1]).transpose(2, 0, 1)[None]
    assert rel_max_err(res[0], ref_v) <= 1e-5, "video"
    assert rel_max_err(res[1], ref_a) <= 1e-5, "audio"
