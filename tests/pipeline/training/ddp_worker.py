"""What each torchrun process of test_torchrun runs: `semworld train predictor ARGS`, then a hash of this
replica's final parameters written to HASH_PREFIX.rank<R> (the test compares the replicas)."""

import hashlib
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from pipeline.cli import build_parser
from pipeline.cli.flags import dataclass_from_namespace
from pipeline.cli.train import print_epoch_table
from pipeline.training.args import TrainArgs
from pipeline.training.predictor import train_predictor


def parameter_hash(model) -> str:
    """sha256 over every parameter and buffer, in name order."""
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def main(hash_prefix: str, argv: list[str]) -> None:
    args = dataclass_from_namespace(TrainArgs, build_parser().parse_args(["train", "predictor", *argv]))
    results = train_predictor(args)
    rank = dist.get_rank()
    if rank == 0:
        print_epoch_table(results)
    for kind, result in results.items():
        Path(f"{hash_prefix}.{kind}.rank{rank}").write_text(parameter_hash(result.model) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
