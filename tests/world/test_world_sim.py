"""The simulator: determinism, physics invariants, predictability flags and the memory family's ambiguity."""

from collections import defaultdict

import numpy as np
import pytest

from world import FAMILIES, SCENARIOS, episode, parse_state, sequences
from world.sim import LAST, MIN_GAP, Ballistic, Drop, Linear, RowCollision

T = 4  # the predictor's window
DT = 1 / 16


def _episodes(name, n=30, seed=11, length=12):
    return [episode(name, seed, i, length) for i in range(n)]


def test_same_seed_same_sequences_and_splits_differ():
    a = sequences("all", 24, seed=5)
    assert a == sequences("all", 24, seed=5)
    assert a[:10] == sequences("all", 10, seed=5)  # a record does not depend on how many are asked for
    assert a != sequences("all", 24, seed=6)
    val = sequences("all", 24, seed=5, split="val")
    assert all(x["states"] != y["states"] for x, y in zip(a, val) if x["scenario"] not in ("collide",))
    assert [r["scenario"] for r in a[:8]] == list(SCENARIOS)
    assert set(a[0]) == {"clip", "fps", "stride", "states", "predictable", "scenario", "seed"}


def test_families_are_separable_by_name():
    assert FAMILIES["memory"] == ["blink", "hide"]
    assert FAMILIES["stochastic"] == ["appear"]
    assert {r["scenario"] for r in sequences("memory", 6, seed=0)} == {"blink", "hide"}


def test_objects_stay_in_bounds_and_apart():
    t = np.arange(11 * 16 + 1) * DT
    for name in SCENARIOS:
        for ep in _episodes(name, n=12):
            pos = ep.positions(t)  # (n, S, 2)
            assert pos.min(initial=0) >= 0 and pos.max(initial=0) <= LAST, name
            for i in range(len(pos)):
                for j in range(i + 1, len(pos)):
                    live = t >= max(ep.appear_at[i], ep.appear_at[j])
                    assert np.linalg.norm(pos[i, live] - pos[j, live], axis=-1).min() >= MIN_GAP, name


def _velocities(motion, length=12):
    t = np.arange((length - 1) * 16 + 1) * DT
    return np.diff(motion.at(t), axis=0) / DT  # (S-1, 2)


def test_wall_bounce_keeps_speed():
    bounces = 0
    for name in ("bounce", "fast", "occlude"):
        for ep in _episodes(name):
            for m in ep.motions:
                assert isinstance(m, Linear)
                v = _velocities(m)
                for axis, speed in ((0, abs(m.v_row)), (1, abs(m.v_col))):
                    flips = np.nonzero(np.sign(v[1:, axis]) * np.sign(v[:-1, axis]) < 0)[0]
                    bounces += len(flips)
                    for k in flips:  # speed just before and just after the wall is the same
                        assert abs(v[k, axis]) == pytest.approx(speed) == pytest.approx(abs(v[k + 1, axis]))
                    # Away from the walls the speed never changes.
                    assert np.allclose(np.abs(v[:, axis])[np.abs(v[:, axis]) > 0], speed)
    assert bounces > 50


def test_floor_bounce_keeps_speed_and_drops_rest():
    seen_ball = seen_drop = 0
    for ep in _episodes("gravity", n=40):
        for m in ep.motions:
            v = _velocities(m)[:, 0]
            if isinstance(m, Ballistic):
                seen_ball += 1
                flips = np.nonzero((v[:-1] > 0) & (v[1:] < 0))[0]  # falling, then rising: the floor
                assert len(flips) > 0
                for k in flips:
                    assert abs(v[k]) == pytest.approx(abs(v[k + 1]), rel=0.05)
            else:
                assert isinstance(m, Drop)
                seen_drop += 1
                rows = m.at(np.arange(12.0))[:, 0]
                assert rows[-1] == LAST and np.all(np.diff(rows) >= 0)
    assert seen_ball and seen_drop


