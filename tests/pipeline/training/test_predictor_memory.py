"""Training a tensor-memory predictor: whole clips in order, truncated BPTT, resume, CLI flags, bad knobs."""

import json

import pytest
import torch

from models.tensor_memory import TensorMemoryConfig
from pipeline import cli
from pipeline.data import cap_clips, clip_windows, make_windows, read_sequences
from pipeline.tokenizer import StateTokenizer
from pipeline.training.args import TrainArgs
from pipeline.training.predictor import CHECKPOINT_DIR, build_model, train_predictor
from pipeline.training.steps import SegmentModule, train_clip_batch
from pipeline.utils import UserError
from tests.pipeline.training.conftest import (
    assert_resume_equals_uninterrupted,
    eval_json,
    tiny_run,
    train_cli,
)

MEM = dict(memory={"mem_channels": 4, "mem_shape": (2, 2, 2), "chunk_size": 8}, bptt_windows=2)


def test_clip_windows_are_whole_sequences_in_order(toy_jsonl):
    seqs = read_sequences(toy_jsonl)
    tok = StateTokenizer.build(s for q in seqs for s in q.states)
    ws = make_windows(seqs, tok, 3, 8)
    clips = clip_windows(ws)
    assert sum(c.shape[0] for c in clips) == len(ws)
    for c in clips:  # consecutive windows overlap by T states: window j+1 is window j slid by one
        assert torch.equal(c[1:, :-1], c[:-1, 1:])
    capped = cap_clips(ws, 20, seed=0)
    assert 20 <= len(capped) < 20 + 5  # whole clips (at most 4 windows each) until the cap is reached
    assert sum(c.shape[0] for c in clip_windows(capped)) == len(capped)


