"""The Atari games' named goals (what a plan aims at) and the tallies that score a closed-loop game from RAM."""

import numpy as np
import pytest

from pipeline.domain import get_domain
from pipeline.domains.atari.goals import MISS
from pipeline.domains.atari.tally import FreewayTally, PongTally
from pipeline.goals import parse_goal, state_fields

PONG, FREEWAY = get_domain("pong"), get_domain("freeway")


def cost(domain, goal: str, states: list[str], actions: list[str] | None = None) -> float:
    parsed = [state_fields(domain, s) for s in states]
    return parse_goal(goal, domain).cost(parsed[0], parsed[1:], actions or ["stay"] * (len(states) - 1))


def pong(x, y, player, lost=0, won=0):
    ball = "none" if x is None else f"{x} {y}"
    return f"ball {ball} player {player} enemy 30 score {won} {lost} ."


def test_return_the_ball_is_reached_by_a_return_and_missed_by_a_lost_point():
    returned = [pong(45, 30, 28), pong(46, 31, 28), pong(47, 32, 28), pong(46, 33, 28)]
    assert cost(PONG, "return the ball", returned) == 0.0
    lost = [pong(45, 30, 10), pong(46, 31, 10), pong(None, None, 10, lost=1)]
    assert cost(PONG, "return the ball", lost) >= MISS
    near, far = [pong(40, 30, 28), pong(41, 31, 28)], [pong(40, 30, 10), pong(41, 31, 10)]
    assert 1.0 <= cost(PONG, "return the ball", near) < cost(PONG, "return the ball", far)


def test_a_forecast_return_with_the_paddle_away_from_the_ball_is_not_believed():
    """A serve along the top wall, as a whole game showed it: the predictor turned the ball back off a paddle
    moving down and five units below it (the game then lost the point); the paddle that stays on the line
    returns it."""
    now = pong(44, 19, 16)
    away = [now, pong(45, 18, 19), pong(46, 17, 21), pong(47, 17, 22), pong(46, 19, 22)]
    there = [now, pong(45, 18, 16), pong(46, 17, 16), pong(47, 17, 16), pong(46, 19, 16)]
    assert cost(PONG, "return the ball", away) >= 1.0
    assert cost(PONG, "return the ball", there) == 0.0


def test_the_emulators_returns_meet_the_paddle_where_the_goal_believes_them():
    """Under the recording policy, nearly every ball the player's paddle sends back turns with the ball's line
    within HIT of the paddle."""
    pytest.importorskip("ale_py")
    from pipeline.domains.atari.goals import HIT
    from pipeline.domains.atari.record import start

    inside = outside = 0
    for seed in range(6):
        emu, act = start("pong", 100 + seed, warmup=0)
        seen: list[dict] = []
        for _ in range(1500):
            seen = [*seen[-2:], state_fields(PONG, emu.state())]
            emu.step(act(emu.ram()))
            xs = [s["ball x"] for s in seen]
            if len(seen) == 3 and None not in xs and xs[1] >= 46 and xs[0] < xs[1] > xs[2]:
                if seen[1]["ball y"] - seen[1]["player"] in HIT:
                    inside += 1
                else:
                    outside += 1
    assert inside > 20 and outside <= 0.05 * inside, (inside, outside)


def test_score_a_point_and_follow_the_ball():
    assert cost(PONG, "score a point", [pong(20, 30, 28), pong(None, None, 28, won=1)]) == 0.0
    assert cost(PONG, "score a point", [pong(20, 30, 28), pong(19, 30, 28)]) > 1.0
    assert cost(PONG, "follow the ball", [pong(20, 30, 28), pong(21, 31, 28)]) == 0.0
    assert cost(PONG, "follow the ball", [pong(20, 30, 28), pong(21, 31, 10)]) > 10


def freeway(chicken, score=0):
    return f"chicken {chicken} score {score} cars 1 2 3 4 5 6 7 8 9 10 ."


