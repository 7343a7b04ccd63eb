"""Frames with their true states from a recording domain's clips: the captioner's data for a domain whose frames
come from a simulator (the Atari games), not from a drawing function.

The clips are the ones `semworld world generate --domain NAME` writes (MP4 + states.jsonl) and the frames are
decoded from the MP4 files, so the model learns from exactly what a user's clip of the game gives it: H.264's
colour subsampling and block artifacts included.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.domain import Domain, can_generate
from pipeline.utils import UserError
from pipeline.video import read_video

logger = logging.getLogger(__name__)


@dataclass
class RecordedFrames:
    """Every frame of a recorded data set, in clip order: frames (F, H, W, 3) uint8 and states[F]; actions[F], the
    action taken after each state (None where the data set has none), and starts, where each clip begins."""

    frames: np.ndarray
    states: list[str]
    actions: list[str | None] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)

    def clips(self) -> list[range]:
        """The frame indices of each clip, in order."""
        ends = [*self.starts[1:], len(self.states)]
        return [range(a, b) for a, b in zip(self.starts, ends)]

    def __len__(self) -> int:
        return len(self.states)

    def sample(self, rng: np.random.Generator, n: int) -> tuple[list[np.ndarray], list[str]]:
        """`n` frames drawn uniformly with replacement, with their states."""
        return self.take(rng.integers(len(self.states), size=n))

    def take(self, picked: np.ndarray) -> tuple[list[np.ndarray], list[str]]:
        """The frames at indices `picked`, with their states."""
        return [self.frames[i] for i in picked], [self.states[i] for i in picked]

    def spread(self, n: int) -> RecordedFrames:
        """At most `n` frames evenly spaced through the set (a held-out set of a fixed size)."""
        if n >= len(self.states):
            return self
        picked = np.linspace(0, len(self.states) - 1, n).round().astype(int)
        return RecordedFrames(
            self.frames[picked], [self.states[i] for i in picked]
        )  # single frames: no clips


def record_frames(
    domain: Domain,
    folder: str | Path,
    *,
    clips: int,
    length: int,
    seed: int,
    split: str,
    progress: bool = False,
    warmup: int | None = None,
    score_max: int | None = None,
) -> RecordedFrames:
    """The frames and states of `clips` clips of `length` states of `split` at `seed`, recorded into `folder`
    once (the domain's `generate`, with video; `warmup`: the most steps played before a clip, None: the domain's
    default; `score_max`: each clip's score drawn from 0..score_max, None: as play left it) and decoded from its
    MP4 files; a folder already there is read."""
    folder = Path(folder)
    if not (folder / "states.jsonl").is_file():
        if not can_generate(domain):
            raise UserError(f"domain {domain.name!r} does not record clips, so it has no frames to train on")
        folder.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="semworld-frames-", dir=folder.parent) as tmp:
            logger.info("recording %d %s clips of %d states (%s split, seed %d) into %s", clips, domain.name,
                        length, split, seed, folder)  # fmt: skip
            generate: Any = domain.generate  # type: ignore[attr-defined]
            generate(tmp, clips=clips, length=length, split=split, seed=seed, video=True, progress=progress,
                     **({} if warmup is None else {"warmup": warmup}),
                     **({} if score_max is None else {"score_max": score_max}))  # fmt: skip
            os.replace(tmp, folder)
            os.mkdir(tmp)  # the context manager removes its folder, which now lives at `folder`
    frames: list[np.ndarray] = []
    states: list[str] = []
    actions: list[str | None] = []
    starts: list[int] = []
    lines = (folder / "states.jsonl").read_text().splitlines()
    # an earlier, smaller recording: reading it would quietly give fewer frames than asked
    if len(lines) < clips:
        raise UserError(
            f"{folder} holds {len(lines)} clips, fewer than the {clips} asked for: remove it to record them"
        )
    for line in lines[:clips]:
        record = json.loads(line)
        starts.append(len(states))
        decoded = read_video(folder / record["clip"]).frames  # every frame: one per state
        if len(decoded) < len(record["states"]):
            raise UserError(
                f"{folder / record['clip']}: {len(decoded)} frames for {len(record['states'])} states"
            )
        frames.extend(decoded[: len(record["states"])])
        states.extend(record["states"])
        taken = list(record.get("actions") or [])[: len(record["states"])]
        actions.extend(taken + [None] * (len(record["states"]) - len(taken)))
    return RecordedFrames(np.stack(frames), states, actions, starts)  # (F, H, W, 3)
