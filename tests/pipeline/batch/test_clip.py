"""The pieces both engines share: the writer (atomic, idempotent), completeness, folder names, stage lists, and
loading only the stages a run needs."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

from pipeline.batch.clip import is_complete, process
from pipeline.batch.jobs import BatchSettings, ClipJob, assign_names, parse_stages
from pipeline.loading import NotLoaded
from pipeline.utils import UserError
from pipeline.video import read_video
from tests.fakes import make_pipeline


def job(source: Path, root: Path, **params) -> ClipJob:
    base = {"horizon": 2, "stride": 4, "state_rate": None, "context": None, "seed": 0}
    return ClipJob("", source, root=root, **(base | params))


def test_writing_a_clip_twice_gives_the_same_folder(world_clips, tmp_path):
    """What a retried Ray task does: the second write replaces the folder with the same files and states."""
    settings = BatchSettings(out=tmp_path / "out", horizon=2, stride=4)
    (j,) = assign_names([job(world_clips / "clips" / "000001.mp4", world_clips / "clips")])
    first = process(make_pipeline(), j, settings)
    assert first.status == "ok" and is_complete(j, settings) is not None
    files = {p.name: p.read_bytes() for p in (settings.out / j.name).iterdir() if p.name != "clip.json"}
    second = process(make_pipeline(), j, settings)
    assert second.record == first.record
    again = {p.name: p.read_bytes() for p in (settings.out / j.name).iterdir() if p.name != "clip.json"}
    assert again.keys() == files.keys()
    # Every file byte for byte, but the MP4s frame for frame: in two CI runs the H.264 encoder gave other bytes for
    # the same frames (the PNGs beside them identical; decoded, these noise frames differed by 2 levels on average;
    # cause not found), so their decoded frames must agree within 5% of the range (unrelated noise frames: ~85).
    assert {k: v for k, v in again.items() if not k.endswith(".mp4")} == {
        k: v for k, v in files.items() if not k.endswith(".mp4")
    }
    for name in (k for k in files if k.endswith(".mp4")):
        a, b = (np.stack(read_video(io.BytesIO(d)).frames).astype(float) for d in (files[name], again[name]))
        assert a.shape == b.shape and float(np.abs(a - b).mean()) < 12.75, name
    assert [p.name for p in settings.out.iterdir()] == [j.name]  # no scratch folder left beside it


def test_complete_means_record_fingerprint_and_files(world_clips, tmp_path):
    settings = BatchSettings(out=tmp_path / "out", horizon=2, stride=4)
    (j,) = assign_names([job(world_clips / "clips" / "000000.mp4", world_clips / "clips")])
    assert is_complete(j, settings) is None
    caption_only = BatchSettings(out=settings.out, stages=("caption",), stride=4)
    assert process(make_pipeline(), j, caption_only).status == "ok"
    assert is_complete(j, settings) is None  # written by a caption-only run: another fingerprint
    process(make_pipeline(), j, settings)
    doc = is_complete(j, settings)
    assert doc is not None and set(doc["files"]) >= {"states.json", "predicted_001.png", "strip.png"}
    (settings.out / j.name / "predicted_001.png").unlink()
    assert is_complete(j, settings) is None  # a file it lists is gone
    process(make_pipeline(), j, settings)
    (settings.out / j.name / "clip.json").write_text("{not json")
    assert is_complete(j, settings) is None


def test_names_are_readable_unless_they_clash(tmp_path):
    root = tmp_path
    jobs = assign_names([
        job(root / "a" / "x.mp4", root), job(root / "a__x.mp4", root), job(root / "b" / "y z.mp4", root),
        job(root / "Q.mp4", root), job(root / "q.mov", root), job(root / "c.tmp.mp4", root),
        job(root / "k.mp4", root, horizon=2), job(root / "k.mp4", root, horizon=5),
    ])  # fmt: skip
    names = [j.name for j in jobs]
    assert names[2] == "b__y_z" and len({n.lower() for n in names}) == len(names)
    assert names[0].startswith("a__x-") and names[1].startswith("a__x-") and len(names[0]) == len("a__x-") + 8
    assert names[3].startswith("Q-") and names[4].startswith("q-") and names[5].startswith("c.tmp-")
    assert names[6].startswith("k-") and names[7].startswith("k-")
    assert [j.name for j in assign_names([job(root / "a" / "x.mp4", root)])] == ["a__x"]  # alone: no hash
    assert names == [j.name for j in assign_names([*jobs])]  # the same inputs, the same names


@pytest.mark.parametrize(
    ("text", "stages"),
    [
        ("caption", ("caption",)),
        ("caption,predict", ("caption", "predict")),
        (" caption , predict,render", None),
    ],
)
def test_parse_stages(text, stages):
    assert parse_stages(text) == (stages or ("caption", "predict", "render"))


@pytest.mark.parametrize(
    "text", ["predict", "caption,render", "render,predict,caption", "", "caption,colour"]
)
def test_parse_stages_refuses_gaps_and_unknowns(text):
    with pytest.raises(UserError, match=f"--stages {text}"):
        parse_stages(text)


def test_not_loaded_stage_says_so(tmp_path):
    with pytest.raises(RuntimeError, match="the renderer stage was not loaded"):
        NotLoaded("renderer").render(["a ."])
    index = tmp_path / "w"
    index.mkdir()
    (index / "model_index.json").write_text(json.dumps({"captioner": "c"}))
    from pipeline.world_model import WorldModelPipeline

    with pytest.raises(ValueError, match=r"stages: unknown \['painter'\]"):
        WorldModelPipeline.from_pretrained(index, stages=("painter",))


def test_ray_stage_defaults_fit_one_gpu_or_two_cores(tmp_path):
    from pipeline.batch.ray import stage_resources

    cpu = stage_resources(BatchSettings(out=tmp_path, device="cpu"), {}, cluster_gpus=8)
    assert all(r.num_gpus == 0 for r in cpu.values())
    # All five stages' actors start at once on two cores (none waits for another's CPU share).
    assert all(r.concurrency == 1 for r in cpu.values())
    assert sum(r.num_cpus for r in cpu.values()) <= 2
    # One batch size for the model stages: a larger one downstream would merge the blocks of clips for good.
    assert len({cpu[s].batch_size for s in ("caption", "predict", "render")}) == 1
    auto = stage_resources(BatchSettings(out=tmp_path), {}, cluster_gpus=1)
    assert sum(r.num_gpus for r in auto.values()) == 1.0 and auto["render"].num_gpus == 0.5
    # With GPUs the decode and write pools grow with the cluster's CPUs.
    assert auto["decode"].concurrency is None and auto["write"].concurrency is None
    assert all(r.num_gpus == 0 for r in stage_resources(BatchSettings(out=tmp_path), {}).values())
    sized = stage_resources(BatchSettings(out=tmp_path), {"render": {"concurrency": 3, "num_gpus": 1.0}}, 4)
    assert (sized["render"].concurrency, sized["render"].num_gpus, sized["caption"].num_gpus) == (
        3,
        1.0,
        0.25,
    )
    with pytest.raises(UserError, match="concurrency must be >= 1, got 0"):
        stage_resources(BatchSettings(out=tmp_path), {"caption": {"concurrency": 0}})
