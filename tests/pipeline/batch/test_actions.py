"""A batch manifest line's actions reach the forecast and its states.jsonl record."""

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