def test_segment_equals_window_by_window_and_truncation_steps(toy_jsonl):
    seqs = read_sequences(toy_jsonl)
    tok = StateTokenizer.build(s for q in seqs for s in q.states)
    clips = clip_windows(make_windows(seqs, tok, 3, 8))
    torch.manual_seed(0)
    args = TrainArgs(data=str(toy_jsonl), preset="tiny", out="unused", dropout=0.0, **MEM)
    model = build_model("four_tensor", "tiny", tok, 0.0, memory=args.memory)
    group = sorted(clips[:3], key=lambda c: -c.shape[0])
    K = max(c.shape[0] for c in group)
    windows = torch.zeros(3, K, 4, 8, dtype=torch.long)
    for b, c in enumerate(group):
        windows[b, : c.shape[0]] = c
    lengths = [c.shape[0] for c in group]
    with torch.no_grad():
        loss_sum, count, _ = SegmentModule(model)(windows, lengths, None)
        ref_sum, ref_count = 0.0, 0
        for c in group:  # each clip alone, window by window, state carried
            state = None
            for j in range(c.shape[0]):
                ls, cnt, state = model.window_loss(c[j : j + 1], state)
                ref_sum, ref_count = ref_sum + float(ls), ref_count + int(cnt)
    assert int(count) == ref_count
    assert float(loss_sum) == pytest.approx(ref_sum, rel=1e-5)
    # One optimizer step per bptt_windows windows.
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    steps = []
    opt.step = lambda *a, **k: steps.append(1)  # type: ignore[method-assign]
    _, seen = train_clip_batch(SegmentModule(model), opt, group, bptt_windows=2, device="cpu")
    assert seen == sum(lengths) and len(steps) == -(-max(lengths) // 2)


def test_memory_resume_after_kill_equals_uninterrupted(tmp_path, toy_jsonl):
    run = tiny_run(toy_jsonl, epochs=2, batch_size=4, seed=3, **MEM)
    _, weights = assert_resume_equals_uninterrupted(tmp_path, run)
    assert any(k.startswith("memory.") for k in weights)
    # A memory run is a different run from one without memory: resuming across that is refused by name.
    with pytest.raises(UserError, match="memory"):
        train_predictor(TrainArgs(out=str(tmp_path / "cut"), **{**run, "memory": None}))


def test_cli_train_predictor_memory_flags(tmp_path, toy_jsonl, capsys):
    out = tmp_path / "m"
    tiny = [
        "--preset",
        "tiny",
        "--epochs",
        "1",
        "--batch-size",
        "4",
        "--val-fraction",
        "0.2",
        "--no-progress",
    ]
    memory = ["--memory", "--mem-channels", "4", "--mem-shape", "2", "3", "2", "--chunk-size", "4"]
    train_cli(toy_jsonl, out, *tiny, *memory, "--sigma-scale", "0.5", "--bptt-windows", "2")
    cfg = json.loads((out / "config.json").read_text())["memory"]
    assert cfg["mem_shape"] == [2, 3, 2] and cfg["chunk_size"] == 4 and cfg["sigma_scale"] == 0.5
    summary = json.loads((out / "training_summary.json").read_text())
    assert summary["args"]["memory"] == cfg and summary["args"]["bptt_windows"] == 2
    # `eval predictor` scores a memory model's clips in order, so it reproduces the recorded validation number.
    result = eval_json(capsys, out, toy_jsonl, split="val")
    assert result["L_S(T)"] == pytest.approx(summary["best"]["val_last_ce"], abs=1e-5)


def test_memory_flags_make_the_config_only_with_memory():
    from pipeline.cli.flags import dataclass_from_namespace

    def parse(*extra):
        argv = ["train", "predictor", "--data", "d.jsonl", "--out", "o", "--preset", "tiny", *extra]
        return dataclass_from_namespace(TrainArgs, cli.build_parser().parse_args(argv))

    assert parse("--mem-channels", "4").memory is None
    knobs = parse("--memory", "--mem-channels", "4", "--memory-gate-init", "0", "--mem-shape", "2", "3", "2")
    assert knobs.memory == TensorMemoryConfig(d_emb=32, mem_channels=4, gate_init=0.0, mem_shape=(2, 3, 2))


@pytest.mark.parametrize(
    "kw,name",
    [
        ({"memory": {"chunk_size": 0}}, "chunk-size"),
        ({"memory": {"sigma_scale": 0.0}}, "sigma-scale"),
        ({"memory": {"mem_shape": (2, 0, 2)}}, "mem-shape"),
        ({"memory": {"gate_init": float("nan")}}, "memory-gate-init"),
        ({"memory": {"channels": 4}}, "--memory: TensorMemoryConfig: unknown field"),
        ({"memory": True}, "--memory: expected None, a dict"),
        ({"memory": TensorMemoryConfig(d_emb=8)}, "d_emb = d_x \\* d_t = 32"),
        ({"bptt_windows": 0}, "bptt-windows"),
        ({"model": "baseline"}, "--memory"),
    ],
)
def test_bad_memory_arguments_are_refused_by_name(kw, name, toy_jsonl):
    with pytest.raises(UserError, match=name):
        TrainArgs(data=str(toy_jsonl), preset="tiny", out="x", **{**MEM, **kw})


def test_init_from_a_model_without_memory(tmp_path, toy_jsonl):
    run = tiny_run(toy_jsonl, batch_size=4)
    plain = train_predictor(TrainArgs(out=str(tmp_path / "plain"), **run))["four_tensor"]
    args = TrainArgs(out=str(tmp_path / "mem"), init_from=str(plain.out), **run, **MEM)
    tok = StateTokenizer.from_file(plain.out)
    from pipeline.training.warmstart import init_weights

    model = build_model("four_tensor", "tiny", tok, memory=args.memory)
    fresh_memory = {k: v.clone() for k, v in model.state_dict().items() if k.startswith("memory")}
    init_weights(model, plain.out)
    saved = torch.load(plain.out / CHECKPOINT_DIR / "last.pt", weights_only=False)["model"]
    state = model.state_dict()
    assert all(torch.equal(state[k], saved[k]) for k in saved)  # every shared weight copied
    assert all(torch.equal(state[k], v) for k, v in fresh_memory.items())  # the memory keeps its own init
    assert train_predictor(args)["four_tensor"].history  # and trains from there
    with pytest.raises(UserError, match="init-from"):
        init_weights(model, tmp_path)


def test_memory_segment_last_only_scores_s_t_alone(toy_jsonl):
    # --target-slices last with --memory: the segment loss counts only the targets of slice T, and equals the CE of
    # those slots taken from the full window's logits with the same state carried.
    seqs = read_sequences(toy_jsonl)
    tok = StateTokenizer.build(s for q in seqs for s in q.states)
    clip = clip_windows(make_windows(seqs, tok, 3, 8))[0]  # (K, T+1, N)
    torch.manual_seed(0)
    args = TrainArgs(
        data=str(toy_jsonl), preset="tiny", out="unused", dropout=0.0, target_slices="last", **MEM
    )
    model = build_model("four_tensor", "tiny", tok, 0.0, memory=args.memory)
    model.eval()
    lengths = [clip.shape[0]]
    with torch.no_grad():
        loss_all, count_all, _ = SegmentModule(model)(clip[None], lengths, None)
        loss_last, count_last, _ = SegmentModule(model, last_only=True)(clip[None], lengths, None)
        want_sum, want_count, state = 0.0, 0, None
        for j in range(clip.shape[0]):
            window = clip[j : j + 1]
            X_norm, after = model.memory_hidden_states(window[:, :-1], state)
            gold = window[0, -1]  # (N,) the state after the window
            logits = X_norm[0, :, -1].flatten(-2) @ model.readout_matrix()  # (N, V) slot (x, T-1)
            keep = gold != model.config.padding_idx
            want_sum += float(torch.nn.functional.cross_entropy(logits[keep], gold[keep], reduction="sum"))
            want_count += int(keep.sum())
            state = after
    assert int(count_last) == want_count < int(count_all)
    assert float(loss_last) == pytest.approx(want_sum, rel=1e-5)


def _tiny_memory_model(toy_jsonl):
    seqs = read_sequences(toy_jsonl)
    tok = StateTokenizer.build(s for q in seqs for s in q.states)
    clips = clip_windows(make_windows(seqs, tok, 3, 8))
    torch.manual_seed(0)
    args = TrainArgs(
        data=str(toy_jsonl), preset="tiny", out="unused", dropout=0.0, target_slices="last", **MEM
    )
    return build_model("four_tensor", "tiny", tok, 0.0, memory=args.memory), clips


def test_memory_rollout_windows_are_the_models_own_continuation(toy_jsonl):
    # Scheduled sampling on whole clips: with prob 1 and K = 1, window j's last context state is what the model
    # predicts from window j-1 with the memory as it stood before window j-1; the rest of the window, its target,
    # the first window and the padding after a short row stay as they were.
    from pipeline.data import stack_clips
    from pipeline.training.steps import rollout_clip_windows

    model, clips = _tiny_memory_model(toy_jsonl)
    group = sorted(clips[:3], key=lambda c: -c.shape[0])
    windows, lengths = stack_clips(group)
    T = windows.shape[2] - 1
    torch.manual_seed(1)
    out = rollout_clip_windows(model, windows, lengths, K=1, prob=1.0)
    assert model.training  # the mode is given back
    model.eval()
    changed = 0
    for b, L in enumerate(lengths):
        state, prev_pred = None, None
        for j in range(L):
            window = windows[b : b + 1, j, :T]  # (1, T, N) true context
            if prev_pred is not None:
                assert torch.equal(out[b, j, : T - 1], windows[b, j, : T - 1])
                assert torch.equal(out[b, j, T - 1], prev_pred[0])
                changed += int(not torch.equal(out[b, j], windows[b, j]))
            assert torch.equal(out[b, j, T], windows[b, j, T])  # the target is the true state
            prev_pred, state = model.predict_next(window, state)
        assert torch.equal(out[b, 0], windows[b, 0]) and torch.equal(out[b, L:], windows[b, L:])
    assert changed > 0  # an untrained model's predictions are not the truth
    torch.manual_seed(1)
    assert torch.equal(rollout_clip_windows(model, windows, lengths, K=2, prob=0.0), windows)


def test_memory_training_with_rollouts_runs_and_differs(tmp_path, toy_jsonl):
    run = tiny_run(toy_jsonl, val_fraction=0.05, seed=0, threads=1, target_slices="last", **MEM)
    plain = train_predictor(TrainArgs(out=str(tmp_path / "plain"), **run))["four_tensor"]
    rolled = train_predictor(
        TrainArgs(out=str(tmp_path / "rolled"), rollout_steps=2, rollout_prob=1.0, **run)
    )["four_tensor"]
    assert rolled.history and json.loads((tmp_path / "rolled" / "config.json").read_text())["memory"]
    assert rolled.history[0]["train_loss"] != plain.history[0]["train_loss"]


def test_memory_gate_init_and_min_sigma_reach_the_model_and_defaults_keep_the_fingerprint(toy_jsonl):
    base = TrainArgs(data=str(toy_jsonl), preset="tiny", out="unused", **MEM)
    tuned = TrainArgs(
        data=str(toy_jsonl),
        preset="tiny",
        out="unused",
        **{**MEM, "memory": {**MEM["memory"], "gate_init": 0.0, "min_sigma": 0.25}},
    )
    cfg = tuned.memory
    assert cfg.gate_init == 0.0 and cfg.min_sigma == 0.25
    seqs = read_sequences(toy_jsonl)
    tok = StateTokenizer.build(s for q in seqs for s in q.states)
    model = build_model("four_tensor", "tiny", tok, 0.0, memory=cfg)
    assert all(float(torch.sigmoid(t.gate)) == 0.5 for t in model.memory_taps.values())
    assert model.memory.embedder.min_sigma == 0.25
    fp = base.fingerprint()
    assert "min_sigma" not in fp and "memory_gate_init" not in fp  # runs from before the knobs still resume
    assert tuned.fingerprint()["memory_gate_init"] == 0.0 and tuned.fingerprint()["min_sigma"] == 0.25


def test_recall_term_is_the_readout_ce_of_the_incoming_memory_and_off_by_default(toy_jsonl):
    # window_loss(previous, recall_weight): the last slice's slots read the memory as the window received it, in
    # every memory layer, and must spell `previous` through the readout; padding in previous is no target.
    model, clips = _tiny_memory_model(toy_jsonl)
    model.eval()
    clip = clips[0]  # (K, T+1, N)
    with torch.no_grad():
        _, _, state = model.window_loss(clip[0:1], None)  # window 0 writes the clip's first state
        previous = clip[0:1, 0]  # (1, N): that state
        plain, count, _ = model.window_loss(clip[1:2], state, last_only=True)
        assert torch.equal(model.window_loss(clip[1:2], state, True, previous, 0.0)[0], plain)
        empty = torch.zeros_like(previous)
        assert torch.equal(model.window_loss(clip[1:2], state, True, empty, 2.0)[0], plain)
        with_recall, count2, after = model.window_loss(clip[1:2], state, True, previous, 2.0)
        reads: list[torch.Tensor] = []
        _, want_after = model.memory_hidden_states(clip[1:2, :-1], state, reads)
        keep = previous != model.config.padding_idx
        term = sum(
            torch.nn.functional.cross_entropy(
                r[keep] @ model.readout_matrix(), previous[keep], reduction="sum"
            )
            for r in reads
        )
    assert len(reads) == len(model.memory_taps) and reads[0].shape == (1, model.config.N, model.config.d)
    assert int(count2) == int(count)  # the term adds loss, not targets
    assert float(with_recall) == pytest.approx(float(plain) + 2.0 * float(term), rel=1e-5)
    assert torch.equal(after.h, want_after.h)  # the state is the window's, recall or not


def test_recall_term_trains_the_write_of_the_window_before(toy_jsonl):
    # Its gradient reaches the writer through the state carried in from the previous window, which is the point:
    # the window loss on S(T) alone barely does.
    model, clips = _tiny_memory_model(toy_jsonl)
    clip = clips[0]
    _, _, state = model.window_loss(clip[0:1], None)
    model.zero_grad()
    reads: list[torch.Tensor] = []
    model.memory_hidden_states(clip[1:2, :-1], state, reads)
    keep = clip[0:1, 0] != model.config.padding_idx
    sum(
        torch.nn.functional.cross_entropy(r[keep] @ model.readout_matrix(), clip[0:1, 0][keep]) for r in reads
    ).backward()
    assert float(model.memory.write_proj.weight.grad.abs().sum()) > 0


class _Probe(torch.nn.Module):
    """A segment module that records the `previous` states each segment is handed, and learns nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[torch.Tensor] = []

    def forward(self, w, part, state, previous):
        from models.tensor_memory import MemoryState

        self.seen.append(previous)
        return (
            torch.zeros((), requires_grad=True),
            torch.ones(()),
            MemoryState(torch.zeros(1), torch.zeros(1)),
        )


def _handed_previous(toy_jsonl, **kw) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """What train_clip_batch (`kw`: its options) hands each window of three toy clips as `previous`, (B, K, N),
    and those clips, longest first."""
    _, clips = _tiny_memory_model(toy_jsonl)
    group = sorted(clips[:3], key=lambda c: -c.shape[0])
    probe = _Probe()
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.0)
    train_clip_batch(probe, opt, group, bptt_windows=2, device="cpu", **kw)
    return torch.cat(probe.seen, dim=1), group


def test_train_clip_batch_hands_each_window_the_state_before_it(toy_jsonl):
    from pipeline.data import stack_clips

    previous, group = _handed_previous(toy_jsonl)  # (B, K, N)
    windows, lengths = stack_clips(group)
    assert not previous[:, 0].any()  # nothing was written before a clip's first window
    for b, n in enumerate(lengths):  # window j: the clip's state j - 1, across segments; none past its end
        assert torch.equal(previous[b, 1:n], windows[b, : n - 1, 0])
        assert not previous[b, n:].any()


def test_memory_recall_weight_reaches_the_trainer_is_refused_below_zero_and_keeps_old_fingerprints(
    tmp_path, toy_jsonl
):
    with pytest.raises(UserError, match="memory-recall-weight"):
        TrainArgs(data=str(toy_jsonl), preset="tiny", out="x", memory_recall_weight=-1.0, **MEM)
    base = TrainArgs(data=str(toy_jsonl), preset="tiny", out="x", **MEM)
    assert "memory_recall_weight" not in base.fingerprint()
    run = tiny_run(toy_jsonl, batch_size=4, seed=3, target_slices="last", **MEM)
    plain = train_predictor(TrainArgs(out=str(tmp_path / "plain"), **run))["four_tensor"]
    recall = train_predictor(TrainArgs(out=str(tmp_path / "recall"), memory_recall_weight=1.0, **run))[
        "four_tensor"
    ]
    assert (
        recall.history[0]["train_loss"] > plain.history[0]["train_loss"]
    )  # the term is in the training loss
    assert (
        json.loads((tmp_path / "recall" / "training_summary.json").read_text())["args"][
            "memory_recall_weight"
        ]
        == 1.0
    )


def _probe_windows(states: list[int], T: int = 4, pad_end: int = 0) -> torch.Tensor:
    """(1, K, T+1, 2) windows of a clip of one-token states (second token the state id + 10, so that a state is a
    whole row, not one id), with pad_end all-padding windows after it (as stack_clips leaves a shorter clip)."""
    seq = torch.tensor([[s, s + 10] for s in states])  # (L, 2)
    w = torch.stack([seq[j : j + T + 1] for j in range(len(states) - T)])  # (K, T+1, 2)
    return torch.cat([w, torch.zeros(pad_end, T + 1, 2, dtype=torch.long)])[None]


def test_recall_targets_last_is_the_state_before_and_novel_holds_the_key_past_the_fillers():
    from pipeline.training.steps import recall_targets

    key, filler, cue = 5, 1, 2
    windows = _probe_windows([key] + [filler] * 7 + [cue, key, filler, filler], pad_end=2)  # (1, 10, 5, 2)
    last = recall_targets(windows, "last")[0, :, 0].tolist()
    novel = recall_targets(windows, "novel")[0, :, 0].tolist()
    assert last == [0, key] + [filler] * 6 + [0, 0]  # windows 8-9 lie past the clip's end
    # windows 1-5 no longer show the key: asked for it; window 6 shows it again (cue, key), so nothing is left
    # that only the memory holds; the end padding windows ask for nothing
    assert novel == [0, key, key, key, key, key, 0, 0, 0, 0]
    # a state is a whole row: a state sharing its first token with one in the window is still novel
    other = _probe_windows([key, filler, filler, filler, filler, filler])
    other[0, :, :, 1] = torch.tensor([[15, 11, 11, 11, 11], [99, 11, 11, 11, 11]])  # window 1 sees (1, 99)...
    assert recall_targets(other, "novel")[0, :, 0].tolist() == [0, key]
    with pytest.raises(ValueError, match="recall target"):
        recall_targets(windows, "first")


def test_front_padding_is_never_a_recall_target():
    from pipeline.training.steps import recall_targets

    windows = _probe_windows([7, 7, 3, 4, 4, 4, 4, 4])  # the first two windows stand for front padding
    windows[0, 0, :2] = 0
    windows[0, 1, :1] = 0
    assert recall_targets(windows, "novel")[0, :, 0].tolist() == [0, 0, 0, 3]
    assert recall_targets(windows, "last")[0, :, 0].tolist() == [0, 0, 0, 3]


def test_memory_recall_target_reaches_the_segments_is_refused_by_name_and_keeps_old_fingerprints(toy_jsonl):
    from pipeline.data import stack_clips
    from pipeline.training.steps import recall_targets

    with pytest.raises(UserError, match="memory-recall-target"):
        TrainArgs(data=str(toy_jsonl), preset="tiny", out="x", memory_recall_target="first", **MEM)
    base = TrainArgs(data=str(toy_jsonl), preset="tiny", out="x", **MEM)
    assert "memory_recall_target" not in base.fingerprint()
    assert (
        TrainArgs(
            data=str(toy_jsonl), preset="tiny", out="x", memory_recall_target="novel", **MEM
        ).fingerprint()["memory_recall_target"]
        == "novel"
    )
    previous, group = _handed_previous(toy_jsonl, recall_target="novel")
    windows, _ = stack_clips(group)
    assert torch.equal(previous, recall_targets(windows, "novel"))


def _saved_tiny(tmp_path, tok, memory):
    """A 1-layer tiny 4-tensor model saved to tmp_path/one, with random (not zero) weights everywhere."""
    torch.manual_seed(1)
    model = build_model("four_tensor", "tiny", tok, memory=memory)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(tmp_path / "one")
    return model.eval()


def _two_layers(model, memory_every_n_layers=None):
    import dataclasses

    from models.four_tensor import FourTensorModel

    c = model.config
    mem = (
        c.memory
        if memory_every_n_layers is None
        else dataclasses.replace(c.memory, memory_every_n_layers=memory_every_n_layers)
    )
    return FourTensorModel(dataclasses.replace(c, n_layers=c.n_layers + 1, memory=mem))


@pytest.mark.parametrize("at", [0, 1])
def test_grow_layer_inserts_an_identity_layer(tmp_path, toy_jsonl, at):
    from pipeline.training.warmstart import init_weights

    tok = StateTokenizer.build(s for q in read_sequences(toy_jsonl) for s in q.states)
    one = _saved_tiny(tmp_path, tok, None)
    two = _two_layers(one)
    init_weights(two, tmp_path / "one", grow_layer=at)
    two.eval()
    old = 1 - at  # where the saved layer went
    assert torch.equal(two.layers[old].fc1.weight, one.layers[0].fc1.weight)
    assert not two.layers[at].attention.W_V.any() and not two.layers[at].fc2.weight.any()
    assert two.layers[at].attention.W_Q.abs().sum() > 0  # queries and keys keep a random init
    ids = torch.randint(4, tok.vocab_size, (2, one.config.T, one.config.N))
    assert torch.allclose(two(ids), one(ids), atol=1e-6)  # the same function as the saved model
    two.train()
    loss = two.training_step(torch.randint(4, tok.vocab_size, (2, one.config.T + 1, one.config.N)))
    loss.backward()
    assert two.layers[at].attention.W_V.grad.abs().sum() > 0  # and the new layer learns from there


def test_grow_layer_keeps_the_memory_taps_on_the_saved_layers(tmp_path, toy_jsonl):
    from pipeline.training.warmstart import init_weights

    tok = StateTokenizer.build(s for q in read_sequences(toy_jsonl) for s in q.states)
    mem = TrainArgs(data=str(toy_jsonl), preset="tiny", out="x", **MEM).memory
    one = _saved_tiny(tmp_path, tok, mem)
    two = _two_layers(one, memory_every_n_layers=2)  # taps on layer 0 only: the saved layer stays first
    init_weights(two, tmp_path / "one", grow_layer=1)
    two.eval()
    ids = torch.randint(4, tok.vocab_size, (2, one.config.T, one.config.N))
    (a, sa), (b, sb) = one.memory_hidden_states(ids, None), two.memory_hidden_states(ids, None)
    assert torch.allclose(a, b, atol=1e-6) and torch.allclose(sa.h, sb.h, atol=1e-6)
    with pytest.raises(UserError, match="memory taps"):  # growing at 0 would move the tap onto the new layer
        init_weights(_two_layers(one, memory_every_n_layers=2), tmp_path / "one", grow_layer=0)
    with pytest.raises(UserError, match="one more layer"):
        init_weights(_two_layers(_two_layers(one)), tmp_path / "one", grow_layer=0)
    with pytest.raises(UserError, match="grow-layer needs --init-from"):
        TrainArgs(data=str(toy_jsonl), preset="tiny", out="x", grow_layer=0)
