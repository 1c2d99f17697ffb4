# A PyTorch training loop: ResNet-18 on random 64x64 images. examples/train.py is plain
# PyTorch; examples/train_mutwo.py differs from it by mutwo's three lines (import, wrap, report).
import argparse

import torch
import torch.nn.functional as F
import torchvision
import mutwo.torch

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=10)
ap.add_argument("--batch", type=int, default=128)
ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
args = ap.parse_args()

torch.manual_seed(0)
model = torchvision.models.resnet18(num_classes=10).to(args.device)
model = mutwo.torch.wrap(model, budget="80%")
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
images = torch.randn(args.batch, 3, 64, 64, device=args.device)
labels = torch.randint(0, 10, (args.batch,), device=args.device)

for step in range(1, args.steps + 1):
    optimizer.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(images), labels)
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item():.4f}")
print(mutwo.torch.report(model))
