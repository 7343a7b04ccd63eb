"""`semworld batch` with the local engine on stand-in stages: the files of `semworld predict` per clip, the
states corpus, the summary and its exit codes, resume, per-clip failures, dry runs, and the output lock."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest

from pipeline import cli
from pipeline.batch.local import run_lock
from pipeline.data import read_jsonl
from pipeline.utils import UserError

ARGS = ["-k", "3", "--stride", "4", "--no-progress"]
PREDICT_FILES = {"states.json", "strip.png", "predicted.mp4", *(f"predicted_{j:03d}.png" for j in range(3))}


def batch(*argv: str) -> int:
    return cli.main(["batch", *argv])


def summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def test_batch_writes_the_files_of_predict_and_a_states_corpus(
    fake_stages, clips_dir, tmp_path, capsys, monkeypatch
):
    from pipeline.world_model import WorldModelPipeline
    from tests.fakes import make_pipeline

    # `semworld predict` on the same stand-in stages, for the comparison below.
    monkeypatch.setattr(WorldModelPipeline, "from_pretrained", staticmethod(lambda *a, **k: make_pipeline()))
    out = tmp_path / "out"
    assert batch(str(clips_dir), "--out", str(out), *ARGS) == 0
    names = [f"{i:06d}" for i in range(4)]
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == names
    # Each folder holds what `semworld predict` writes for that clip, byte for byte in states.json.
    assert cli.main(["predict", str(clips_dir / "000002.mp4"), *ARGS[:4], "--out", str(tmp_path / "p")]) == 0
    got = {p.name for p in (out / "000002").iterdir()}
    assert PREDICT_FILES <= got and {p.name for p in (tmp_path / "p").iterdir()} <= got
    assert (out / "000002" / "states.json").read_text() == (tmp_path / "p" / "states.json").read_text()
    # states.jsonl: one line per clip in input order, the keys `world generate` writes, read by the trainer.
    lines = [json.loads(line) for line in (out / "states.jsonl").read_text().splitlines()]
    assert [rec["id"] for rec in lines] == names
    for rec, name in zip(lines, names, strict=True):
        assert {"clip", "fps", "stride", "states", "predictable", "seed"} <= set(rec)
        assert rec["clip"] == str((clips_dir / f"{name}.mp4").resolve()) and rec["stride"] == 4
        assert rec["states"] == json.loads((out / name / "states.json").read_text())["observed_states"]
        assert len(rec["predicted"]) == 3 and rec["predictable"] == [True] * len(rec["states"])
    assert [s.id for s in read_jsonl(out / "states.jsonl")] == names
    doc = summary(out)
    assert doc["counts"] == {"ok": 4, "skipped": 0, "failed": 0} and doc["failed"] == []
    assert set(doc["clips"][0]["seconds"]) == {"decode", "caption", "predict", "render", "write"}
    text = capsys.readouterr().out
    assert "4 done, 0 skipped (complete), 0 failed" in text and "000003" in text


def test_world_states_format_matches_world_generate(fake_stages, world_clips, tmp_path):
    """The keys of a batch line include every key of a `world generate` line except the world's own scenario."""
    out = tmp_path / "out"
    assert batch(str(world_clips / "clips" / "000000.mp4"), "--out", str(out), *ARGS) == 0
    world = json.loads((world_clips / "states.jsonl").read_text().splitlines()[0])
    ours = json.loads((out / "states.jsonl").read_text())
    assert set(world) - {"scenario"} <= set(ours)
    assert {k: type(v) for k, v in world.items() if k in ("clip", "states", "predictable", "seed")} == {
        k: type(ours[k]) for k in ("clip", "states", "predictable", "seed")
    }