def test_collisions_are_elastic_and_keep_order():
    for ep in _episodes("collide"):
        t = np.arange(11 * 16 + 1) * DT
        cols = ep.positions(t)[:, :, 1]  # (n, S)
        assert all(isinstance(m, RowCollision) for m in ep.motions)
        assert np.all(np.diff(cols, axis=0) >= 1 - 1e-9)  # order kept, never closer than one cell
        energy = (np.diff(cols, axis=1) / DT) ** 2  # (n, S-1)
        total = energy.sum(axis=0)
        # Between events the total kinetic energy is the same as at the start (events change it inside one
        # interval only).
        assert np.mean(np.isclose(total, total[0])) > 0.8


def test_physics_steps_follow_from_the_last_t_states():
    """In the physics families a predictable next state is a function of the last T states."""
    nexts = defaultdict(set)
    for rec in sequences("physics", 400, seed=2):
        s = rec["states"]
        for k in range(T, len(s)):
            if rec["predictable"][k]:
                nexts[(rec["scenario"], *s[k - T : k])].add(s[k])
    assert nexts and all(len(v) == 1 for v in nexts.values())


@pytest.mark.parametrize("name", FAMILIES["memory"])
def test_memory_family_is_ambiguous_from_the_last_t_states(name):
    """Two histories share their last T states, yet their next (predictable) states differ; the whole history
    since the clip started does determine them."""
    last_t, whole = defaultdict(set), defaultdict(set)
    for rec in sequences(name, 300, seed=1, length=24):
        s = rec["states"]
        for k in range(T, len(s)):
            if rec["predictable"][k]:
                last_t[tuple(s[k - T : k])].add(s[k])
                whole[tuple(s[:k])].add(s[k])
    ambiguous = {w: v for w, v in last_t.items() if len(v) > 1}
    assert ambiguous, f"{name}: every window of {T} states determined its next state"
    # e.g. four times "screen ." (is the walker coming out now, and on which side?) or four times
    # "lamp off ." (has the lamp been off for five states yet?)
    still = {w[0]: v for w, v in ambiguous.items() if len(set(w)) == 1}
    assert still and all(state in outcomes for state, outcomes in still.items())
    assert all(len(v) == 1 for v in whole.values())


def test_hide_keeps_the_walker_behind_the_screen_for_six_states():
    for ep in _episodes("hide", n=10, length=24):
        walker = ep.identities[0]
        seen = [any((o.colour, o.shape) == walker for o in parse_state(s).objects) for s in ep.states]
        runs, run = [], 0
        for visible in seen:
            if not visible:
                run += 1
            elif run:
                runs.append(run)
                run = 0
        assert runs and all(r == 6 for r in runs)


def test_blink_period_is_ten():
    for ep in _episodes("blink", n=5, length=30):
        lamp = ["lamp on" in s for s in ep.states]
        assert lamp[10:] == lamp[:-10] and sum(lamp[:10]) == 5


def test_predictable_flags():
    for rec in sequences("physics", 20, seed=4):
        assert rec["predictable"] == [False, False] + [True] * 10
    appeared = 0
    for rec in sequences("appear", 30, seed=4):
        counts = [len(parse_state(s).objects) for s in rec["states"]]
        for k in range(1, len(counts)):
            if counts[k] > counts[k - 1]:
                appeared += 1
                assert not rec["predictable"][k] and not rec["predictable"][min(k + 1, len(counts) - 1)]
        assert sum(rec["predictable"]) == len(counts) - 4
    assert appeared >= 25
    for rec in sequences("blink", 20, seed=4):
        lamp = ["lamp on" in s for s in rec["states"]]
        first = next(k for k in range(1, 12) if lamp[k] != lamp[k - 1])
        assert not any(rec["predictable"][: first + 1]) and all(rec["predictable"][first + 1 :])


def test_sequences_are_seeded_and_split_apart():
    """The same seed gives the same 200 sequences; another seed or the other split gives other ones."""
    a = sequences("all", 200, seed=0)
    assert a == sequences("all", 200, seed=0) and len(a) == 200
    assert [r["states"] for r in a] != [r["states"] for r in sequences("all", 200, seed=1)]
    assert [r["states"] for r in a] != [r["states"] for r in sequences("all", 200, seed=0, split="test")]
