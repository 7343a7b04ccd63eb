"""Atari games as state languages: what is read from the console's RAM, and how a state is written in words.

Each game reads a few bytes of the 128-byte RAM (addresses from the AtariARI annotations, Anand et al. 2019),
quantises positions to `QUANTUM` RAM units, and writes the result as a fixed-order sentence of keywords and
numbers:

    pong     "ball 25 30 player 24 enemy 20 score 0 3 ."      (ball absent between points: "ball none ...")
    freeway  "chicken 2 score 0 cars 1 2 3 4 7 38 39 39 39 39 ."

A number is a word of its own (0..63), so the predictor's vocabulary stays small and every slot of a state has
one meaning. A state ends with "." as every semworld state does: the predictor stops a state at its end mark. Every game has three actions, "stay", "up" and "down", the moves of the player's paddle or chicken;
the emulator's action for each is in `ale_actions`. A scripted player (`track`) gives the behaviour policy its
skill: Pong's follows the ball, Freeway's crosses the road.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

QUANTUM = 4  # RAM position units per state unit: one step of the ball in x, a few pixels on the screen
NUMBERS = tuple(str(i) for i in range(64))  # every number a state may hold (positions // QUANTUM, scores)


def _bcd(byte: int) -> int:
    """A binary-coded decimal byte's number (0x23 -> 23)."""
    return (byte >> 4) * 10 + (byte & 0x0F)


ACTIONS = ("stay", "up", "down")
NUMBER = "<number>"  # in a layout: any word of NUMBERS
# Freeway's screen (210 x 160): the chicken's middle is at row CHICKEN_ROW minus its RAM y (one row per unit),
# column CHICKEN_COL, inside the columns CHICKEN_COLS; ROAD is the road's grey.
CHICKEN_ROW, CHICKEN_COL = 196.8, 46.0
CHICKEN_COLS = slice(40, 52)
ROAD = (142, 142, 142)
MEDIAN_ROWS = (101, 106)  # the road's yellow middle line (dashes on rows 102 and 104), with a row either side


def _number(word: str, what: str, limit: int = len(NUMBERS)) -> int:
    if not word.isdigit() or int(word) >= limit:
        raise ValueError(f"{what}: expected a number 0..{limit - 1}, got {word!r}")
    return int(word)


def _words(text: str) -> list[str]:
    """The words of a state before its end mark; a state without one, or with words after it, is a ValueError."""
    w = text.split()
    if not w or w[-1] != ".":
        raise ValueError(f"a state ends with '.', got {w[-1] if w else 'nothing'!r} at its end")
    if "." in w[:-1]:
        raise ValueError(f"'.' at word {w.index('.') + 1}: a state has one end mark, at its end")
    return w[:-1]


def _expect(words: Sequence[str], at: int, keyword: str) -> None:
    if at >= len(words) or words[at] != keyword:
        got = words[at] if at < len(words) else "the end of the state"
        raise ValueError(f"expected {keyword!r} at word {at + 1}, got {got!r}")


class LayoutAutomaton:
    """pipeline.domain.StateAutomaton over a game's layouts: a prefix is the words read so far (as a count) and
    the layouts it still fits; the next words are those the fitting layouts allow at that place. Layouts longer
    than `max_tokens` words are left out."""

    def __init__(self, layouts: tuple[tuple[str, ...], ...], max_tokens: int) -> None:
        self.layouts = tuple(layout for layout in layouts if len(layout) <= max_tokens)
        if not self.layouts:
            raise ValueError(f"no layout of the game fits in {max_tokens} tokens")
        words = {w for layout in self.layouts for w in layout if w != NUMBER}
        self.vocabulary: tuple[str, ...] = (*sorted(words), *NUMBERS)

    def start(self) -> tuple[int, tuple[int, ...]]:
        return 0, tuple(range(len(self.layouts)))

    def step(self, prefix: tuple[int, tuple[int, ...]]) -> dict[str, tuple[int, tuple[int, ...]]]:
        at, fitting = prefix
        nexts: dict[str, list[int]] = {}
        for i in fitting:
            layout = self.layouts[i]
            if at < len(layout):
                for word in NUMBERS if layout[at] == NUMBER else (layout[at],):
                    nexts.setdefault(word, []).append(i)
        return {word: (at + 1, tuple(ids)) for word, ids in nexts.items()}

    def done(self, prefix: tuple[int, tuple[int, ...]]) -> bool:
        at, fitting = prefix
        return any(len(self.layouts[i]) == at for i in fitting)


