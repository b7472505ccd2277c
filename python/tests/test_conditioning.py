"""Model.forward_conditioned against the ComfyUI golden set (../shared/golden/h3_tiny_comfy):
every case's payload rebuilt from its manifest entry, as ComfyUI's node passes it, gives the
captured velocities within the C++ golden test's fp32 tolerance."""
import json
import os
import pathlib

import numpy as np
import pytest

import h3rt
from safetensors_np import read_safetensors

SHARED = pathlib.Path(os.environ.get("H3RT_SHARED_DIR",
                                     pathlib.Path(__file__).resolve().parents[3] / "shared"))
COMFY = SHARED / "golden" / "h3_tiny_comfy"
MANIFEST = json.loads((COMFY / "manifest.json").read_text()) if COMFY.exists() else {"cases": {}}


def weights_path():
    p = MANIFEST["set"]["weights"]
    a = SHARED / (p[7:] if p.startswith("shared/") else p)
    return a if a.exists() else COMFY / "weights.safetensors"


@pytest.fixture(scope="module")
def model():
    if not COMFY.exists():
        pytest.skip("no h3_tiny_comfy golden set")
    return h3rt.load(weights_path())


def comfy_audio(a):
    """Golden [2, C, N] -> ComfyUI's [1, C, 2, N]."""
    return np.ascontiguousarray(a.transpose(1, 0, 2)[None])


def unpatchify_rows(rows, c, t, h, w):
    """Golden rows [T*(H/2)*(W/2), 4C] -> [1, C, T, H, W] (README section 5)."""
    v = rows.reshape(t, h // 2, w // 2, c, 2, 2).transpose(3, 0, 1, 4, 2, 5)
    return v.reshape(1, c, t, h, w)


def noise_name(latent):
    return latent.replace("_latent_", "_noise_")


def condition(f, entry):
    """The case's conditioning keywords, from the manifest payload and the file's tensors."""
    def tensor(j):
        return None if j is None else f[j.split(" ")[0]]

    def item(src, kind=None):
        d = {} if kind is None else {"kind": kind}
        lat, alat = src.get("latent"), src.get("audio_latent")
        if lat is not None:
            d["latent"] = tensor(lat)
            if noise_name(lat.split(" ")[0]) in f:
                d["noise"] = f[noise_name(lat.split(" ")[0])]
        if alat is not None:
            d["audio_latent"] = comfy_audio(tensor(alat))
            if noise_name(alat.split(" ")[0]) in f:
                d["audio_noise"] = f[noise_name(alat.split(" ")[0])]
        return d

    p = entry["payload"]
    kw = {"keyframes": [], "refs": []}
    for k in p.get("keyframes", []):
        kw["keyframes"].append({"frame_index": k["resolved_frame_index"], **item(k)})
    for r in p.get("refs", []):
        kw["refs"].append(item(r, r["kind"]))
    if "input/text_token_tags" in f:
        kw["text_tags"] = f["input/text_token_tags"]
    for key in ("visual_cond_noise_aug", "audio_cond_noise_aug"):
        if isinstance(p.get(key), (int, float)):
            kw[key] = float(p[key])
    if "input/audio_denoise_mask" in f:
        kw["audio_mask"] = f["input/audio_denoise_mask"]
    if isinstance(p.get("audio_scale"), (int, float)):
        kw["audio_scale"] = float(p["audio_scale"])
    return kw


KINDS = ("text", "cond", "cond_audio", "ref_img", "ref_audio", "audio", "video")  # golden codes


def comfy_layout(f):
    """ComfyUI's PackedLayout as the golden file captured it: expect_layout's mapping."""
    return {"segments": [(int(a), int(b), KINDS[k]) for a, b, k in f["layout/segments"]],
            "position_ids": f["layout/position_ids"]}


@pytest.mark.parametrize("case", sorted(MANIFEST["cases"]))
def test_forward_conditioned_matches_comfy_golden(model, case):
    f = read_safetensors(COMFY / f"{case}.safetensors")
    video = f["input/video_latents"]
    _, c, t, h, w = video.shape
    # expect_layout: h3rt's layout is ComfyUI's captured one, segments and float64 positions.
    vv, va = model.forward_conditioned(video, comfy_audio(f["input/audio_latents"]),
                                       float(f["input/sigma_video"][0]), f["input/text_embeds"],
                                       expect_layout=comfy_layout(f),
                                       **condition(f, MANIFEST["cases"][case]))
    ref_v = unpatchify_rows(f["video_velocity"][0], c, t, h, w)
    ref_a = comfy_audio(f["audio_velocity"][0].reshape(2, -1, va.shape[1]).transpose(0, 2, 1))
    for got, ref, name in ((vv, ref_v, "video"), (va, ref_a, "audio")):
        assert got.shape == ref.shape, name
        err = np.abs(got.astype(np.float64) - ref).max() / np.abs(ref).max()
        assert err <= 1e-5, f"{case} {name}: relative max error {err:.3g}"


def test_a_layout_h3rt_does_not_compute_is_refused_by_name(model):
    f = read_safetensors(COMFY / "fl2va_first.safetensors")
    args = (f["input/video_latents"], comfy_audio(f["input/audio_latents"]),
            float(f["input/sigma_video"][0]), f["input/text_embeds"])
    kw = condition(f, MANIFEST["cases"]["fl2va_first"])
    moved = comfy_layout(f)
    moved["position_ids"] = moved["position_ids"].copy()
    moved["position_ids"][40, 0] += 0.5
    with pytest.raises(ValueError, match=r"expect_layout differs from h3rt's layout: "
                                         r"position_ids row 40 \(as float32\): the caller's"):
        model.forward_conditioned(*args, expect_layout=moved, **kw)
    renamed = comfy_layout(f)
    renamed["segments"][1] = (renamed["segments"][1][0], renamed["segments"][1][1], "ref_img")
    with pytest.raises(ValueError, match=r"segment 1: the caller's \(ref_img, 12, "):
        model.forward_conditioned(*args, expect_layout=renamed, **kw)
    with pytest.raises(ValueError, match=r"expect_layout: expected a mapping"):
        model.forward_conditioned(*args, expect_layout={"segments": []}, **kw)


def test_forward_conditioned_errors_name_the_argument(model):
    f = read_safetensors(COMFY / "fl2va_first.safetensors")
    args = (f["input/video_latents"], comfy_audio(f["input/audio_latents"]), 0.5,
            f["input/text_embeds"])
    with pytest.raises(ValueError, match=r"keyframes\[0\]\['latent'\]"):
        model.forward_conditioned(*args, keyframes=[{"frame_index": 0,
                                                     "latent": np.zeros((1, 3, 1, 8, 12), np.float32)}])
    with pytest.raises(ValueError, match=r"refs\[0\]\['kind'\]"):
        model.forward_conditioned(*args, refs=[{"kind": "picture"}])
    with pytest.raises(ValueError, match="text_tags"):
        model.forward_conditioned(*args, text_tags=np.ones(3, np.int64))
    with pytest.raises(ValueError, match="frame"):  # a negative (unresolved) frame index
        model.forward_conditioned(*args, keyframes=[{"frame_index": -1,
                                                     "latent": f["cond/video_latent_0"]}])
