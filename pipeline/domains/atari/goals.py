"""The named goals each Atari game registers for planning (`semworld plan --goal "return the ball"`).

Each judges a forecast: states[0] is the current state's fields, states[1:] the forecast's (None where a
forecast state does not parse), actions[j] the action after states[j]. A cost is 0 exactly when the goal is
reached within the forecast, and otherwise says how far it is, so that a search prefers the near misses: in
Pong, how far the paddle is from the ball's line where the ball comes closest; in Freeway, how far the chicken
still has to go. Positions are in state units (RAM // 4).
"""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.goals import Fields, GoalPredicate

PADDLE_X = 47  # the ball's x where the player's (right) paddle sends it back
PADDLE_MIDDLE = 2  # ball y - paddle y at the paddle's middle
# ball y - paddle y where the paddle can send the ball back: measured in the emulator over 40 games of the
# recording policy, the 239 returns met the paddle at -1..5 (all but one), the misses at <= -1 or >= 4.
HIT = range(-1, 6)
MISS = 100.0  # a point lost inside the forecast
ROAD_TOP = 44  # the chicken's y at the far side of the road
CROSSING_SLACK = 2  # a crossing: the chicken within this of the top, then within this of its start
# Measured in the emulator over 12 games (604 knock-backs): with the chicken at y = 3 + 4 i .. 6 + 4 i it is in lane
# i, and a knock-back starts on 19-53% of the steps at which that lane's car is at x = 10..13, on at most 4% of
# the steps at any other x.
LANES, LANE_HEIGHT = range(3, 43), 4
CAR_AT_CHICKEN = range(10, 14)


def _rose(states: Sequence[Fields | None], field: str) -> int | None:
    """The forecast index (1..) at which `field` first rises above its current value, None if it does not."""
    now = states[0].get(field) if states[0] else None
    for j, s in enumerate(states[1:], start=1):
        if now is not None and s is not None and s.get(field) is not None and s[field] > now:
            return j
    return None


def _misalignment(s: Fields) -> float:
    """How far the ball's line is from the middle of the paddle in state s, in state units."""
    return abs(s["ball y"] - s["player"] - PADDLE_MIDDLE)


def _gaps(states: Sequence[Fields | None]) -> list[float]:
    """The paddle's misalignment at every forecast step with the ball in play."""
    return [_misalignment(s) for s in states[1:] if s is not None and s.get("ball y") is not None]


def _returned(states: Sequence[Fields | None]) -> bool:
    """Whether the ball turns back from the player's paddle within the states: x rising, then falling there,
    with the paddle at the ball's line where it turns (in HIT). A forecast that turns the ball with the paddle
    elsewhere is not believed: the predictor does that now and then near the walls, and a planner that trusts
    it moves the paddle away from the ball."""
    xs = [s.get("ball x") if s else None for s in states]
    for j in range(1, len(xs) - 1):
        a, b, c = xs[j - 1 : j + 2]
        if None not in (a, b, c) and b >= PADDLE_X - 1 and a < b and c < b:  # type: ignore[operator]
            s = states[j]
            assert s is not None
            if (
                s.get("ball y") is not None
                and s.get("player") is not None
                and s["ball y"] - s["player"] in HIT
            ):
                return True
    return False


def return_the_ball(states: Sequence[Fields | None], actions: Sequence[str]) -> float:
    """0 when the paddle sends the ball back in the forecast; a lost point costs MISS (more the sooner); else 1 +
    the paddle's mean distance from the ball's line at the forecast steps: a paddle that stays on the line all
    along is there when the ball arrives, and it corrects its course every step instead of trusting a long
    forecast of where they will meet."""
    lost = _rose(states, "score enemy")
    if lost is not None:
        return MISS + len(states) - lost
    if _returned(states):
        return 0.0
    gaps = _gaps(states)
    if not gaps:  # between points: wait near the middle
        last = next((s for s in reversed(states) if s is not None), None) or {}
        return 1.0 + 0.1 * abs((last.get("player") or 0) - 28)
    return 1.0 + sum(gaps) / len(gaps)