@dataclass(frozen=True)
class Game:
    """One game's state language. Subclasses give the RAM reading, the spelling and the scripted player."""

    name: ClassVar[str]
    rom: ClassVar[str]  # ale_py.roms id
    description: ClassVar[str]
    keywords: ClassVar[tuple[str, ...]]
    max_tokens: ClassVar[int]
    ale_actions: ClassVar[Mapping[str, str]]  # action word -> ale_py.Action member name
    controlled: ClassVar[str]  # the field of `parse` that the actions move
    controlled_noun: ClassVar[str]  # what that field is on the screen, for titles ("the player's paddle")
    # The RAM addresses of the positions a state quantises: within a bin their value is hidden from the state,
    # so two histories that read alike may go on differently (pipeline.evaluation.actions' determined targets).
    positions: ClassVar[tuple[int, ...]]
    fields: ClassVar[
        tuple[str, ...]
    ]  # the flat names of parse's fields, for goals ("ball x", "score player")
    # Every shape a state may take, word by word: a keyword, or NUMBER for any of NUMBERS.
    layouts: ClassVar[tuple[tuple[str, ...], ...]]

    def read(self, ram: np.ndarray) -> dict[str, Any]:
        """The state's fields from the 128 RAM bytes (quantised)."""
        raise NotImplementedError

    def spell(self, fields: Mapping[str, Any]) -> str:
        raise NotImplementedError

    def parse(self, text: str) -> dict[str, Any]:
        """The fields of a state sentence; ValueError naming the first word that does not fit."""
        raise NotImplementedError

    def track(self, ram: np.ndarray) -> str:
        """The scripted player's action for this RAM."""
        raise NotImplementedError

    def score_bytes(self, score: int) -> dict[int, int] | None:
        """The RAM writes that set the player's score to `score` (the console then draws it), or None where the
        game's score cannot be set so."""
        return None

    def word_places(self, text: str) -> list[tuple[float, float] | None] | None:
        """Where on the screen (row, column of the 210 x 160 frame) each word of a state is read, None for a word
        read from no one place: what a captioner's attention is pulled onto while it writes that word. None when
        the game does not say."""
        return None

    def locate(self, frame: np.ndarray) -> dict[str, tuple[float, float] | None] | None:
        """Where the game's objects are drawn on a 210 x 160 screen (row, column of each object's middle, None
        for one not on the screen), read from the pixels alone: how far a drawn frame puts things from where
        the true frame has them. None when the game does not say."""
        return None

    def unshown(self, frame: np.ndarray, state: str) -> bool:
        """Whether the 210 x 160 `frame` cannot show `state`, so that no captioner can read it from the frame:
        False unless the game says otherwise."""
        return False

    @property
    def vocabulary(self) -> frozenset[str]:
        return frozenset(self.keywords) | frozenset(NUMBERS)

    def automaton(self, max_tokens: int) -> LayoutAutomaton:
        """The game's valid states as an automaton over its layouts (pipeline.projection)."""
        return LayoutAutomaton(self.layouts, max_tokens)

    def changes(self, previous: str, current: str) -> list[str]:
        """Field by field, "ball 25 30 -> 26 28"; a state that does not parse is only said to have changed."""
        if previous.split() == current.split():
            return []
        try:
            before, after = self.parse(previous), self.parse(current)
        except ValueError:
            return ["changed (not a state of the game)"]
        return [f"{k} {_show(before[k])} -> {_show(after[k])}" for k in after if before.get(k) != after[k]]


