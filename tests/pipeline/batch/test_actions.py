"""A clip's actions (a manifest line's, or the file beside the clip) reach the forecast and its states.jsonl
record."""

import json

from pipeline.cli import main


def test_batch_manifest_lines_carry_actions(tmp_path, monkeypatch, clips_dir):
    clip = clips_dir / "000000.mp4"
    monkeypatch.setenv("SEMWORLD_PIPELINE_FACTORY", "tests.fakes:make_pipeline")
    monkeypatch.setenv("FAKE_ACTIONS", "1")
    manifest = tmp_path / "clips.jsonl"
    manifest.write_text(json.dumps({"path": str(clip), "actions": ["up", None, "down"]}) + "\n")
    assert main(["batch", str(manifest), "--out", str(tmp_path / "b"), "-k", "2", "--stride", "10",
                 "--no-progress"]) == 0  # fmt: skip
    rec = json.loads((tmp_path / "b" / "states.jsonl").read_text().splitlines()[0])
    assert rec["actions"][:3] == ["up", None, "down"]
    manifest.write_text(json.dumps({"path": str(clip), "actions": "up"}) + "\n")
    assert main(["batch", str(manifest), "--out", str(tmp_path / "c"), "--no-progress"]) == 2


def test_a_folder_of_clips_reads_each_clips_actions_file_beside_it(tmp_path, monkeypatch, clips_dir):
    monkeypatch.setenv("SEMWORLD_PIPELINE_FACTORY", "tests.fakes:make_pipeline")
    monkeypatch.setenv("FAKE_ACTIONS", "1")
    clips = sorted(clips_dir.glob("*.mp4"))
    (clips_dir / f"{clips[0].stem}.actions.txt").write_text("# after each state\ndown\n?\nup\n")
    assert main(["batch", str(clips_dir), "--out", str(tmp_path / "b"), "-k", "2", "--stride", "10",
                 "--no-progress"]) == 0  # fmt: skip
    records = {
        r["id"]: r for r in map(json.loads, (tmp_path / "b" / "states.jsonl").read_text().splitlines())
    }
    assert len(records) == len(clips)
    assert records[clips[0].stem]["actions"][:3] == ["down", None, "up"]
    for c in clips[1:]:  # no file beside: every action unknown
        assert all(a is None for a in records[c.stem].get("actions", []))
    (clips_dir / f"{clips[1].stem}.actions.txt").write_text("go left\n")
    assert main(["batch", str(clips_dir), "--out", str(tmp_path / "c"), "--no-progress"]) == 2
