"""`semworld train predictor` / `eval predictor`: bad input gives one line on stderr and exit code 2."""

import pytest

from pipeline import cli


@pytest.fixture(autouse=True)
def no_debug(monkeypatch):
    monkeypatch.delenv("SEMWORLD_DEBUG", raising=False)


def _error(capsys, argv):
    capsys.readouterr()
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("semworld: error: ")
    return err


def test_train_errors_are_one_line(tmp_path, toy_jsonl, capsys):
    base = ["train", "predictor", "--out", str(tmp_path / "o"), "--no-progress"]
    err = _error(capsys, [*base, "--data", str(tmp_path / "nope.jsonl"), "--preset", "tiny"])
    assert err.endswith("nope.jsonl: no such file")
    with pytest.raises(SystemExit) as exc:  # a usage error: argparse names the choices
        cli.main([*base, "--data", str(toy_jsonl), "--preset", "huge"])
    err = capsys.readouterr().err
    assert (
        exc.value.code == 2
        and "argument --preset: invalid choice: 'huge' (choose from 'tiny', 'small'" in err
    )
    err = _error(
        capsys,
        [*base, "--data", str(toy_jsonl), "--preset", "tiny", "--model", "baseline", "--causal-slices"],
    )
    assert "--causal-slices applies to the 4-tensor model only" in err
    err = _error(capsys, [*base, "--data", str(toy_jsonl), "--preset", "tiny", "--val-fraction", "1.5"])
    assert "--val-fraction must be in (0, 1), got 1.5" in err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"states": ["a."]}\n{"states": "a."}\n')
    err = _error(capsys, [*base, "--data", str(bad), "--preset", "tiny"])
    assert err.endswith('bad.jsonl:2: "states" must be a non-empty list of sentences')


def test_eval_errors_are_one_line(tmp_path, toy_jsonl, capsys):
    err = _error(capsys, ["eval", "predictor", "--weights", str(tmp_path / "none"), "--data", str(toy_jsonl)])
    assert "none: no such directory; expected a saved semworld predictor" in err
    (tmp_path / "empty").mkdir()
    err = _error(
        capsys, ["eval", "predictor", "--weights", str(tmp_path / "empty"), "--data", str(toy_jsonl)]
    )
    assert "no config.json" in err


def test_a_missing_weights_folder_is_one_line_and_exit_2(states_file, tmp_path, capsys):
    argv = [
        "predict",
        "--states",
        str(states_file),
        "--weights",
        str(tmp_path / "nope"),
        "--out",
        str(tmp_path / "o"),
    ]
    err = _error(capsys, argv)
    assert f"{tmp_path / 'nope'}: no such directory" in err and err.count("\n") <= 1
    err = _error(capsys, ["eval", "world", "--data", str(tmp_path / "nowhere"), "--weights", str(tmp_path)])
    assert "nowhere: no such directory; expected a directory made by `semworld world generate`" in err
