"""The preset registry and `semworld presets`: every preset builds, and the paper's counts are reproduced."""

import json

import pytest
import torch

from models.four_tensor import FourTensorModel, count_parameters
from models.presets import PRESETS, four_tensor_config, get_preset
from pipeline import cli

PAPER = {"paper-h2-l2": 122.2, "paper-h4-l2": 172.5, "paper-h4-l3": 256.4}


@pytest.mark.parametrize("name", sorted(PAPER))
def test_paper_presets_match_table_5_within_0_1M(name):
    preset = get_preset(name)
    assert (preset.dims.vocab_size, preset.dims.d_x, preset.dims.d_t, preset.dims.N, preset.dims.T) == (
        36_711,
        64,
        32,
        16,
        4,
    )
    count = count_parameters(four_tensor_config(name))  # on the meta device
    assert abs(count / 1e6 - PAPER[name]) < 0.1
    assert preset.paper_params_m["four_tensor"] == PAPER[name]


@pytest.mark.parametrize("name", [n for n, p in PRESETS.items() if not p.paper_params_m])
def test_cpu_presets_build_and_run(name):
    torch.manual_seed(0)
    model = FourTensorModel(four_tensor_config(name, vocab_size=50, dropout=0.0))
    c = model.config
    full = torch.randint(1, 50, (2, c.T + 1, c.N))
    loss = model.training_step(full)
    assert torch.isfinite(loss) and model(full[:, :-1]).shape == (2, c.N, c.T, 50)
    assert count_parameters(four_tensor_config(name)) < 20e6  # trainable on two CPU cores


def test_overrides_and_unknown_names():
    cfg = four_tensor_config("tiny", vocab_size=99, end_ids=(3,), slice_causal=True)
    assert (cfg.vocab_size, cfg.end_ids, cfg.slice_causal, cfg.d_x) == (
        99,
        (3,),
        True,
        get_preset("tiny").dims.d_x,
    )
    with pytest.raises(ValueError, match="unknown preset 'huge'; known presets: tiny, small"):
        get_preset("huge")


def test_cli_presets_json_lists_every_preset(capsys):
    assert cli.main(["presets", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == list(PRESETS)
    by_name = {r["name"]: r for r in rows}
    assert by_name["paper-h4-l2"]["params"]["four_tensor"] == 172_512_128
    assert by_name["paper-h4-l2"]["n_heads"] == 4 and by_name["paper-h4-l3"]["n_layers"] == 3


def test_cli_presets_table(capsys):
    assert cli.main(["presets"]) == 0
    out = capsys.readouterr().out
    line = next(row for row in out.splitlines() if row.startswith("paper-h2-l2"))
    assert "122.2M" in line and "175.9M" in line
