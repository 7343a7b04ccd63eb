"""Tests of the 1-D GPT-2 baseline (models/baseline.py): packing, the free-running loss, decoding, files, sizes."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from models.baseline import BaselineConfig, BaselineModel, count_parameters

V, N, T = 23, 5, 3


def tiny_config(**overrides) -> BaselineConfig:
    base = dict(vocab_size=V, d_x=4, d_t=2, n_heads=2, n_layers=2, N=N, T=T, dropout=0.0, padding_idx=0)
    base.update(overrides)
    return BaselineConfig(**base)


def tiny_model(seed: int = 0, dtype: torch.dtype = torch.float64, **overrides) -> BaselineModel:
    torch.manual_seed(seed)
    return BaselineModel(tiny_config(**overrides)).to(dtype)


def ragged_windows(seed: int = 1) -> torch.Tensor:
    """(4, T+1, N) windows with padding inside sentences, an empty sentence and S(T) of different lengths."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(1, V, (4, T + 1, N), generator=g)
    x[0, :, 3:] = 0  # every sentence of row 0 has 3 tokens
    x[1, T, 1:] = 0  # row 1: S(T) has a single token
    x[2, 1, :] = 0  # row 2: an empty context sentence
    x[3, 0, 2:] = 0  # row 3: full S(T) (N tokens)
    return x