def test_cross_the_road_and_avoid_the_cars():
    assert cost(FREEWAY, "cross the road", [freeway(43), freeway(1, score=1)], ["up"]) == 0.0
    halfway, start = (
        cost(FREEWAY, "cross the road", [freeway(20), freeway(22)]),
        cost(FREEWAY, "cross the road", [freeway(2), freeway(3)]),
    )
    assert 1.0 < halfway < start
    up_now = cost(FREEWAY, "cross the road", [freeway(20), freeway(21), freeway(22)])
    up_later = cost(FREEWAY, "cross the road", [freeway(20), freeway(20), freeway(22)])
    assert up_now < up_later  # the same height at the end: climbing first is cheaper
    knocked = [freeway(20), freeway(21), freeway(19), freeway(18)]
    assert cost(FREEWAY, "avoid the cars", knocked, ["up", "up", "up"]) == 2.0
    assert cost(FREEWAY, "avoid the cars", knocked, ["up", "down", "down"]) == 0.0  # it walked down
    assert cost(FREEWAY, "cross the road and avoid the cars", [freeway(43), freeway(1, 1)], ["up"]) == 0.0


def test_a_crossing_is_the_chicken_restarted_from_the_top_whatever_the_score_says():
    """Past the scores its training clips reached, the predictor restarts the chicken at the bottom but keeps the
    score: that is a crossing too, or the planner would wait at the top for good. A knock-back is not one."""
    assert cost(FREEWAY, "cross the road", [freeway(44, 5), freeway(1, 5)], ["up"]) == 0.0
    assert (
        cost(FREEWAY, "cross the road", [freeway(43, 5), freeway(44, 5), freeway(2, 5)], ["up", "up"]) == 0.0
    )
    waiting = cost(FREEWAY, "cross the road", [freeway(44, 5), freeway(44, 5)])
    assert waiting > 0.0
    knocked = cost(FREEWAY, "cross the road", [freeway(20, 5), freeway(21, 5), freeway(18, 5)], ["up", "up"])
    assert knocked > 1.0
    fell_from_mid_road = cost(FREEWAY, "cross the road", [freeway(30, 5), freeway(1, 5)], ["up"])
    assert fell_from_mid_road > 1.0  # only a restart from the top of the road counts


def freeway_cars(chicken: int, lane: int, x: int) -> str:
    cars = [20] * 10
    cars[lane] = x
    return f"chicken {chicken} score 0 cars {' '.join(map(str, cars))} ."


def test_avoid_the_cars_counts_the_steps_a_car_is_in_the_chickens_way():
    # lane 1 holds the chicken from y = 7 to 10; its car at x = 11 is where cars knock the chicken back
    hit = cost(FREEWAY, "avoid the cars", [freeway_cars(6, 1, 20), freeway_cars(7, 1, 11)], ["up"])
    passed = cost(FREEWAY, "avoid the cars", [freeway_cars(6, 1, 20), freeway_cars(7, 1, 16)], ["up"])
    other_lane = cost(FREEWAY, "avoid the cars", [freeway_cars(6, 1, 20), freeway_cars(7, 2, 11)], ["up"])
    assert (hit, passed, other_lane) == (1.0, 0.0, 0.0)
    # waiting below the lane while its car goes by beats walking into it, crossing and avoiding together
    goal = "cross the road and avoid the cars"
    wait = cost(FREEWAY, goal, [freeway_cars(6, 1, 12), freeway_cars(6, 1, 12)], ["stay"])
    walk = cost(FREEWAY, goal, [freeway_cars(6, 1, 12), freeway_cars(7, 1, 12)], ["up"])
    assert wait < walk


