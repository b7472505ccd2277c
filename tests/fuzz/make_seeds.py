#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpus (tests/fuzz/corpus/<target>/seed_*): micro H3
checkpoints in every variant the loader detects (one block, hidden 16; a few KB each), small
inputs files, LoRA files for the tiny config, and the headers of golden files with their data
cut off. Run once from the repo
root (needs ../shared/golden, or H3RT_SHARED_DIR); the fuzz runs add their finds beside these."""
import json
import os
import pathlib
import random
import struct

ROOT = pathlib.Path(__file__).resolve().parent
GOLDEN = pathlib.Path(os.environ.get("H3RT_SHARED_DIR", ROOT.parents[2] / "shared")) / "golden"
SIZES = {"F32": 4, "BF16": 2, "F16": 2, "F8_E4M3": 1, "U8": 1, "I8": 1, "I64": 8}
rng = random.Random(20)


def values(n, dtype):
    if dtype == "F32":
        return struct.pack(f"<{n}f", *[rng.uniform(-0.5, 0.5) for _ in range(n)])
    if dtype == "BF16":  # the high half of float32 values
        f = struct.pack(f"<{n}f", *[rng.uniform(-0.5, 0.5) for _ in range(n)])
        return b"".join(f[4 * i + 2:4 * i + 4] for i in range(n))
    return bytes(rng.randrange(0x30, 0x40) for _ in range(n * SIZES[dtype]))


def image(tensors, metadata=None):
    """tensors: name -> (dtype, shape, bytes or None for generated values)."""
    header, data = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, (dtype, shape, raw) in tensors.items():
        n = 1
        for d in shape:
            n *= d
        raw = values(n, dtype) if raw is None else raw
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data


HD, TXT, TM, TH, FREQ = 128, 4, 2, 4, 2  # micro config: heads 1 (head_dim is fixed)
H = F = 8  # hidden and SwiGLU width; the nvfp4 seed needs 16 (16-element blocks)


def micro(curve=False, pdd=1, layers=1, refiner=0, hidden=H):
    t = {}
    H = F = hidden

    def lin(name, out, inp, dtype, bias=True):
        t[name + ".weight"] = (dtype, [out, inp], None)
        if bias:
            t[name + ".bias"] = (dtype, [out], None)

    def core(p):
        t[p + "norm1.weight"] = ("BF16", [H], None)
        t[p + "norm2.weight"] = ("BF16", [H], None)
        lin(p + "attn.qkv_proj", 3 * HD, H, "BF16", False)
        t[p + "attn.q_norm.weight"] = ("BF16", [HD], None)
        t[p + "attn.k_norm.weight"] = ("BF16", [HD], None)
        lin(p + "attn.out_proj", H, HD, "BF16", False)
        lin(p + "mlp.fc1", 2 * F, H, "BF16", False)
        lin(p + "mlp.fc2", H, F, "BF16", False)

    adaln_in = 2 if curve else TM
    lin("video_patch_proj", H, 4, "F32")
    lin("audio_patch_proj", H, 1, "F32")
    lin("condition_proj", H, TXT, "BF16")
    if curve:
        t["adaln_t_table"] = ("F32", [3, 2], None)
    else:
        lin("time_embedder.proj_in", TH, FREQ, "F32")
        lin("time_embedder.proj_out", TM, TH, "F32")
    t["rope.inv_freq"] = ("F32", [1], None)
    for i in range(refiner):
        core(f"token_refiner.blocks.{i}.")
    t["token_refiner.final_norm.weight"] = ("BF16", [H], None)
    for i in range(layers):
        core(f"blocks.{i}.")
        lin(f"blocks.{i}.adaln_proj.linear", 18 * H, adaln_in, "F16" if curve else "BF16")
    t["final_layer.norm.weight"] = ("BF16", [H], None)
    lin("final_layer.adaln_proj.linear", 2 * H, adaln_in, "F16" if curve else "BF16")
    lin("final_layer.video_out", pdd * 4, H, "F32")
    lin("final_layer.audio_out", pdd * 1, H, "F32")
    return t


def marker(obj):
    raw = json.dumps(obj).encode()
    return ("U8", [len(raw)], raw)


def scalar(v):
    return ("F32", [], struct.pack("<f", v))


def quantized_variants():
    out = {}
    t = micro()  # fp8_scaled fc1 with a marker and static input scale
    t["blocks.0.mlp.fc1.weight"] = ("F8_E4M3", [2 * F, H], None)
    t["blocks.0.mlp.fc1.weight_scale"] = scalar(0.01)
    t["blocks.0.mlp.fc1.input_scale"] = scalar(0.02)
    t["blocks.0.mlp.fc1.comfy_quant"] = marker({"format": "float8_e4m3fn"})
    out["fp8_marker"] = image(t)
    t = micro()  # fp8 by dtype alone, no marker
    t["blocks.0.attn.out_proj.weight"] = ("F8_E4M3", [H, HD], None)
    t["blocks.0.attn.out_proj.weight_scale"] = scalar(0.5)
    out["fp8_dtype"] = image(t)
    t = micro(hidden=16)  # nvfp4 qkv: packed codes, 128x4-tiled e4m3 block scales, global scale
    t["blocks.0.attn.qkv_proj.weight"] = ("U8", [3 * HD, 16 // 2], None)
    t["blocks.0.attn.qkv_proj.weight_scale"] = ("F8_E4M3", [384, 4], None)
    t["blocks.0.attn.qkv_proj.weight_scale_2"] = scalar(0.001)
    t["blocks.0.attn.qkv_proj.comfy_quant"] = marker({"format": "nvfp4"})
    out["nvfp4"] = image(t)
    t = micro(hidden=16)  # int8_convrot fc2 (G = 16 divides F), params form
    t["blocks.0.mlp.fc2.weight"] = ("I8", [16, 16], None)
    t["blocks.0.mlp.fc2.weight_scale"] = ("F32", [16, 1], struct.pack("<16f", *[0.01] * 16))
    t["blocks.0.mlp.fc2.comfy_quant"] = marker(
        {"format": "int8_tensorwise", "params": {"convrot": True, "convrot_groupsize": 16}})
    out["int8_convrot"] = image(t)
    t = micro()  # plain int8 with a scalar scale, declared in _quantization_metadata
    t["blocks.0.mlp.fc1.weight"] = ("I8", [2 * F, H], None)
    t["blocks.0.mlp.fc1.weight_scale"] = scalar(0.02)
    meta = {"format_version": "1.0", "layers": {"blocks.0.mlp.fc1": {"format": "int8_tensorwise"}}}
    out["int8_qmeta"] = image(t, {"_quantization_metadata": json.dumps(meta)})
    t = micro()  # fp8 through the bare layer mapping form of _quantization_metadata
    t["blocks.0.mlp.fc2.weight"] = ("F8_E4M3", [H, F], None)
    t["blocks.0.mlp.fc2.weight_scale"] = scalar(0.25)
    meta = {"blocks.0.mlp.fc2": {"format": "float8_e4m3fn"}}
    out["fp8_qmeta_bare"] = image(t, {"_quantization_metadata": json.dumps(meta)})
    return out


def checkpoint_seeds():
    out = {"micro": image(micro()), "micro_two_blocks_refiner": image(micro(layers=2, refiner=1)),
           "curve": image(micro(curve=True)), "pdd3": image(micro(pdd=3)),
           "per_head": image(micro(), {"qkv_layout": "per_head_interleaved"})}
    t = micro()
    t["blocks.0.attn.to_gate_compress.weight"] = ("BF16", [1, H], None)
    out["vsa_gate"] = image(t)
    out.update(quantized_variants())
    return out


def inputs_seeds():
    def inputs(text_name, L, T, Hl, Wl, N, text_dtype="BF16"):
        return image({text_name: (text_dtype, [1, L, 64], None),
                      "input/video_latents": ("F32", [1, 24, T, Hl, Wl], None),
                      "input/audio_latents": ("F32", [2, 32, N], None)})
    return {"small": inputs("input/text_embeds", 2, 1, 2, 2, 1),
            "small_f32_text": inputs("text_embeds", 1, 2, 2, 4, 3, "F32"),
            "text_only": image({"text_embeds": ("BF16", [3, 64], None)})}


def regressions():
    """Inputs that crashed the parsers once (UBSan, an escaped std::out_of_range): kept in the
    corpus so that every fuzz run tries them again. Target -> name -> image."""
    div0 = micro()
    div0["video_patch_proj.weight"] = ("F32", [H, 0], b"")  # 0 latent channels: x % 0
    stoll = micro()
    stoll["blocks.123456789012345678901234.norm1.weight"] = ("BF16", [H], None)
    offsets = json.dumps({"a": {"dtype": "U8", "shape": [0],
                                "data_offsets": [2 ** 63, 0]}}).encode()  # 0 - INT64_MIN
    return {"checkpoint": {"regress_zero_latent_channels": image(div0),
                           "regress_block_index_overflow": image(stoll)},
            "safetensors": {"regress_stride_overflow": image({"a": ("F32", [0, 2 ** 40, 2 ** 40], b"")}),
                            "regress_offset_overflow": struct.pack("<Q", len(offsets)) + offsets}}


def lora_seeds():
    """LoRA files for the tiny config's layers (hidden 192, qkv 768 x 192, out 192 x 256, fc1
    768 x 192, fc2 192 x 384, AdaLN 3456 x 96), one per key form, rank 1-2, plus files that must
    fail (a rank mismatch, half a pair, an unsupported adapter kind, a misfit shape). Its own
    generator, so that the other seeds keep their bytes."""
    global rng
    saved, rng = rng, random.Random(21)

    def pair(module, up, down, out, inp, r=2, dtype="BF16", alpha=None):
        t = {f"{module}{up}": (dtype, [out, r], None), f"{module}{down}": (dtype, [r, inp], None)}
        if alpha is not None:
            t[module + ".alpha"] = ("F32", [], struct.pack("<f", alpha))
        return t

    a_b = (".lora_B.weight", ".lora_A.weight")
    out = {
        "diffusers_qkv_alpha": image(pair("diffusion_model.blocks.0.attn.qkv_proj", *a_b, 768, 192,
                                          alpha=2.0)),
        "kohya_fc2": image(pair("lora_unet_blocks_1_mlp_fc2", ".lora_up.weight",
                                ".lora_down.weight", 192, 384, r=1, dtype="F32")),
        "bare_fc1_peft": image(pair("blocks.0.mlp.fc1", ".lora_B.default.weight",
                                    ".lora_A.default.weight", 768, 192, dtype="F16")),
        "adaln_and_out": image({**pair("diffusion_model.blocks.1.adaln_proj.linear", *a_b, 3456,
                                       96, r=1),
                                **pair("diffusion_model.blocks.0.attn.out_proj", *a_b, 192, 256,
                                       alpha=1.0)}),
        "rank_mismatch": image({"diffusion_model.blocks.0.mlp.fc1.lora_B.weight":
                                ("BF16", [768, 2], None),
                                "diffusion_model.blocks.0.mlp.fc1.lora_A.weight":
                                ("BF16", [3, 192], None)}),
        "half_pair": image({"diffusion_model.blocks.0.mlp.fc1.lora_A.weight":
                            ("BF16", [2, 192], None)}),
        "dora": image({**pair("diffusion_model.blocks.0.mlp.fc1", *a_b, 768, 192),
                       "diffusion_model.blocks.0.mlp.fc1.dora_scale": ("BF16", [768, 1], None)}),
        "misfit": image(pair("diffusion_model.blocks.0.attn.qkv_proj", *a_b, 192, 192)),
    }
    rng = saved
    return out


def golden_inputs(path):
    """The input/* tensors of a golden file, as an inputs file."""
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    keep = {}
    for k in ("input/text_embeds", "input/video_latents", "input/audio_latents"):
        e = header[k]
        b, end = e["data_offsets"]
        keep[k] = (e["dtype"], e["shape"], raw[8 + n + b:8 + n + end])
    return image(keep)


def header_only(path):
    """A golden file cut after its header (valid JSON, data section missing)."""
    raw = path.read_bytes()
    return raw[:8 + struct.unpack("<Q", raw[:8])[0]]


def write(target, seeds):
    d = ROOT / "corpus" / target
    d.mkdir(parents=True, exist_ok=True)
    for name, data in seeds.items():
        (d / f"seed_{name}").write_bytes(data)


def main():
    ckpt = checkpoint_seeds()
    write("checkpoint", ckpt)
    write("checkpoint", {"golden_tiny_header": header_only(GOLDEN / "h3_tiny/weights.safetensors")})
    write("inputs", inputs_seeds())
    write("inputs", {"golden_t2va": golden_inputs(GOLDEN / "h3_tiny_comfy/t2va.safetensors")})
    st = {"micro": ckpt["micro"], "int8_qmeta": ckpt["int8_qmeta"],
          "int8_golden": (GOLDEN / "int8_convrot/m9_k256_n24_g16.safetensors").read_bytes(),
          "empty": image({}), "metadata_only": image({}, {"a": "b"}),
          "zero_size": image({"z": ("F32", [0, 3], b""), "s": ("I64", [], None)})}
    for name, rel in [("golden_tiny_weights_header", "h3_tiny/weights.safetensors"),
                      ("golden_tiny_header", "h3_tiny/golden.safetensors"),
                      ("golden_comfy_t2va_header", "h3_tiny_comfy/t2va.safetensors")]:
        st[name] = header_only(GOLDEN / rel)
    write("safetensors", st)
    write("lora", lora_seeds())
    for target, seeds in regressions().items():
        d = ROOT / "corpus" / target
        for name, data in seeds.items():
            (d / name).write_bytes(data)


if __name__ == "__main__":
    main()
