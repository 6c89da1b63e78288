"""A small CNN trained with DistributedDataParallel on scikit-learn's digits.

    shoal run -n 2 python examples/digits_ddp.py --backend shoal
    shoal run -n 2 python examples/digits_ddp.py --backend gloo    # same loss curve

Rank 0 prints the training loss (averaged over every rank's samples) and the
test accuracy after each epoch. The seed fixes the model, the split and the
shuffling, so both backends see the same run.
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=["shoal", "gloo"], default="shoal")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=32, help="samples per rank per step")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    return p.parse_args()


class DigitsCNN(nn.Module):
    """8x8 grey images -> 10 classes."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 2 * 2, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)  # 16 x 4 x 4
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)  # 32 x 2 x 2
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def load_data(seed: int) -> tuple[TensorDataset, TensorDataset]:
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        sys.exit("this example needs scikit-learn: pip install '.[examples]' (or pip install scikit-learn)")
    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(digits.target, dtype=torch.int64)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    x, y = x[order], y[order]
    n_train = 1500
    return TensorDataset(x[:n_train], y[:n_train]), TensorDataset(x[n_train:], y[n_train:])


def evaluate(model: nn.Module, test: TensorDataset) -> float:
    model.eval()
    with torch.no_grad():
        x, y = test.tensors
        correct = (model(x).argmax(1) == y).sum().item()
    model.train()
    return correct / len(y)


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    if args.backend == "shoal":
        import shoal.torch  # noqa: F401  (registers the "shoal" backend)
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(args.seed)
    train, test = load_data(args.seed)
    model = DDP(DigitsCNN())
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=args.seed, drop_last=True)
    loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    if rank == 0:
        print(f"digits: {len(train)} train / {len(test)} test images, {world} ranks, backend {args.backend}")
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        totals = torch.zeros(2, dtype=torch.float64)  # loss sum, samples
        for x, y in loader:
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            totals += torch.tensor([loss.item() * len(y), len(y)], dtype=torch.float64)
        dist.all_reduce(totals)
        accuracy = evaluate(model.module, test)
        if rank == 0:
            print(f"epoch {epoch} loss {totals[0].item() / totals[1].item():.6f} accuracy {accuracy:.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
