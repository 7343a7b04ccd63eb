"""Atari games as semworld domains ("pong", "freeway"): states read from the console's RAM, written in words,
with the player's actions ("stay", "up", "down").

The inference path sees the Domain interface of pipeline/domain.py: the grammar (games.py), the timeline
field by field, the actions, and a recorder for data sets (`semworld world generate --domain pong`). The
emulator (ale-py, the `atari` extra) is needed only to record; reading, forecasting and scoring states of a
game need nothing but this package.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from pipeline.domains.atari.games import ACTIONS, GAMES, Game, LayoutAutomaton
from pipeline.domains.atari.goals import goals_of
from pipeline.domains.atari.record import (
    FPS,
    POLICIES,
    Emulator,
    Policy,
    ale_available,
    clip_seed,
    generate,
    record_clip,
    start,
)
from pipeline.domains.atari.tally import TALLIES

NOOP_STARTS = 30  # the most no-op steps before a game of `semworld eval plan` begins


class SampleClip(NamedTuple):
    """pipeline.domain.GroundTruthClip's fields: frames (F, 210, 160, 3) uint8, fps, the states, stride 1."""

    name: str
    frames: np.ndarray
    fps: float
    states: list[str]
    stride: int


class AtariDomain:
    """One Atari game's states and actions (see games.py for the grammar of each)."""

    actions: tuple[str, ...] = ACTIONS
    policies: tuple[str, ...] = POLICIES  # the behaviour policies `simulator` and `generate` play by
    mirror: Mapping[str, str] | None = None
    state_rate: float = float(FPS)  # states per second: one per agent step of 4 frames
    confidence_threshold: float | None = None
    unsure_hint = (
        "these weights know one Atari game's screens; a clip of another game or of other footage is not what "
        "they read (see docs/atari.md)"
    )

    def __init__(self, game: str) -> None:
        self.game: Game = GAMES[game]
        self.name = self.game.name
        self.description = self.game.description
        self.vocabulary: frozenset[str] | None = self.game.vocabulary
        self.max_tokens: int | None = self.game.max_tokens
        self.caption_tokens: int | None = self.game.max_tokens + 2
        self.controlled = self.game.controlled  # the parse field the actions move
        self.controlled_noun = self.game.controlled_noun  # what it is on the screen, for titles
        self.fields: tuple[str, ...] = self.game.fields  # flat field names, for goals (pipeline.goals)
        self.goals = goals_of(self.name)  # the named goals a plan can aim at ("return the ball")

    def spell(self, text: str) -> str:
        """Lowercase words separated by single spaces."""
        return " ".join(text.lower().split())

    def parse(self, text: str) -> dict[str, Any] | None:
        return self.game.parse(self.spell(text))

    def changes(self, previous: str, current: str) -> list[str]:
        return self.game.changes(self.spell(previous), self.spell(current))

    def automaton(self, max_tokens: int) -> LayoutAutomaton:
        """The game's layouts (games.Game.layouts): a predicted state that does not parse, such as Pong's ball
        written with one number where the slots held "none" before, is projected onto the best one that does."""
        return self.game.automaton(max_tokens)

    def sample_clips(self, seed: int = 0) -> list[SampleClip]:
        """Two test-split clips of 48 states (3.2 s) when the emulator is installed, else none."""
        return list(_samples(self.name, seed)) if ale_available() else []

    def draw(self, state: str, size: int) -> np.ndarray | None:
        return None

    def word_places(self, state: str) -> list[tuple[float, float] | None] | None:
        """Where on the screen each word of `state` is read (games.Game.word_places); None when the game does not
        say or the state does not parse."""
        try:
            return self.game.word_places(self.spell(state))
        except ValueError:
            return None

    def locate(self, frame: np.ndarray) -> dict[str, tuple[float, float] | None] | None:
        """Where the objects are drawn on a 210 x 160 screen, read from its pixels (games.Game.locate)."""
        return self.game.locate(frame)

    def unshown(self, frame: np.ndarray, state: str) -> bool:
        """Whether the screen `frame` cannot show `state` (games.Game.unshown): a captioner's misread of such a
        frame is no fault of the model."""
        return self.game.unshown(frame, self.spell(state))

    def simulator(
        self, index: int, seed: int = 0, policy: str = "mix", sticky: float = 0.0
    ) -> tuple[Emulator, Policy]:
        """Test episode `index` of `seed`, warmed up and ready to record (`semworld eval actions`): the emulator
        (state(), step(action), clone(), restore()) and its behaviour policy (called with emulator.ram())."""
        return start(self.game, clip_seed("test", seed, index), policy, sticky)

    def new_game(self, index: int, seed: int = 0, sticky: float = 0.0) -> tuple[Emulator, Any]:
        """A whole game from the console's reset (`semworld eval plan`): test episode `index` of `seed`, started
        after 0..30 no-op steps, a different count for each of a seed's first 31 games (the no-op starts of Mnih
        et al. 2015: without sticky actions the games are deterministic, so this is what makes one differ), and
        the tally that scores it (update(ram, action, reward) after each step; summary())."""
        game_seed = clip_seed("test", seed, index)
        emu = Emulator(self.game, game_seed, sticky)
        # Distinct no-op counts for the first NOOP_STARTS + 1 games of a seed (one shuffle of 0..30 per seed).
        order = np.random.default_rng([seed, NOOP_STARTS]).permutation(NOOP_STARTS + 1)
        for _ in range(int(order[index % len(order)])):
            emu.step("stay")
        return emu, TALLIES[self.name]()

    def generate(self, out: str | Path, **options: Any) -> Path:
        """Record a data set (`semworld world generate --domain NAME`); options as atari.record.generate."""
        return generate(self.game, out, **options)


@functools.cache
def _samples(game: str, seed: int) -> tuple[SampleClip, ...]:
    out = []
    for i in range(2):
        clip = record_clip(game, clip_seed("test", seed, i), 48, policy="mix")
        out.append(SampleClip(f"{game}-{i}", np.stack(clip.frames), float(FPS), clip.states, 1))
    return tuple(out)


def PongDomain() -> AtariDomain:  # noqa: N802 (a factory the registry calls like a class)
    return AtariDomain("pong")


def FreewayDomain() -> AtariDomain:  # noqa: N802
    return AtariDomain("freeway")