def _show(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, Mapping):
        return " ".join(_show(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return " ".join(_show(v) for v in value)
    return str(value)


@dataclass(frozen=True)
class Pong(Game):
    """Pong: the ball, the player's (right) paddle, the computer's (left) paddle and the score.

    RAM (AtariARI): player_y 51, enemy_y 50, ball_x 49, ball_y 54, enemy_score 13, player_score 14. The ball
    is out of play (between a point and the next serve) while ball_y is 0.

    The bins are those the screen can tell apart, so that a captioner reading frames can give the state exactly:
    the player's paddle is drawn in steps of two RAM units (values 2k + 1 and 2k + 2 look the same), so its bins
    are (y + 1) // 4, each two whole steps; the computer's paddle is hidden behind the top wall at every y up to
    `enemy_hidden`, which all read as that value.
    """

    name: ClassVar[str] = "pong"
    rom: ClassVar[str] = "pong"
    description: ClassVar[str] = "Atari Pong: ball, both paddles and the score, read from the console's RAM"
    keywords: ClassVar[tuple[str, ...]] = ("ball", "none", "player", "enemy", "score", ".")
    max_tokens: ClassVar[int] = 12
    # In the emulator's Pong RIGHT moves the player's paddle up the screen and LEFT down.
    ale_actions: ClassVar[Mapping[str, str]] = {"stay": "NOOP", "up": "RIGHT", "down": "LEFT"}
    controlled: ClassVar[str] = "player"
    controlled_noun: ClassVar[str] = "player's paddle"
    fields: ClassVar[tuple[str, ...]] = ("ball x", "ball y", "player", "enemy", "score player", "score enemy")
    layouts: ClassVar[tuple[tuple[str, ...], ...]] = tuple(
        ("ball", *ball, "player", NUMBER, "enemy", NUMBER, "score", NUMBER, NUMBER, ".")
        for ball in ((NUMBER, NUMBER), ("none",))
    )
    positions: ClassVar[tuple[int, ...]] = (49, 54, 51, 50)  # ball x, ball y, player, enemy
    aim: ClassVar[int] = 8  # RAM units from paddle_y to the point of the paddle the scripted player aims with
    enemy_hidden: ClassVar[int] = 32  # the computer's paddle y at and above which (smaller y) it is not drawn

    def read(self, ram: np.ndarray) -> dict[str, Any]:
        ball_y = int(ram[54])
        ball = None if ball_y == 0 else {"x": int(ram[49]) // QUANTUM, "y": ball_y // QUANTUM}
        return {
            "ball": ball,
            "player": (int(ram[51]) + 1) // QUANTUM,
            "enemy": max(int(ram[50]), self.enemy_hidden) // QUANTUM,
            "score": {"player": int(ram[14]), "enemy": int(ram[13])},
        }

    def score_bytes(self, score: int) -> dict[int, int] | None:
        if not 0 <= score <= 20:  # 21 ends the game
            raise ValueError(f"a Pong score that play goes on from is 0..20, got {score}")
        return {14: score}

    def spell(self, fields: Mapping[str, Any]) -> str:
        ball = fields["ball"]
        where = "none" if ball is None else f"{ball['x']} {ball['y']}"
        score = fields["score"]
        return (
            f"ball {where} player {fields['player']} enemy {fields['enemy']} "
            f"score {score['player']} {score['enemy']} ."
        )

    def parse(self, text: str) -> dict[str, Any]:
        w = _words(text)
        _expect(w, 0, "ball")
        if len(w) > 1 and w[1] == "none":
            ball, at = None, 2
        else:
            if len(w) < 3:
                raise ValueError("ball: expected 'none' or two numbers")
            ball, at = {"x": _number(w[1], "ball x"), "y": _number(w[2], "ball y")}, 3
        _expect(w, at, "player")
        player = _number(w[at + 1] if at + 1 < len(w) else "", "player")
        _expect(w, at + 2, "enemy")
        enemy = _number(w[at + 3] if at + 3 < len(w) else "", "enemy")
        _expect(w, at + 4, "score")
        if len(w) != at + 7:
            raise ValueError(f"expected two score numbers to end the state, got {' '.join(w[at + 5 :])!r}")
        score = {"player": _number(w[at + 5], "score"), "enemy": _number(w[at + 6], "score")}
        return {"ball": ball, "player": player, "enemy": enemy, "score": score}

    def word_places(self, text: str) -> list[tuple[float, float] | None] | None:
        """The ball's numbers where the ball is, each paddle's number at the paddle's middle, the scores at their
        digits. Measured on the emulator's frames, from a state's numbers (bins): the ball's middle at row
        4y - 10.5, column 4x - 47.5; the middle of the player's paddle at row 4p - 4.7, column 141.5, of the
        computer's at row 4e - 7.2, column 17.5 (each within 2 pixels), inside the court's rows 34..193; the
        digits about row 10, the player's at column 122, the computer's at 36."""

        def row(y: float) -> float:
            return float(min(max(y, 34), 193))

        f = self.parse(text)
        ball = f["ball"]
        if ball is None:
            where: list[tuple[float, float] | None] = [None, None]  # ball none
        else:
            at = (row(QUANTUM * ball["y"] - 10.5), QUANTUM * ball["x"] - 47.5)
            where = [None, at, at]  # ball x y
        player = (row(QUANTUM * f["player"] - 4.7), 141.5)
        enemy = (row(QUANTUM * f["enemy"] - 7.2), 17.5)
        return [*where, None, player, None, enemy, None, (10.0, 122.0), (10.0, 36.0), None]

    def locate(self, frame: np.ndarray) -> dict[str, tuple[float, float] | None] | None:
        """The ball, the player's paddle and the computer's paddle, found by colour inside the court (rows
        34..193): the ball is the near-white pixels (the walls above and below the court are the same white), the
        paddles the green pixels of columns 140..143 and the orange ones of columns 16..19. Tolerant of video
        compression and of a renderer's soft edges."""
        court = np.asarray(frame[34:194], dtype=np.int32)  # (160, 160, 3)
        r, g, b = court[..., 0], court[..., 1], court[..., 2]
        white = np.minimum(np.minimum(r, g), b) > 180
        green = (g > r + 50) & (g > b + 50)
        orange = (r > 170) & (g > 90) & (g < 170) & (b < 120)

        def middle(mask: np.ndarray, first_col: int = 0) -> tuple[float, float] | None:
            rows, cols = np.nonzero(mask)
            if len(rows) < 2:
                return None
            return (float(rows.mean()) + 34, float(cols.mean()) + first_col)

        return {
            "ball": middle(white),
            "player": middle(green[:, 140:144], 140),
            "enemy": middle(orange[:, 16:20], 16),
        }

    def unshown(self, frame: np.ndarray, state: str) -> bool:
        """A ball in play that no pixel of the court shows: inside the top wall, as white as the ball (33 of 192
        balls in the wall's bin, y = 11, in test play). Every other state the screen determines (over 16,000
        frames of test play the paddles' pixels told their bins apart in every frame, and frames alike in the
        ball's pixels and the score's digits had one score but for one). The ball is looked for by brightness
        alone, for a clip's frames: H.264 blends the 2 x 3 ball's colour with the court's, but not its brightness
        (luma over 180, the paddles' is under 150)."""
        try:
            ball = self.parse(state)["ball"]
        except ValueError:
            return False
        court = np.asarray(frame[34:194], dtype=np.float32)  # (160, 160, 3)
        luma = court @ np.array([0.299, 0.587, 0.114], dtype=np.float32)  # (160, 160)
        return ball is not None and not bool((luma > 180).any())

    def track(self, ram: np.ndarray) -> str:
        if int(ram[54]) == 0:
            return "stay"
        gap = int(ram[54]) - (int(ram[51]) + self.aim)
        return "up" if gap < -3 else "down" if gap > 3 else "stay"


@dataclass(frozen=True)
class Freeway(Game):
    """Freeway: the player's chicken crossing ten lanes of cars, and the score (crossings made).

    RAM (AtariARI): player_y 14, score 103, the cars' x positions 108..117 (lane by lane, from the bottom lane,
    where the chicken starts, to the top). Each lane's cars move at their own constant speed, so the cars are
    the part of the scene no action changes.
    """

    name: ClassVar[str] = "freeway"
    rom: ClassVar[str] = "freeway"
    description: ClassVar[str] = "Atari Freeway: the chicken, ten lanes of cars and the score, read from RAM"
    keywords: ClassVar[tuple[str, ...]] = ("chicken", "score", "cars", ".")
    max_tokens: ClassVar[int] = 16
    ale_actions: ClassVar[Mapping[str, str]] = {"stay": "NOOP", "up": "UP", "down": "DOWN"}
    controlled: ClassVar[str] = "chicken"
    controlled_noun: ClassVar[str] = "chicken"
    lanes: ClassVar[int] = 10
    positions: ClassVar[tuple[int, ...]] = (14, *range(108, 118))  # the chicken, the cars lane by lane
    fields: ClassVar[tuple[str, ...]] = ("chicken", "score", *(f"cars {i}" for i in range(10)))
    layouts: ClassVar[tuple[tuple[str, ...], ...]] = (
        ("chicken", NUMBER, "score", NUMBER, "cars", *(NUMBER,) * 10, "."),
    )

    def read(self, ram: np.ndarray) -> dict[str, Any]:
        return {
            "chicken": int(ram[14]) // QUANTUM,
            "score": _bcd(int(ram[103])),  # the console keeps it in binary-coded decimal (0x10 after 9)
            "cars": [int(ram[108 + i]) // QUANTUM for i in range(self.lanes)],
        }

    def score_bytes(self, score: int) -> dict[int, int] | None:
        if not 0 <= score <= 99:
            raise ValueError(f"a Freeway score is 0..99, got {score}")
        return {103: (score // 10) << 4 | score % 10}  # binary-coded decimal

    def spell(self, fields: Mapping[str, Any]) -> str:
        cars = " ".join(str(x) for x in fields["cars"])
        return f"chicken {fields['chicken']} score {fields['score']} cars {cars} ."

    def parse(self, text: str) -> dict[str, Any]:
        w = _words(text)
        _expect(w, 0, "chicken")
        chicken = _number(w[1] if len(w) > 1 else "", "chicken")
        _expect(w, 2, "score")
        score = _number(w[3] if len(w) > 3 else "", "score")
        _expect(w, 4, "cars")
        if len(w) != 5 + self.lanes:
            raise ValueError(f"cars: expected {self.lanes} numbers, got {len(w) - 5}")
        return {"chicken": chicken, "score": score, "cars": [_number(x, "car") for x in w[5:]]}

    def word_places(self, text: str) -> list[tuple[float, float] | None] | None:
        """The chicken's number at the chicken, the score at its digits, each car's number at that car. Measured
        on the emulator's frames: the chicken's middle at row 196.8 - y (y its RAM value; 99% of frames within 2
        pixels), column 46; lane i's car (i = 0 the bottom lane) at row 176 - 16 i, its middle at
        column x + 0.5; the score's digits about row 9, column 48."""
        f = self.parse(text)
        chicken = (CHICKEN_ROW - (QUANTUM * f["chicken"] + 1.5), CHICKEN_COL)  # the middle of its bin
        cars = [(self.lane_row(i), QUANTUM * x + 2.0) for i, x in enumerate(f["cars"])]
        return [None, chicken, None, (9.0, 48.0), None, *cars, None]

    @staticmethod
    def lane_row(lane: int) -> float:
        """The screen row of the middle of lane `lane` (0: the bottom lane)."""
        return 176.0 - 16.0 * lane

    def locate(self, frame: np.ndarray) -> dict[str, tuple[float, float] | None] | None:
        """The chicken and each lane's car, found by colour. The chicken is the yellow pixels of its columns
        (40..51) between the pavements, but for the rows of the road's middle line. A car is the pixels of its
        lane's band (the lane's middle row +- 4) that are neither the road's grey nor the chicken's yellow, at
        columns 8 and on (0..7 are the console's black margin). A car leaving one edge shows at both: its halves
        are joined across the wrap."""
        screen = np.asarray(frame, dtype=np.int32)  # (210, 160, 3)
        r, g, b = screen[..., 0], screen[..., 1], screen[..., 2]
        # the chicken is (252, 252, 84); the bottom lane's car is a darker yellow
        yellow = (r > 225) & (g > 225) & (b < 140)
        yellow[MEDIAN_ROWS[0] : MEDIAN_ROWS[1]] = False  # the road's yellow middle line, the chicken's colour
        rows, cols = np.nonzero(yellow[20:196, CHICKEN_COLS])
        chicken: tuple[float, float] | None = None
        if len(rows) >= 3:
            chicken = (float(rows.mean()) + 20, float(cols.mean()) + CHICKEN_COLS.start)
        out: dict[str, tuple[float, float] | None] = {"chicken": chicken}
        off_road = np.abs(screen - np.array(ROAD)).sum(-1) > 60  # (210, 160)
        off_road[:, CHICKEN_COLS] &= ~yellow[:, CHICKEN_COLS]
        width = 160 - 8  # the columns a car is drawn in
        for lane in range(self.lanes):
            mid = int(self.lane_row(lane))
            rows, cols = np.nonzero(off_road[mid - 4 : mid + 5, 8:])
            if len(cols) < 6:
                out[f"car {lane}"] = None
                continue
            cols = cols + 8
            if cols.max() - cols.min() > 20:  # across the wrap: the left part continues the right
                cols = np.where(cols < 80, cols + width, cols)
            centre = float(cols.mean())
            out[f"car {lane}"] = (float(mid), centre - width if centre >= 160 else centre)
        return out

    def track(self, ram: np.ndarray) -> str:
        return "up"  # the crossing player: always forward (the policy's noise adds the rest)


GAMES: dict[str, Game] = {g.name: g for g in (Pong(), Freeway())}
