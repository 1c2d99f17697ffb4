# The step file's two files as bytes: the JSON text (one value or node per
# line) and the tensor file in the safetensors layout (docs/step-file.md).
import json
import os
import struct
import sys
from typing import Any

import torch

DTYPES = {torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16",
          torch.int64: "i64", torch.int32: "i32", torch.bool: "bool",
          torch.uint8: "u8"}
_SAFETENSORS_DTYPES = {"f32": "F32", "f64": "F64", "f16": "F16", "bf16": "BF16", "i64": "I64",
                       "i32": "I32", "bool": "BOOL", "u8": "U8"}


def read_safetensors(path: str) -> tuple[dict, dict[str, torch.Tensor]]:
    """The metadata and the tensors of a file in the safetensors layout: the step
    file's tensor file, or what `mutwo run --save` wrote. ValueError where the
    data has gaps or overlaps, or the file holds more than its header says."""
    torch_types = {_SAFETENSORS_DTYPES[name]: t for t, name in DTYPES.items()}
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    body = raw[8 + n:]
    out, end = {}, 0
    for name, e in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        b, e_ = e["data_offsets"]
        if b != end:
            raise ValueError(f"{path}: tensor {name}: a gap or an overlap in the data")
        end = e_
        dtype = torch_types[e["dtype"]]
        load = torch.int16 if dtype == torch.bfloat16 else dtype
        t = torch.frombuffer(bytearray(body[b:e_]), dtype=load) if e_ > b else torch.empty(0, dtype=load)
        out[name] = t.view(dtype).reshape(e["shape"])
    if end != len(body):
        raise ValueError(f"{path}: {len(body) - end} bytes after the last tensor")
    return meta, out


def write_safetensors(path: str, tensors: dict[str, torch.Tensor]) -> None:
    """The safetensors layout, by hand: u64 header length, JSON header, raw little-endian bytes."""
    header: dict[str, Any] = {"__metadata__": {"format": "mutwo-step-data", "version": "1"}}
    blobs, offset = [], 0
    for name, t in tensors.items():
        dtype = DTYPES.get(t.dtype)
        if dtype is None:
            raise ValueError(f"tensor {name}: dtype {t.dtype} is not supported")
        b = _tensor_bytes(t)
        header[name] = {"dtype": _SAFETENSORS_DTYPES[dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def _tensor_bytes(t: torch.Tensor) -> bytes:
    t = t.detach().to("cpu").contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    try:
        import numpy as np
    except ImportError:  # no numpy: the storage's bytes (this host is little-endian)
        if sys.byteorder != "little":
            raise ValueError("writing the side file without numpy needs a little-endian host")
        t = t.clone()
        storage = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage().untyped()
        return bytes(storage.tolist())[: t.numel() * t.element_size()]
    a = t.numpy()
    return a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()


def dumps(doc: dict) -> str:
    """JSON with one value or node per line."""
    def d(x: Any) -> str:
        return json.dumps(x, allow_nan=False, separators=(", ", ": "))
    lines = ["{"]
    keys = list(doc)
    for k in keys:
        v = doc[k]
        end = "," if k != keys[-1] else ""
        if k in ("values", "nodes", "buffer_updates") and v:
            lines.append(f"  {d(k)}: [")
            lines += [f"    {d(e)}" + ("," if i + 1 < len(v) else "") for i, e in enumerate(v)]
            lines.append(f"  ]{end}")
        else:
            lines.append(f"  {d(k)}: {d(v)}{end}")
    lines.append("}")
    return "\n".join(lines) + "\n"
