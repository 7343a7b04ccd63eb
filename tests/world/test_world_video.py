"""Files and the CLI: MP4/PNG/states.jsonl, same seed same bytes, `world show`, and one-line errors."""

import hashlib
import json
from pathlib import Path

import av
import numpy as np
from PIL import Image

from pipeline import cli
from world import FPS, STRIDE, episode, render_state
from world.video import decode_mp4, encode_mp4, generate

KEYS = ["clip", "fps", "stride", "states", "predictable", "scenario", "seed"]


def _digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_encode_is_deterministic_and_h264_yuv420p(tmp_path):
    frames = episode("bounce", 0, 0, length=4).frames(STRIDE)
    a, b = tmp_path / "a.mp4", tmp_path / "b.mp4"
    encode_mp4(frames, a)
    encode_mp4(frames, b)
    data = a.read_bytes()
    assert data == b.read_bytes()
    # faststart: the index comes before the media, so a browser can start playing at once
    assert data[4:8] == b"ftyp" and 0 < data.find(b"moov") < data.find(b"mdat")
    with av.open(str(a)) as c:
        s = c.streams.video[0]
        assert s.codec_context.name == "h264" and s.codec_context.pix_fmt == "yuv420p"
        assert s.average_rate == FPS
    back = decode_mp4(a)
    assert back.shape == frames.shape
    assert np.abs(back.astype(int) - frames.astype(int)).mean() < 3.0


def test_generate_same_seed_same_bytes_any_workers(tmp_path):
    one = generate(
        tmp_path / "one", "hide,appear", clips=2, seed=3, length=6, workers=1, progress=False
    ).parent
    two = generate(
        tmp_path / "two", "hide,appear", clips=2, seed=3, length=6, workers=2, progress=False
    ).parent
    digest = _digest(one)
    assert digest == _digest(two)
    assert "clips/000001.mp4" in digest and "frames/000001/05.png" in digest
    other = generate(tmp_path / "val", "hide,appear", clips=2, seed=3, length=6, split="val", progress=False)
    assert other.read_text() != (one / "states.jsonl").read_text()


def test_states_jsonl_records_and_pngs(tmp_path):
    path = generate(tmp_path, "blink", clips=2, seed=8, length=5, progress=False)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(records) == 2
    for i, rec in enumerate(records):
        assert list(rec) == KEYS
        assert rec["clip"] == f"clips/{i:06d}.mp4" and (tmp_path / rec["clip"]).stat().st_size > 0
        assert (rec["fps"], rec["stride"], rec["scenario"], rec["seed"]) == (FPS, STRIDE, "blink", 8)
        assert len(rec["states"]) == len(rec["predictable"]) == 5
        assert len(decode_mp4(tmp_path / rec["clip"])) == 4 * STRIDE + 1
        for k, state in enumerate(rec["states"]):
            png = np.asarray(Image.open(tmp_path / "frames" / f"{i:06d}" / f"{k:02d}.png"))
            assert np.array_equal(png, render_state(state))


def test_cli_generate_and_show(tmp_path, capsys):
    out = tmp_path / "data"
    argv = [
        "world",
        "generate",
        "--scenario",
        "bounce,gravity",
        "--clips",
        "2",
        "--seed",
        "1",
        "--out",
        str(out),
    ]
    assert cli.main([*argv, "--no-progress"]) == 0
    assert len((out / "states.jsonl").read_text().splitlines()) == 2
    state = json.loads((out / "states.jsonl").read_text().splitlines()[1])["states"][3]
    png = tmp_path / "show" / "state.png"
    assert cli.main(["world", "show", state, "--out", str(png)]) == 0
    assert np.array_equal(np.asarray(Image.open(png)), render_state(state))
    assert np.array_equal(
        np.asarray(Image.open(png)), np.asarray(Image.open(out / "frames" / "000001" / "03.png"))
    )
    assert "wrote" in capsys.readouterr().out


def _error(capsys, argv) -> str:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("semworld: error: ")
    return err


def test_cli_errors_are_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SEMWORLD_DEBUG", raising=False)
    gen = ["world", "generate", "--clips", "1", "--no-progress"]
    err = _error(capsys, [*gen, "--scenario", "bounce,nope", "--out", str(tmp_path / "x")])
    assert "unknown scenario 'nope'" in err
    blocker = tmp_path / "file"
    blocker.write_text("")
    err = _error(capsys, [*gen, "--scenario", "bounce", "--out", str(blocker / "sub")])
    assert "cannot write" in err and str(blocker) in err
    err = _error(capsys, [*gen, "--scenario", "bounce", "--out", str(tmp_path / "y"), "--split", "dev"])
    assert "'dev'" in err and not (tmp_path / "y").exists()
    err = _error(
        capsys, ["world", "show", "red ball top left , lamp dim .", "--out", str(tmp_path / "s.png")]
    )
    assert "'dim'" in err
    err = _error(capsys, ["world", "show", "red ball top left .", "--out", str(tmp_path / "s.jpg")])
    assert ".png" in err
