"""Embedding tables synchronised by the rows a step touched.

DDP all-reduces every gradient of every step. An embedding table's gradient
is zero except in the rows of the tokens (or positions, or hash buckets) that the step's
batches used. That is a few hundred of minilm-l6's 30,522 word rows, and
that table is half of the model's 22.7M parameters. All-reducing it densely
moves about 45 MiB of zeros per step, which is what held DDP back on CPU.

So the tables of `MIN_ROWS` rows or more are taken out of DDP, and after the
last micro-step of each optimizer step every rank:

1. marks the rows where its gradient is non-zero and all-reduces the marks
   (MAX), which gives the union over ranks;
2. all-reduces those rows of every table, packed into one buffer, divided by
   the world size before the sum as DDP does.

A row no rank marked is zero on every rank, so the result equals DDP's
average; rows with inf or NaN are marked too, so the non-finite-step check
still sees them. Two collectives per step, whatever the number of tables.
"""

from __future__ import annotations

from typing import Callable, List

import torch
import torch.distributed as dist
from torch import nn

MIN_ROWS = 256


def sparse_tables(model: nn.Module) -> List[str]:
    """Names of the trainable embedding weights that are synchronised by rows."""
    return [
        f"{name}.weight" if name else "weight"
        for name, module in model.named_modules()
        if isinstance(module, nn.Embedding)
        and module.num_embeddings >= MIN_ROWS
        and module.weight.requires_grad
        and not module.sparse
    ]


def no_grad_sync() -> None:
    """One process, or --embedding-sync ddp: DDP owns every gradient."""


def take_out_of_ddp(model: nn.Module) -> Callable[[], None]:
    """Call before wrapping `model` in DDP. Makes the ranks' tables equal (DDP
    broadcasts only what it owns) and returns the step's synchronisation,
    which every rank must call after its last backward of a step."""
    names = sparse_tables(model)
    if not names:
        return no_grad_sync
    torch.nn.parallel.DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(
        model, names
    )
    parameters = dict(model.named_parameters())
    tables = [parameters[name] for name in names]
    with torch.no_grad():
        for table in tables:
            dist.broadcast(table.data, src=0)
    return lambda: sync_rows(tables)


def sync_rows(tables: List[nn.Parameter]) -> None:
    world_size = dist.get_world_size()
    grads = []
    for table in tables:
        if table.grad is None:  # unused on this rank this step; others may have rows
            table.grad = torch.zeros_like(table)
        grads.append(table.grad)
    # a row's L1 norm is 0 only when the row is all zeros (inf and NaN count as non-zero)
    marks = torch.cat([torch.linalg.vector_norm(grad, 1, dim=1).ne(0) for grad in grads]).to(
        torch.uint8
    )
    dist.all_reduce(marks, op=dist.ReduceOp.MAX)
    rows = [part.nonzero().squeeze(1) for part in marks.bool().split([g.shape[0] for g in grads])]
    values = torch.cat([grad.index_select(0, r).reshape(-1) for grad, r in zip(grads, rows)])
    if values.numel() == 0:
        return
    values.div_(world_size)
    dist.all_reduce(values, op=dist.ReduceOp.SUM)
    start = 0
    for grad, r in zip(grads, rows):
        size = r.numel() * grad.shape[1]
        grad.index_copy_(0, r, values[start : start + size].view(r.numel(), grad.shape[1]))
        start += size
