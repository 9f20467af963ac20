#!/usr/bin/python3
"""PyTorch's time for one training step of the Fashion-MNIST CNN of
configs/fashion_mnist_cnn_bsp.pbtxt (5x5 convs 1->32 and 32->64 with padding
2, each followed by ReLU and a 2x2 max-pool, dense 3136->256->10, softmax
cross-entropy, SGD with momentum), on one thread, to set beside
`bazel run -c opt //tools:model_bench -- --steps=20` on the same machine.
Uses Debian's python3-torch (outside the build): /usr/bin/python3
tools/torch_cnn_step.py [--steps N] [--batch B]."""
import argparse
import time

import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--batch", type=int, default=128)
args = parser.parse_args()

torch.set_num_threads(1)
torch.manual_seed(0)
model = nn.Sequential(
    nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(), nn.Linear(3136, 256), nn.ReLU(), nn.Linear(256, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()
x = torch.randn(args.batch, 1, 28, 28)
y = torch.randint(0, 10, (args.batch,))


def step():
    opt.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()


for _ in range(3):
    step()
times = []
for _ in range(args.steps):
    t0 = time.perf_counter()
    step()
    times.append(1000 * (time.perf_counter() - t0))
times.sort()
print("torch %s, batch %d, 1 thread: step median %.1f ms, min %.1f, max %.1f "
      "over %d steps" % (torch.__version__, args.batch, times[len(times) // 2],
                         times[0], times[-1], args.steps))