def score_a_point(states: Sequence[Fields | None], actions: Sequence[str]) -> float:
    """0 when the player's score rises in the forecast; else 1 + a tenth of `return the ball`'s cost (a point is
    won by returning balls until the computer misses one)."""
    if _rose(states, "score player") is not None:
        return 0.0
    return 1.0 + 0.1 * return_the_ball(states, actions)


def follow_the_ball(states: Sequence[Fields | None], actions: Sequence[str]) -> float:
    """0 when the ball's line stays within one unit of the paddle's middle at every forecast step the ball is in
    play; else the mean distance."""
    gaps = _gaps(states)
    if not gaps or max(gaps) <= 1:
        return 0.0
    return sum(gaps) / len(gaps)


def _crossed(states: Sequence[Fields | None]) -> bool:
    """Whether the chicken reaches the far side within the forecast: the score rises, or the chicken goes from the
    top of the road straight back to its start (how the game restarts it after a crossing; a car knocks it back a
    few units only). The second is what a forecast may show past the scores the predictor was trained on (it
    restarts the chicken but keeps the score), where a goal that waited for the score would keep the chicken at
    the top for good."""
    if _rose(states, "score") is not None:
        return True
    ys = [s.get("chicken") if s is not None else None for s in states]
    return any(
        a is not None and b is not None and a >= ROAD_TOP - CROSSING_SLACK and b <= CROSSING_SLACK
        for a, b in zip(ys, ys[1:])
    )


def cross_the_road(states: Sequence[Fields | None], actions: Sequence[str]) -> float:
    """0 when the chicken reaches the far side in the forecast (`_crossed`); else 1 + the mean share of the road
    left over the forecast states, so that of two plans that end as high, the one that climbs first wins (a plan
    that waits to climb is re-planned the next step, and waits again)."""
    if _crossed(states):
        return 0.0
    heights = [s.get("chicken") or 0 for s in states if s is not None and s.get("chicken") is not None]
    if not heights:
        return 2.0
    return 1.0 + sum(ROAD_TOP - h for h in heights) / (len(heights) * ROAD_TOP)


def in_the_way(s: Fields) -> bool:
    """Whether a car is at the chicken in state s: the chicken is in a lane (its y in LANES, four units a lane,
    lane 0 the bottom one) whose car's x is in CAR_AT_CHICKEN, the columns where cars knock the chicken back."""
    y = s.get("chicken")
    if y is None or y not in LANES:
        return False
    car = s.get(f"cars {(y - LANES.start) // LANE_HEIGHT}")
    return car is not None and car in CAR_AT_CHICKEN


def avoid_the_cars(states: Sequence[Fields | None], actions: Sequence[str]) -> float:
    """The forecast steps at which a car is in the chicken's way (`in_the_way`) or knocks it back (it goes down
    without 'down'). The first is read from where the forecast puts the chicken and the cars, which the predictor
    forecasts well; the second, from the chicken's own forecast, in which the predictor seldom shows a knock-back
    coming, so that a planner looking for that alone walks into the cars."""
    hits = sum(in_the_way(s) for s in states[1:] if s is not None)
    for j in range(1, len(states)):
        before, after = states[j - 1], states[j]
        if before is None or after is None or before.get("chicken") is None or after.get("chicken") is None:
            continue
        drop = before["chicken"] - after["chicken"]
        action = actions[j - 1] if j - 1 < len(actions) else None
        if 0 < drop < ROAD_TOP // 2 and action != "down":  # a crossing resets it to the bottom: no hit
            hits += 1
    return float(hits)


GOALS: dict[str, tuple[GoalPredicate, ...]] = {
    "pong": (
        GoalPredicate(
            "return the ball", "the player's paddle sends the ball back, no point lost", return_the_ball
        ),
        GoalPredicate("score a point", "the player's score rises", score_a_point),
        GoalPredicate(
            "follow the ball", "the paddle stays on the ball's line while it is in play", follow_the_ball
        ),
    ),
    "freeway": (
        GoalPredicate(
            "cross the road",
            "the chicken reaches the far side (and starts again at the bottom)",
            cross_the_road,
        ),
        GoalPredicate("avoid the cars", "no car in the chicken's way, none knocks it back", avoid_the_cars),
    ),
}


def goals_of(game: str) -> dict[str, GoalPredicate]:
    """The predicates of `game` by name."""
    return {g.name: g for g in GOALS.get(game, ())}