def test_rerun_skips_complete_clips_and_redoes_changed_ones(fake_stages, clips_dir, tmp_path):
    out = tmp_path / "out"
    assert batch(str(clips_dir), "--out", str(out), *ARGS) == 0
    record = (out / "000001" / "clip.json").read_bytes()
    assert batch(str(clips_dir), "--out", str(out), *ARGS) == 0
    assert summary(out)["counts"] == {"ok": 0, "skipped": 4, "failed": 0}
    assert (out / "000001" / "clip.json").read_bytes() == record  # not written again
    assert len((out / "states.jsonl").read_text().splitlines()) == 4
    # Other parameters, other outputs: the clip is done again and its folder replaced whole (no stale frames).
    assert batch(str(clips_dir), "--out", str(out), "-k", "1", "--stride", "4", "--no-progress") == 0
    assert summary(out)["counts"] == {"ok": 4, "skipped": 0, "failed": 0}
    assert (
        not (out / "000001" / "predicted_002.png").exists()
        and (out / "000001" / "predicted_000.png").exists()
    )
    assert not [p for p in out.iterdir() if p.name.endswith((".tmp", ".old"))]


def test_a_bad_clip_fails_alone_and_the_exit_code_says_so(fake_stages, clips_dir, tmp_path):
    (clips_dir / "corrupt.mp4").write_bytes(b"not a video" * 100)
    (clips_dir / "empty.mp4").write_bytes(b"")
    out = tmp_path / "out"
    assert batch(str(clips_dir), "--out", str(out), *ARGS) == 1
    doc = summary(out)
    assert doc["counts"] == {"ok": 4, "skipped": 0, "failed": 2}
    assert doc["failed"] == ["corrupt", "empty"]
    errors = {c["name"]: c["error"] for c in doc["clips"] if c["status"] == "failed"}
    corrupt, empty = clips_dir / "corrupt.mp4", clips_dir / "empty.mp4"
    assert errors == {"corrupt": f"decode: {corrupt}: not a readable video", "empty": errors["empty"]}
    assert errors["empty"] == f"decode: {empty}: the file is empty"
    assert not (out / "corrupt").exists()
    assert len((out / "states.jsonl").read_text().splitlines()) == 4
    # Too long for the limits: that clip fails, the others were done before and are skipped.
    assert batch(str(clips_dir), "--out", str(out), *ARGS, "--max-frames", "2") == 1
    doc = summary(out)
    assert doc["counts"]["ok"] == 0 and doc["counts"]["failed"] == 6
    assert "clip gives more than 2 states at stride 4" in doc["clips"][0]["error"]


def test_failed_clips_are_retried_on_rerun(fake_stages, clips_dir, tmp_path):
    bad = clips_dir / "late.mp4"
    bad.write_bytes(b"x" * 10)
    out = tmp_path / "out"
    assert batch(str(clips_dir), "--out", str(out), *ARGS) == 1
    bad.write_bytes((clips_dir / "000000.mp4").read_bytes())  # the file arrives whole
    assert batch(str(clips_dir), "--out", str(out), *ARGS) == 0
    assert summary(out)["counts"] == {"ok": 1, "skipped": 4, "failed": 0}