def test_a_car_in_the_chickens_way_comes_before_the_emulators_knock_backs():
    """Pressing up through a whole game: nearly every knock-back starts with a car in the chicken's way as the
    goal reads it from the state, and the chicken is seldom in a car's way without being knocked back."""
    pytest.importorskip("ale_py")
    from pipeline.domains.atari.goals import in_the_way

    emu, _ = FREEWAY.new_game(0, seed=0)
    before: list[bool] = []  # in the way at the state before each step
    knocked: list[bool] = []  # that step started a knock-back
    was_knocked = False
    while not emu.over():
        y = int(emu.ram()[14])
        before.append(in_the_way(state_fields(FREEWAY, emu.state())))
        emu.step("up")
        now = int(emu.ram()[14]) < y and y - int(emu.ram()[14]) < 100  # down without 'down': not a crossing
        knocked.append(now and not was_knocked)
        was_knocked = now
    starts = [i for i, k in enumerate(knocked) if k]
    flagged = sum(before[i] for i in starts)
    assert len(starts) > 20 and flagged >= 0.8 * len(starts), (flagged, len(starts))
    assert sum(before) <= 3 * len(starts), (sum(before), len(starts))


def ram(**at: int) -> np.ndarray:
    r = np.zeros(128, dtype=np.uint8)
    for k, v in at.items():
        r[int(k[1:])] = v
    return r


def test_pong_tally_counts_returns_at_the_paddle_and_points():
    t = PongTally()
    for x in (150, 170, 188, 180, 160):  # to the paddle and back: one return
        t.update(ram(a49=x, a54=100), "stay", 0.0)
    for x in (60, 80, 70):  # turning at the computer's side is not the player's return
        t.update(ram(a49=x, a54=100), "stay", 0.0)
    for x in (150, 170):
        t.update(ram(a49=x, a54=100), "stay", 0.0)
    t.update(ram(a49=0, a54=0), "stay", -1.0)  # missed: the computer scores
    t.update(ram(a49=0, a54=0), "stay", 1.0)
    assert t.summary() == {"points_won": 1, "points_lost": 1, "balls_reached": 2, "balls_returned": 1,
                           "return_rate": pytest.approx(0.5)}  # fmt: skip


def test_freeway_tally_counts_crossings_and_one_hit_per_knock_back():
    t = FreewayTally()
    for y, action, reward in [(6, "up", 0), (10, "up", 0), (8, "up", 0), (6, "up", 0), (9, "up", 0),
                              (7, "down", 0), (177, "up", 0), (6, "up", 1.0)]:  # fmt: skip
        t.update(ram(a14=y), action, reward)
    assert t.summary() == {"crossings": 1, "hits": 1}


def test_eval_plan_games_start_after_distinct_no_op_counts():
    """Without sticky actions a game is the same every time; each of a seed's games starts after its own number of
    no-op steps, so four games are four different games."""
    pytest.importorskip("ale_py")
    rams = [bytes(PONG.new_game(i, seed=0)[0].ram()) for i in range(4)]
    assert len(set(rams)) == 4
    assert bytes(PONG.new_game(2, seed=0)[0].ram()) == rams[2]  # and the same index is the same game


def test_a_controller_given_a_reader_sees_the_states_read_from_the_screens():
    """`play` with a reader: the controller's history is what the reader made of each screen (not RAM), and the
    result counts the steps it read wrong. The game without sticky actions is the same twice, so a reader can
    replay the true states of a first game and spoil every third."""
    pytest.importorskip("ale_py")
    from pipeline.evaluation.plan import play

    seen: list[list[str]] = []

    def controller(states: list[str], actions: list[str], ram: np.ndarray) -> str:
        seen.append(list(states))
        return "up" if len(states) % 4 < 2 else "down"

    first = play(PONG, controller, 0, seed=0, sticky=0.0, max_steps=9)
    truth = seen[-1]
    assert "misread" not in first and all(state_fields(PONG, s) is not None for s in truth)
    screens: list[tuple[int, ...]] = []

    def reader(screen: np.ndarray) -> str:
        screens.append(screen.shape)
        return "misread ." if len(screens) % 3 == 0 else truth[len(screens) - 1]

    second = play(PONG, controller, 0, seed=0, sticky=0.0, max_steps=9, reader=reader)
    assert second["steps"] == 9 and second["misread"] == 3
    assert seen[-1] == [("misread ." if i % 3 == 2 else s) for i, s in enumerate(truth)]
    assert screens[0] == (210, 160, 3)