def naive_free_run(
    model: BaselineModel, window: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """Section 7.4 written out for one window (T+1, N), no cache: the whole sequence is recomputed each step."""
    cfg = model.config
    seq = [cfg.bos_id] + [int(t) for s in window[: cfg.T] for t in s if int(t) != cfg.padding_idx]
    gold = [int(t) for t in window[cfg.T] if int(t) != cfg.padding_idx] + [cfg.eos_id]
    sel, content, fed = torch.zeros(()), torch.zeros(()), []
    for tgt in gold:
        ids = torch.tensor([seq])
        h = model.transformer(input_ids=ids, use_cache=False).last_hidden_state[0, -1]
        logits = h @ model.transformer.wte.weight.T
        ce = F.cross_entropy(logits[None], torch.tensor([tgt]), reduction="sum")
        sel = sel + ce
        if tgt != cfg.eos_id:
            content = content + ce
        nxt = int(logits.argmax())
        fed.append(nxt)
        seq.append(nxt)
    return sel, content, fed


# ---------------------------------------------------------------------------------------------------------------
# Configuration and input checks
# ---------------------------------------------------------------------------------------------------------------


def test_config_validation_and_derived_ids():
    cfg = tiny_config()
    assert (cfg.bos_id, cfg.eos_id, cfg.total_vocab_size) == (V, V + 1, V + 2)
    assert cfg.d_model == 8 and cfg.n_positions == 1 + T * N + N
    assert BaselineConfig.from_dict({**cfg.to_dict(), "semworld_model": "baseline"}) == cfg
    with pytest.raises(ValueError, match="n_heads=3 must divide"):
        tiny_config(n_heads=3)
    with pytest.raises(ValueError, match="dropout"):
        tiny_config(dropout=1.5)
    with pytest.raises(ValueError, match="padding_idx"):
        tiny_config(padding_idx=V)
    with pytest.raises(ValueError, match="BaselineConfig.N must be a positive integer"):
        tiny_config(N=0)


def test_from_predictor_copies_fields():
    pred = SimpleNamespace(
        vocab_size=50, d_x=8, d_t=4, n_heads=4, n_layers=3, N=7, T=2, dropout=0.2, padding_idx=0, end_ids=(5,)
    )
    cfg = BaselineConfig.from_predictor(pred)
    assert (cfg.vocab_size, cfg.d_x, cfg.d_t, cfg.n_heads, cfg.n_layers) == (50, 8, 4, 4, 3)
    assert (cfg.N, cfg.T, cfg.dropout, cfg.padding_idx) == (7, 2, 0.2, 0)
    assert cfg.bos_id == 50 and cfg.eos_id == 51  # appended after the content vocabulary, padding not reused


def test_gpt2_layout_matches_section_7():
    model = tiny_model(dropout=0.1)
    g = model.transformer.config
    assert g.n_embd == 8 and g.n_inner == 32 and g.n_layer == 2 and g.n_head == 2
    assert g.vocab_size == V + 2 and g.n_positions == 1 + T * N + N
    # dropout on the two residual branches only
    assert g.resid_pdrop == 0.1 and g.embd_pdrop == 0.0 and g.attn_pdrop == 0.0
    block = model.transformer.h[0]
    assert block.attn.resid_dropout.p == 0.1 and block.mlp.dropout.p == 0.1
    assert isinstance(model.transformer.ln_f, torch.nn.LayerNorm)  # final norm before the readout


@pytest.mark.parametrize(
    "bad, message",
    [
        (torch.zeros(T + 1, N, dtype=torch.long), r"= \(B, 4, 5\) with B >= 1, got \(4, 5\)"),
        (torch.zeros(2, T, N, dtype=torch.long), r"= \(B, 4, 5\) with B >= 1, got \(2, 3, 5\)"),
        (torch.zeros(2, T + 1, N + 1, dtype=torch.long), r"got \(2, 4, 6\)"),
        (torch.zeros(0, T + 1, N, dtype=torch.long), r"got \(0, 4, 5\)"),
        (torch.zeros(2, T + 1, N), "integer token ids"),
        (torch.full((1, T + 1, N), V, dtype=torch.long), r"ids must lie in \[0, vocab_size=23\)"),
    ],
)
def test_rejects_bad_inputs(bad, message):
    model = tiny_model()
    with pytest.raises(ValueError, match=message):
        model.training_step(bad)
    with pytest.raises(ValueError, match=message):
        model.score(bad)


def test_predict_next_rejects_full_window():
    with pytest.raises(ValueError, match=r"token_ids: expected shape \(B, T, N\) = \(B, 3, 5\)"):
        tiny_model().predict_next(torch.ones(1, T + 1, N, dtype=torch.long))


# ---------------------------------------------------------------------------------------------------------------
# Packing and padding
# ---------------------------------------------------------------------------------------------------------------


def test_packing_strips_padding_without_separator():
    model = tiny_model()
    x = torch.tensor(
        [
            [[3, 4, 0, 0, 0], [0, 0, 0, 0, 0], [5, 6, 7, 0, 0], [8, 9, 0, 0, 0]],
            [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10], [11, 0, 0, 0, 0], [0, 0, 0, 0, 0]],
        ]
    )
    bos, eos = V, V + 1
    left = model.pack(x, side="left")
    long_row = [bos, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]
    assert left.prefix[1].tolist() == long_row
    assert left.prefix[0].tolist() == [0] * 6 + [bos, 3, 4, 5, 6, 7]
    assert left.prefix_mask[0].tolist() == [0] * 6 + [1] * 6
    right = model.pack(x, side="right")
    assert right.prefix[0].tolist() == [bos, 3, 4, 5, 6, 7] + [0] * 6
    assert right.prefix_mask[0].tolist() == [1] * 6 + [0] * 6
    assert left.gold_len.tolist() == [3, 1]
    assert left.gold[0, :3].tolist() == [8, 9, eos] and left.gold[1, 0].item() == eos
    # no padding id inside the live part, no separator beyond the sentences' own tokens
    assert not bool(((left.prefix == 0) & (left.prefix_mask == 1)).any())


def test_padding_side_and_batching_do_not_change_rows():
    model = tiny_model().eval()
    x = ragged_windows()
    left, right = model.pack(x, "left"), model.pack(x, "right")
    out_left = model.forward_last(left.prefix, left.prefix_mask)
    out_right = model.forward_last(right.prefix, right.prefix_mask)
    torch.testing.assert_close(out_left, out_right, rtol=0, atol=1e-10)
    for b in range(x.shape[0]):
        alone = model.pack(x[b : b + 1])
        assert bool(alone.prefix_mask.all())  # a row alone has no batch padding
        torch.testing.assert_close(model.forward_last(alone.prefix), out_left[b : b + 1], rtol=0, atol=1e-10)
    # the whole free-running pass as well: per-row losses and tokens equal the rows run alone
    batch = model.free_run(left, n_steps=N + 1, return_logits=True)
    for b in range(x.shape[0]):
        one = model.free_run(model.pack(x[b : b + 1]), n_steps=N + 1, return_logits=True)
        assert torch.equal(one.tokens[0], batch.tokens[b])
        torch.testing.assert_close(one.logits[0], batch.logits[b], rtol=0, atol=1e-10)