def test_folder_names_never_collide(fake_stages, world_clips, tmp_path):
    src = world_clips / "clips" / "000000.mp4"
    root = tmp_path / "in"
    for rel in ("a/x.mp4", "b/x.mp4", "a__x.mp4", "X.mov", "x.mp4", "summary.json.mp4", "odd name!.mp4"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(src.read_bytes())
    out = tmp_path / "out"
    assert batch(str(root), "--recursive", "--out", str(out), *ARGS) == 0
    names = [c["name"] for c in summary(out)["clips"]]
    assert len(names) == 7 and len({n.lower() for n in names}) == 7
    assert "b__x" in names and "odd_name_" in names
    # a/x and a__x share a readable name, x and X too: each gets a short hash of its path.
    assert (
        sum(n.startswith("a__x-") for n in names) == 2 and sum(n.lower().startswith("x-") for n in names) == 2
    )
    assert not (out / "summary.json").is_dir() and any(n.startswith("summary.json-") for n in names)
    # Without --recursive only the top folder counts.
    assert batch(str(root), "--out", str(tmp_path / "flat"), *ARGS) == 0
    assert len(summary(tmp_path / "flat")["clips"]) == 5


def test_manifests_give_per_clip_parameters(fake_stages, clips_dir, tmp_path):
    listing = tmp_path / "clips.txt"
    listing.write_text(f"# two clips\n{clips_dir / '000000.mp4'}\n\nin/000001.mp4\n")
    out = tmp_path / "out"
    assert batch(str(listing), "--out", str(out), *ARGS) == 0
    assert [c["name"] for c in summary(out)["clips"]] == ["in__000000", "in__000001"]
    manifest = tmp_path / "clips.jsonl"
    manifest.write_text(
        json.dumps({"path": "in/000000.mp4", "horizon": 2, "state_rate": 5})
        + "\n"
        + json.dumps({"path": "in/000000.mp4", "horizon": 5})  # the same clip twice: two jobs
        + "\n"
    )
    assert batch(str(manifest), "--out", str(tmp_path / "m"), *ARGS) == 0
    lines = [json.loads(s) for s in (tmp_path / "m" / "states.jsonl").read_text().splitlines()]
    assert [len(r["predicted"]) for r in lines] == [2, 5]
    assert lines[0]["stride"] is None and lines[0]["state_rate"] == 5 and lines[1]["stride"] == 4
    assert lines[0]["id"] != lines[1]["id"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--stages", "render"], "--stages render: give the first stages in order"),
        (["--stages", "caption,paint"], "unknown stage 'paint'"),
        (["--ray-stage", "caption:concurrency=2"], "--ray-stage sizes the stages of a Ray run: add --ray"),
        (["--ray", "--ray-stage", "caption:gpus=1"], "unknown key 'gpus'"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(fake_stages, clips_dir, tmp_path, capsys, argv, message):
    if "--ray" in argv:
        pytest.importorskip("ray")
    assert batch(str(clips_dir), "--out", str(tmp_path / "o"), *argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("semworld: error: ") and message in err and "\n" not in err


def test_inputs_that_name_nothing_exit_2(fake_stages, tmp_path, capsys):
    assert batch(str(tmp_path / "nope"), "--out", str(tmp_path / "o")) == 2
    assert "nope: no such file, folder or glob match" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert batch(str(tmp_path / "empty"), "--out", str(tmp_path / "o")) == 2
    assert "no videos found in" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"path": "a.mp4", "horizon": 0}\n')
    assert batch(str(bad), "--out", str(tmp_path / "o")) == 2
    assert (
        "bad.jsonl:1: horizon: Input should be greater than or equal to 1, got 0" in capsys.readouterr().err
    )
    bad.write_text('{"path": "a.mp4", "colour": "red"}\n')
    assert batch(str(bad), "--out", str(tmp_path / "o")) == 2
    assert "bad.jsonl:1: unknown key 'colour'" in capsys.readouterr().err
    # a flag outside its range: one line naming the flag, exit 2, before any clip is looked at
    assert batch(str(tmp_path), "--out", str(tmp_path / "o"), "--horizon", "0") == 2
    assert "--horizon: Input should be greater than or equal to 1, got 0" in capsys.readouterr().err


def test_glob_input(fake_stages, clips_dir, tmp_path):
    out = tmp_path / "out"
    assert batch(str(clips_dir / "00000[12].mp4"), "--out", str(out), *ARGS) == 0
    assert [c["name"] for c in summary(out)["clips"]] == ["000001", "000002"]


def test_dry_run_lists_and_does_nothing(fake_stages, clips_dir, tmp_path, capsys):
    out = tmp_path / "out"
    assert batch(str(clips_dir / "000000.mp4"), "--out", str(out), *ARGS) == 0
    capsys.readouterr()
    assert batch(str(clips_dir), "--out", str(out), *ARGS, "--dry-run") == 0
    text = capsys.readouterr().out
    assert "skip (complete)" in text and "run caption,predict,render" in text
    assert "3 to run, 1 complete; nothing was done (--dry-run)" in text
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["000000"]


def test_caption_stage_alone_makes_a_states_corpus(fake_stages, clips_dir, tmp_path):
    out = tmp_path / "out"
    assert batch(str(clips_dir), "--out", str(out), "--stages", "caption", *ARGS) == 0
    files = {p.name for p in (out / "000000").iterdir()}
    assert {"states.json", "strip.png", "clip.json"} <= files and not any(
        f.startswith("predicted") for f in files
    )
    lines = [json.loads(s) for s in (out / "states.jsonl").read_text().splitlines()]
    assert len(lines) == 4 and all(r["predicted"] == [] and r["states"] for r in lines)
    # The same clips at the full stages are other outputs: done again, not skipped.
    assert batch(str(clips_dir), "--out", str(out), *ARGS) == 0
    assert summary(out)["counts"]["ok"] == 4


def test_no_progress_logs_a_line_per_clip(fake_stages, clips_dir, tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="pipeline.batch.local"):
        assert batch(str(clips_dir), "--out", str(tmp_path / "o"), *ARGS) == 0
    lines = [r.getMessage() for r in caplog.records if r.name == "pipeline.batch.local"]
    assert len(lines) == 4 and lines[0].startswith("[1/4] 000000 ok ")


def test_two_workers_give_the_same_outputs_as_one(fake_stages, clips_dir, tmp_path):
    assert batch(str(clips_dir), "--out", str(tmp_path / "one"), *ARGS) == 0
    assert (
        batch(str(clips_dir), "--out", str(tmp_path / "two"), *ARGS, "--workers", "2", "--threads", "1") == 0
    )
    assert (tmp_path / "one" / "states.jsonl").read_text() == (tmp_path / "two" / "states.jsonl").read_text()
    assert summary(tmp_path / "two")["counts"]["ok"] == 4


def test_ray_missing_is_one_line(fake_stages, clips_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    assert batch(str(clips_dir), "--out", str(tmp_path / "o"), "--ray") == 2
    err = capsys.readouterr().err.strip()
    assert (
        err == "semworld: error: --ray needs Ray Data, an optional extra: pip install 'semworld[distributed]'"
    )
    assert not (tmp_path / "o").exists()


def test_one_run_per_output_folder(tmp_path):
    with run_lock(tmp_path / "out"):
        with pytest.raises(UserError, match="another semworld batch is writing there"):
            with run_lock(tmp_path / "out", wait_s=0.2):
                pass
    with run_lock(tmp_path / "out", wait_s=0.2):  # released with the first run
        pass


def test_ctrl_c_still_writes_the_corpus_and_summary_of_what_was_done(
    fake_stages, clips_dir, tmp_path, monkeypatch
):
    from pipeline.batch import local
    from tests.fakes import NoiseRenderer, make_pipeline

    class Interrupting(NoiseRenderer):
        def render(self, states, generator=None, steps=None, guidance=None, step_callback=None):
            if self.calls == 4:  # two render batches per clip at -k 3: the third clip is interrupted
                raise KeyboardInterrupt
            return super().render(states, generator, steps, guidance, step_callback)

    def load(settings, device=None, components=None):
        pipe = make_pipeline()
        pipe.renderer = Interrupting()
        return pipe

    monkeypatch.setattr(local, "load_pipeline", load)
    out = tmp_path / "out"
    assert batch(str(clips_dir), "--out", str(out), *ARGS) == 130
    doc = summary(out)
    assert doc["counts"] == {"ok": 2, "skipped": 0, "failed": 0} and doc["not_run"] == ["000002", "000003"]
    assert len((out / "states.jsonl").read_text().splitlines()) == 2
    assert batch(str(clips_dir), "--out", str(out), *ARGS) == 0  # rerun: the two others
    assert summary(out)["counts"] == {"ok": 2, "skipped": 2, "failed": 0}


def test_bad_weights_stop_before_any_work(clips_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SEMWORLD_PIPELINE_FACTORY", raising=False)
    weights = tmp_path / "w"
    weights.mkdir()
    (weights / "model_index.json").write_text('{"captioner": "nowhere"}')
    out = tmp_path / "out"
    assert batch(str(clips_dir), "--out", str(out), "--weights", str(weights), "--stages", "caption") == 2
    assert "w/nowhere: missing folder for the captioner named in model_index.json" in capsys.readouterr().err
    (weights / "nowhere").mkdir()
    assert batch(str(clips_dir), "--out", str(out), "--weights", str(weights)) == 2
    assert "no 'predictor' entry (needed by --stages)" in capsys.readouterr().err
    assert not out.exists()
