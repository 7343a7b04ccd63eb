"""The shared helpers: every atomic writer goes through one path, leaves no temporary file, and gives its files
the mode the umask asks for (as `open(path, "w")` would), never mkstemp's or safetensors' owner-only 0o600."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from models.four_tensor import FourTensorConfig, FourTensorModel
from pipeline.outputs import write_outputs
from pipeline.utils import (
    atomic_dir,
    atomic_torch_save,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
)
from pipeline.world_model import WorldModelOutput


@pytest.fixture(params=[0o022, 0o027])
def umask(request):
    """Run the test under this umask (restored afterwards): 0o022 gives 0o644 files, 0o027 gives 0o640."""
    before = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(before)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".") or p.name.endswith(".tmp"))


def test_every_atomic_writer_respects_the_umask(tmp_path, umask):
    want = 0o666 & ~umask
    atomic_write_bytes(tmp_path / "a.bin", b"\x00\x01")
    atomic_write_text(tmp_path / "a.txt", "text")
    atomic_write_json(tmp_path / "a.json", {"k": 1})
    atomic_torch_save({"w": torch.ones(2)}, tmp_path / "a.pt")
    for name in ("a.bin", "a.txt", "a.json", "a.pt"):
        assert mode(tmp_path / name) == want, name
    assert (tmp_path / "a.json").read_text() == '{\n  "k": 1\n}\n'
    assert torch.equal(torch.load(tmp_path / "a.pt")["w"], torch.ones(2))
    assert leftovers(tmp_path) == []


def test_atomic_torch_save_keeps_the_old_file_when_saving_fails(tmp_path):
    path = tmp_path / "checkpoint.pt"
    atomic_torch_save({"step": 1}, path)

    class Unpicklable:
        def __reduce__(self):
            raise RuntimeError("cannot pickle this")

    with pytest.raises(RuntimeError, match="cannot pickle"):
        atomic_torch_save({"step": 2, "bad": Unpicklable()}, path)
    assert torch.load(path) == {"step": 1}
    assert leftovers(tmp_path) == []  # the temporary file is gone too, not left as "checkpoint.pt.tmp"


def test_a_folder_swapped_in_gives_library_written_files_the_umask_mode(tmp_path, umask):
    with atomic_dir(tmp_path / "model") as tmp:
        save_file({"w": torch.zeros(2)}, str(tmp / "model.safetensors"))  # safetensors makes it 0o600
        (tmp / "sub").mkdir()
        (tmp / "sub" / "config.json").write_text("{}")
    assert mode(tmp_path / "model" / "model.safetensors") == 0o666 & ~umask
    assert mode(tmp_path / "model" / "sub" / "config.json") == 0o666 & ~umask
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == ["model.safetensors", "sub"]


def test_saved_predictor_weights_respect_the_umask(tmp_path, umask):
    config = FourTensorConfig(vocab_size=12, d_x=8, d_t=4, n_heads=2, n_layers=1, N=4, T=3)
    model = FourTensorModel(config)
    model.save_pretrained(tmp_path / "p")
    assert mode(tmp_path / "p" / "model.safetensors") == 0o666 & ~umask
    again = FourTensorModel.from_pretrained(tmp_path / "p")
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))


def test_predict_outputs_respect_the_umask(tmp_path, umask):
    frame = np.zeros((16, 16, 3), dtype=np.uint8)
    output = WorldModelOutput(["a ."], ["b .", "c ."], [frame], [frame, frame + 200], 2.0)
    files = write_outputs(output, tmp_path / "out", truth_frames=[frame, frame])
    written = [*files.predicted_frames, *files.observed_frames, files.states, files.video, files.strip, files.story,
               files.versus]  # fmt: skip
    assert len(written) == 8
    for path in written:
        assert path is not None and mode(path) == 0o666 & ~umask, path
    assert leftovers(tmp_path / "out") == []