# ---------------------------------------------------------------------------------------------------------------
# Free-running objective (section 7.4)
# ---------------------------------------------------------------------------------------------------------------


def test_free_running_loss_and_grads_match_naive_recomputation():
    model = tiny_model(seed=3).train()  # dropout 0: the two computations are the same function
    x = ragged_windows(seed=4)
    loss = model.training_step(x)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()

    sel_sum, count = torch.zeros(()), 0
    for b in range(x.shape[0]):
        sel, _, fed = naive_free_run(model, x[b])
        sel_sum = sel_sum + sel
        count += len(fed)
    naive = sel_sum / count
    naive.backward()
    torch.testing.assert_close(loss, naive, rtol=1e-10, atol=1e-12)
    for n, p in model.named_parameters():
        torch.testing.assert_close(grads[n], p.grad, rtol=1e-8, atol=1e-12, msg=lambda m, n=n: f"{n}: {m}")


def test_argmax_feedback_is_the_models_own_detached_token():
    model = tiny_model(seed=5).train()
    x = ragged_windows(seed=6)
    packed = model.pack(x)
    res = model.free_run(packed, n_steps=int(packed.gold_len.max()), return_logits=True)
    assert res.logits is not None and res.logits.requires_grad
    assert not res.tokens.requires_grad and res.tokens.dtype == torch.long
    assert torch.equal(res.tokens, res.logits.argmax(dim=-1))
    # The untrained model misses gold at step 0; step 1 must condition on its own token, not on gold.
    b = next(b for b in range(x.shape[0]) if int(res.tokens[b, 0]) != int(packed.gold[b, 0]))
    alone = model.pack(x[b : b + 1]).prefix
    own = model.forward_last(torch.cat([alone, res.tokens[b : b + 1, :1]], dim=1))
    gold = model.forward_last(torch.cat([alone, packed.gold[b : b + 1, :1]], dim=1))
    torch.testing.assert_close(res.logits[b, 1], own[0], rtol=0, atol=1e-10)
    assert not torch.allclose(res.logits[b, 1], gold[0])
    # Nothing flows back through the token: the gradient equals that of a pass with the tokens as constants.
    (res.loss_sum / res.loss_count).backward()
    g_loop = model.transformer.wte.weight.grad.clone()
    model.zero_grad()
    sel = sum(naive_free_run(model, x[i])[0] for i in range(x.shape[0]))
    (sel / res.loss_count).backward()
    torch.testing.assert_close(g_loop, model.transformer.wte.weight.grad, rtol=1e-8, atol=1e-12)


