"""Suite-wide settings and fixtures: tiny tensors run fastest on one thread (and CI has two cores to share with
subprocesses); `tiny_weights` is a weights folder of tiny random real stages, built once per session."""

from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def one_thread():
    """Every test starts on one intra-op thread, whatever the one before set (trainers take --threads)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_weights(tmp_path_factory) -> Path:
    """Tiny random real stages (BLIP, 4-tensor, SD layout) saved like the shipped weights, with model_index.json."""
    from tests.fakes import build_tiny_weights

    return build_tiny_weights(tmp_path_factory.getbasetemp() / "semworld-tiny-weights")
