#!/usr/bin/python3
"""Oracle for tests/unit/test_resnet.cpp: torchvision's resnetNN, one train-mode
forward and backward with cross-entropy, written to a fixture directory.

Run by the C++ test with Debian's /usr/bin/python3 (python3-torch,
python3-torchvision, python3-numpy). Writes into --out:
  manifest.json  {"arch", "batch", "image_size", "classes", "loss",
                  "tensors": [{"name", "kind", "dtype", "shape", "file"}]}
  one raw little-endian file per tensor (float32, or int64 for labels), kinds:
    input      images (B, 3, H, W) and labels (B)
    parameter  every named parameter, as the model was before the step
    gradient   d(loss)/d(parameter), named like the parameter
    buffer     running_mean / running_var after the step's in-place update
               (num_batches_tracked is left out: mutwo does not keep it)
"""
import argparse
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
import torchvision


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", required=True, choices=["resnet18", "resnet34", "resnet50", "resnet101", "resnet152"])
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    torch.manual_seed(a.seed)
    model = getattr(torchvision.models, a.arch)(num_classes=a.classes)
    model.train()
    images = torch.randn(a.batch, 3, a.image_size, a.image_size)
    labels = torch.randint(a.classes, (a.batch,))

    os.makedirs(a.out, exist_ok=True)
    tensors = []

    def write(name, kind, t):
        t = t.detach().contiguous().cpu()
        dtype = {torch.float32: "f32", torch.int64: "i64"}[t.dtype]
        file = f"{kind}.{name}.bin"
        arr = t.numpy()
        arr.astype(arr.dtype.newbyteorder("<"), copy=False).tofile(os.path.join(a.out, file))
        tensors.append({"name": name, "kind": kind, "dtype": dtype, "shape": list(t.shape), "file": file})

    write("images", "input", images)
    write("labels", "input", labels)
    for name, p in model.named_parameters():  # before the step changes anything
        write(name, "parameter", p)

    loss = F.cross_entropy(model(images), labels)  # log_softmax + nll_loss, mean over the batch
    loss.backward()

    for name, p in model.named_parameters():
        write(name, "gradient", p.grad)
    for name, b in model.named_buffers():
        if name.endswith("running_mean") or name.endswith("running_var"):
            write(name, "buffer", b)

    manifest = {"arch": a.arch, "batch": a.batch, "image_size": a.image_size, "classes": a.classes,
                "loss": loss.item(), "torch": torch.__version__, "torchvision": torchvision.__version__,
                "tensors": tensors}
    with open(os.path.join(a.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