def test_inactive_rows_do_not_contribute():
    model = tiny_model(seed=7).eval()
    x = ragged_windows(seed=8)
    packed = model.pack(x)
    assert len(set(packed.gold_len.tolist())) > 1  # rows really finish at different steps
    batch = model.free_run(packed, n_steps=int(packed.gold_len.max()))
    sums = [naive_free_run(model, x[b]) for b in range(x.shape[0])]
    torch.testing.assert_close(batch.loss_sum, sum(s[0] for s in sums), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(batch.content_sum, sum(s[1] for s in sums), rtol=1e-10, atol=1e-12)
    assert int(batch.loss_count) == int(packed.gold_len.sum())
    # Extra steps after every span is exhausted add nothing (rows 0 and 1 have spans of 4 and 2 tokens).
    short = model.pack(x[:2])
    assert short.gold_len.tolist() == [4, 2]
    exact = model.free_run(short, n_steps=4)
    longer = model.free_run(short, n_steps=N + 1)
    torch.testing.assert_close(longer.loss_sum, exact.loss_sum, rtol=0, atol=0)
    assert int(longer.loss_count) == int(exact.loss_count) == 6


def test_eos_counts_in_selection_loss_but_not_in_content_ce():
    model = tiny_model(seed=9).eval()
    x = ragged_windows(seed=10)
    packed = model.pack(x)
    with torch.no_grad():
        res = model.free_run(packed, n_steps=int(packed.gold_len.max()), return_logits=True)
    B = x.shape[0]
    assert int(res.loss_count) == int(packed.gold_len.sum())
    assert int(res.content_count) == int((x[:, T] != 0).sum()) == int(res.loss_count) - B
    eos_steps = packed.gold_len - 1
    eos_ce = F.cross_entropy(res.logits[torch.arange(B), eos_steps], torch.full((B,), V + 1), reduction="sum")
    torch.testing.assert_close(res.loss_sum - res.content_sum, eos_ce, rtol=1e-10, atol=1e-12)
    s = model.score(x.clone())
    assert s["selection_count"] == s["last_tokens"] + B
    assert s["last_tokens"] == float((x[:, T] != 0).sum())
    assert s["selection_loss_sum"] == pytest.approx(float(res.loss_sum), rel=1e-9)
    assert s["last_ce_sum"] == pytest.approx(float(res.content_sum), rel=1e-9)
    loss = model.training_step(x)
    assert float(loss.detach()) == pytest.approx(s["selection_loss_sum"] / s["selection_count"], rel=1e-9)


# ---------------------------------------------------------------------------------------------------------------
# Greedy decoding
# ---------------------------------------------------------------------------------------------------------------


def always_predict(model: BaselineModel, token: int) -> BaselineModel:
    """Make the readout constant: ln_f outputs its bias e_0, and only `token` has weight on dimension 0."""
    with torch.no_grad():
        model.transformer.ln_f.weight.zero_()
        model.transformer.ln_f.bias.zero_()
        model.transformer.ln_f.bias[0] = 1.0
        model.transformer.wte.weight[:, 0] = 0.0
        model.transformer.wte.weight[token, 0] = 10.0
    return model.eval()


def test_greedy_decoding_stops_at_eos():
    model = always_predict(tiny_model(), token=V + 1)  # [EOS] at once
    x = ragged_windows()
    ids, state = model.predict_next(x[:, :T])
    assert state is None and ids.shape == (4, N) and bool((ids == 0).all())
    empty = x.clone()
    empty[:, T] = 0  # gold S(T) is empty: the decoded empty string is an exact match
    s = model.score(empty)
    assert s["exact_sentences"] == 4 and s["last_tokens"] == 0 and s["selection_count"] == 4
    packed = model.pack(empty)
    res = model.free_run(packed, n_steps=N, stop_when_done=True)
    assert res.tokens.shape == (4, 1)  # stopped after the first step
    s = model.score(x)
    assert s["exact_sentences"] == 0 and s["last_correct"] == 0


def test_greedy_decoding_stops_after_n_content_tokens():
    c = 7
    model = always_predict(tiny_model(), token=c)  # never [EOS]
    x = ragged_windows()
    ids, _ = model.predict_next(x[:, :T])
    assert ids.tolist() == [[c] * N] * 4
    x[:, T] = c  # gold S(T) = N copies of c
    x[1, T, 2:] = 0  # row 1: gold is [c, c], the decoded string is longer
    s = model.score(x)
    assert s["exact_sentences"] == 3
    assert s["last_correct"] == 3 * N + 2 and s["last_tokens"] == 3 * N + 2


def test_cached_decoding_equals_uncached_decoding():
    model = tiny_model(seed=11).eval()
    packed = model.pack(ragged_windows(seed=12))
    cached = model.free_run(packed, n_steps=N + 1, use_cache=True, return_logits=True)
    plain = model.free_run(packed, n_steps=N + 1, use_cache=False, return_logits=True)
    assert torch.equal(cached.tokens, plain.tokens)
    torch.testing.assert_close(cached.logits, plain.logits, rtol=0, atol=1e-10)
    torch.testing.assert_close(cached.loss_sum, plain.loss_sum, rtol=1e-12, atol=1e-12)


def test_overfits_one_window_and_decodes_it():
    torch.manual_seed(0)
    model = BaselineModel(tiny_config(d_x=8, d_t=4, n_layers=1))
    x = ragged_windows()[:2]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    model.train()
    first = float(model.training_step(x).detach())
    for _ in range(60):
        opt.zero_grad()
        loss = model.training_step(x)
        loss.backward()
        opt.step()
    assert float(loss.detach()) < 0.05 * first
    model.eval()
    ids, _ = model.predict_next(x[:, :T])
    gold = x[:, T].clone()
    assert torch.equal(ids, gold)
    assert model.score(x)["exact_sentences"] == 2


# ---------------------------------------------------------------------------------------------------------------
# Files and sizes
# ---------------------------------------------------------------------------------------------------------------


def test_save_load_gives_identical_outputs(tmp_path):
    model = tiny_model(seed=13, dtype=torch.float32, dropout=0.1).eval()
    x = ragged_windows(seed=14)
    model.save_pretrained(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors"]
    raw = json.loads((tmp_path / "config.json").read_text())
    assert raw["semworld_model"] == "baseline" and raw["vocab_size"] == V
    loaded = BaselineModel.from_pretrained(tmp_path).eval()
    assert loaded.config == model.config
    for (n1, p1), (n2, p2) in zip(model.state_dict().items(), loaded.state_dict().items(), strict=True):
        assert n1 == n2 and torch.equal(p1, p2)
    assert model.score(x) == loaded.score(x)
    assert torch.equal(model.predict_next(x[:, :T])[0], loaded.predict_next(x[:, :T])[0])
    packed = model.pack(x)
    torch.testing.assert_close(
        model.forward_last(packed.prefix, packed.prefix_mask),
        loaded.forward_last(packed.prefix, packed.prefix_mask),
        rtol=0,
        atol=0,
    )


def test_from_pretrained_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        BaselineModel.from_pretrained(tmp_path)
    tiny_model().save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        BaselineModel.from_pretrained(tmp_path)
    tiny_model().save_pretrained(tmp_path)
    raw = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**raw, "semworld_model": "four_tensor"}))
    with pytest.raises(ValueError, match="semworld_model is 'four_tensor', not 'baseline'"):
        BaselineModel.from_pretrained(tmp_path)


