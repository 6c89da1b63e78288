"""Synthetic data-parallel training throughput, after Horovod's
pytorch_synthetic_benchmark.py: a torchvision model (ResNet-18 by default)
trains with DistributedDataParallel on random images, and rank 0 reports
img/sec per rank and in total.

    shoal run -n 4 python examples/pytorch_synthetic_benchmark.py --backend shoal
    shoal run -n 4 python examples/pytorch_synthetic_benchmark.py --backend gloo
    shoal run -n 4 python examples/pytorch_synthetic_benchmark.py --backend none   # compute only

``--backend none`` trains each rank's replica alone, without DDP: the same
steps with no gradient exchange, the ceiling a backend's img/s is read against.

On a small CPU machine use a small batch and image size, e.g.
``--batch-size 4 --image-size 64 --num-iters 5``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import timeit
from typing import Callable

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=["shoal", "gloo", "none"], default="shoal")
    p.add_argument("--model", default="resnet18", help="a torchvision.models name")
    p.add_argument("--batch-size", type=int, default=32, help="images per rank per step")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--num-warmup-batches", type=int, default=10, help="steps before timing starts")
    p.add_argument("--num-batches-per-iter", type=int, default=10, help="steps per timed iteration")
    p.add_argument("--num-iters", type=int, default=10, help="timed iterations")
    p.add_argument("--threads", type=int, default=0, help="torch threads per rank (0: torch's default)")
    p.add_argument("--no-cuda", action="store_true", help="train on the CPU even when CUDA is available")
    p.add_argument("--save-params", metavar="FILE", help="rank 0 saves the trained parameters here (torch.save)")
    p.add_argument(
        "--profile",
        metavar="DIR",
        help="after timing, profile --profile-steps more steps with torch.profiler: every rank writes its top "
        "operators to DIR/rank<R>.txt, rank 0 its Chrome trace to DIR/trace-rank0.json",
    )
    p.add_argument("--profile-steps", type=int, default=3, help="steps profiled with --profile")
    return p.parse_args()


def build_model(name: str) -> torch.nn.Module:
    try:
        import torchvision.models
    except ImportError:
        sys.exit("this benchmark needs torchvision: pip install '.[examples]' (or pip install torchvision)")
    if not hasattr(torchvision.models, name):
        sys.exit(f"torchvision.models has no model {name!r}")
    return getattr(torchvision.models, name)(num_classes=1000)


def profile_steps(step: Callable[[], None], directory: str, steps: int, rank: int, cuda: bool) -> None:
    """Runs ``steps`` steps under torch.profiler (each a ``train_step`` range) and writes what it saw."""
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            with record_function("train_step"):
                step()
        if cuda:
            torch.cuda.synchronize()
    os.makedirs(directory, exist_ok=True)
    averages = prof.key_averages()
    with open(os.path.join(directory, f"rank{rank}.txt"), "w") as f:
        for order in ["self_cpu_time_total", "self_device_time_total" if cuda else "cpu_time_total"]:
            f.write(f"sorted by {order}\n{averages.table(sort_by=order, row_limit=30)}\n")
    if rank == 0:
        prof.export_chrome_trace(os.path.join(directory, "trace-rank0.json"))


def main() -> None:
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.backend == "shoal":
        import shoal.torch  # noqa: F401  (registers the "shoal" backend)
    distributed = args.backend != "none"
    if distributed:
        dist.init_process_group(args.backend)
        rank, world = dist.get_rank(), dist.get_world_size()
    else:  # ranks started by a launcher, each training alone
        rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    cuda = torch.cuda.is_available() and not args.no_cuda
    device = torch.device("cuda", rank % torch.cuda.device_count()) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)

    torch.manual_seed(0)
    model = build_model(args.model).to(device)
    if distributed:
        model = DDP(model, device_ids=[device.index] if cuda else None)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device)
    target = torch.randint(0, 1000, (args.batch_size,), device=device)

    def step() -> None:
        opt.zero_grad()
        F.cross_entropy(model(data), target).backward()
        opt.step()

    def log(msg: str) -> None:
        if rank == 0:
            print(msg, flush=True)

    where = f"{world} {'GPU' if cuda else 'CPU process'}(es)"
    log(f"Model: {args.model}, batch size: {args.batch_size}, image size: {args.image_size}, backend: {args.backend}")
    log(f"Number of ranks: {world} ({where})")
    log("Running warmup...")
    timeit.timeit(step, number=args.num_warmup_batches)
    if cuda:
        torch.cuda.synchronize()
    log("Running benchmark...")
    rates = []
    for i in range(args.num_iters):
        seconds = timeit.timeit(step, number=args.num_batches_per_iter)
        if cuda:
            torch.cuda.synchronize()
        rate = args.batch_size * args.num_batches_per_iter / seconds
        log(f"Iter #{i}: {rate:.1f} img/sec per rank")
        rates.append(rate)

    mean = statistics.mean(rates)
    spread = 1.96 * statistics.stdev(rates) if len(rates) > 1 else 0.0
    median = statistics.median(rates)
    log(f"Img/sec per rank: {mean:.1f} +-{spread:.1f} (median {median:.1f})")
    log(f"Total img/sec on {world} rank(s): {world * mean:.1f} +-{world * spread:.1f} (median {world * median:.1f})")
    if args.profile:
        profile_steps(step, args.profile, args.profile_steps, rank, cuda)
    if args.save_params and rank == 0:
        # to compare the models that two backends trained from the same start on the same data
        trained = model.module if distributed else model
        torch.save({k: v.detach().cpu() for k, v in trained.state_dict().items()}, args.save_params)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
