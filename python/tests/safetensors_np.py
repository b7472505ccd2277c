"""A numpy reader of safetensors files for the tests (no torch, no safetensors package): the
package's tests and the ComfyUI node's tests read the golden files with it."""
import json
import pathlib

import numpy as np

_DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32,
           "U8": np.uint8, "I8": np.int8, "BF16": np.uint16, "F16": np.float16,
           "F8_E4M3": np.uint8}  # numpy has no fp8: the raw bytes (tests view them in torch)


def read_safetensors(path):
    """name -> numpy array (bf16 upcast to float32, exactly)."""
    raw = pathlib.Path(path).read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        a = np.frombuffer(raw[8 + n + b:8 + n + end], dtype=_DTYPES[e["dtype"]])
        if e["dtype"] == "BF16":
            a = (a.astype(np.uint32) << 16).view(np.float32)
        out[name] = a.reshape(e["shape"])
    return out


def write_safetensors(path, tensors):
    """Writes name -> float32 numpy array as F32 tensors (the tests' LoRA files)."""
    header, blobs, offset = {}, [], 0
    for name, a in tensors.items():
        b = np.ascontiguousarray(a, dtype=np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(np.shape(a)),
                        "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    pathlib.Path(path).write_bytes(len(h).to_bytes(8, "little") + h + b"".join(blobs))