# Table 5 of the paper: |V| = 36,711 (+[BOS], [EOS]), d_x = 64, d_t = 32, N = 16, T = 4.
# GPT-2 adds a learned position table of n_positions * d = (1 + 4*16 + 16) * 2048 = 165,888 parameters that the
# paper's count does not contain; without it both counts are within 0.1M of the paper.
WPE = 81 * 2048


@pytest.mark.parametrize("layers, paper, exact", [(2, 175.9e6, 176_074_752), (3, 226.2e6, 226_433_024)])
def test_paper_parameter_counts(layers, paper, exact):
    cfg = BaselineConfig(vocab_size=36711, d_x=64, d_t=32, n_heads=4, n_layers=layers, N=16, T=4)
    with torch.device("meta"):
        model = BaselineModel(cfg)
    total = sum(p.numel() for p in model.parameters())
    assert total == exact
    assert model.transformer.wpe.weight.numel() == WPE
    assert abs(total - WPE - paper) <= 0.1e6
    assert count_parameters(cfg) == total and count_parameters(cfg, include_positions=False) == total - WPE
    # the head count does not change the baseline's size (section 7.3)
    with torch.device("meta"):
        h2 = BaselineModel(
            BaselineConfig(vocab_size=36711, d_x=64, d_t=32, n_heads=2, n_layers=layers, N=16, T=4)
        )
    assert sum(p.numel() for p in h2.parameters()) == total
