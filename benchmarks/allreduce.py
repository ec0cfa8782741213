"""What an all-reduce costs on this machine: gloo (or NCCL on GPUs) between
the processes torchrun starts, for gradient-sized buffers.

    torchrun --nproc_per_node=2 --standalone benchmarks/allreduce.py
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist


def main() -> None:
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    device = f"cuda:{dist.get_rank() % torch.cuda.device_count()}" if cuda else "cpu"
    for mib in (1, 25, 46, 91):
        buffer = torch.randn(mib * 2**20 // 4, device=device)
        for _ in range(2):
            dist.all_reduce(buffer)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(5):
            dist.all_reduce(buffer)
        if cuda:
            torch.cuda.synchronize()
        if dist.get_rank() == 0:
            print(
                f"all-reduce of {mib:3d} MiB fp32 over {dist.get_world_size()} processes: "
                f"{(time.perf_counter() - start) / 5 * 1000:.1f} ms"
            )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
