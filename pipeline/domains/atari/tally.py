"""What a closed-loop game is scored by, read from the console's RAM after every agent step (`semworld eval plan`).

Pong: points won and lost, and the balls that reached the player's paddle: each either came back off it (the
ball's x turns from rising to falling at the paddle) or was missed (the computer scored). Freeway: crossings,
and the times a car knocked the chicken back (it went down without the "down" action).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

PONG_RETURN_X = (
    180  # ball x (RAM) at or past which a turn back is the player's paddle sending it (state 45 * 4)
)


@dataclass
class PongTally:
    """Points and returns of one Pong game."""

    won: int = 0
    lost: int = 0
    returned: int = 0
    _x: int | None = None
    _dx: int = 0

    def update(self, ram: np.ndarray, action: str, reward: float) -> None:
        """After one agent step: ram is the RAM after it, reward what the step earned."""
        if reward > 0:
            self.won += 1
        elif reward < 0:
            self.lost += 1
        in_play = int(ram[54]) != 0
        x = int(ram[49]) if in_play else None
        if x is not None and self._x is not None:
            dx = x - self._x
            if dx < 0 < self._dx and self._x >= PONG_RETURN_X:
                self.returned += 1
            if dx != 0:
                self._dx = dx
        else:
            self._dx = 0
        self._x = x

    def summary(self) -> dict[str, Any]:
        reached = self.returned + self.lost
        return {
            "points_won": self.won,
            "points_lost": self.lost,
            "balls_reached": reached,
            "balls_returned": self.returned,
            "return_rate": self.returned / reached if reached else None,
        }


@dataclass
class FreewayTally:
    """Crossings and knock-backs of one Freeway game."""

    crossings: int = 0
    hits: int = 0
    _y: int | None = None
    _hit: bool = False
    _ups: list[int] = field(default_factory=list)

    def update(self, ram: np.ndarray, action: str, reward: float) -> None:
        if reward > 0:
            self.crossings += 1
        y = int(ram[14])
        knocked = self._y is not None and y < self._y and action != "down" and self._y - y < 100
        if knocked and not self._hit:
            self.hits += 1  # a knock-back lasts several steps: one hit
        self._hit = knocked
        self._y = y

    def summary(self) -> dict[str, Any]:
        return {"crossings": self.crossings, "hits": self.hits}


TALLIES = {"pong": PongTally, "freeway": FreewayTally}
