"""Recording Atari episodes with the Arcade Learning Environment: seeded clips, true states in words, actions.

The protocol is the field's (Machado et al. 2018): frame skip 4 (an action is held for 4 emulator frames, one
state per agent step, so a clip plays at 60 / 4 = 15 states a second) and, as an option, sticky actions (with
probability p the console repeats its previous action instead of the new one, each frame; p = 0.25 is the
protocol for evaluating agents). The logged action is always the one the policy chose, so under sticky actions
what was executed may differ from what the data says.

A clip is one emulator run: reset with its own seed, a warm-up of a random number of steps under the policy (so
clips start at every phase of a game: serves, rallies, late scores), then `length` states, each with the action
taken after it. Seeds are drawn per (split, seed, clip), so the splits never share an episode.

The behaviour policy mixes random play with the game's scripted player (`Game.track`): "random", "tracking"
(the scripted player, with 10% random actions) or "mix" (each clip draws how often it tracks, 20-95%), so the
data holds hits and misses, points and serves, and every action in every situation. "runs" is "mix" whose random
actions are held for a while (each clip draws how long, from one step to ten on average): a player who walks the
other way for a stretch and then turns back, which one-step random actions almost never make (Freeway's
scripted player only walks forward).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.domains.atari.games import ACTIONS, GAMES, QUANTUM, Game
from pipeline.utils import UserError

logger = logging.getLogger(__name__)

FRAME_SKIP = 4
FPS = 60 // FRAME_SKIP  # states per second at the game's own speed
POLICIES = ("mix", "random", "tracking", "runs")
SPLITS = {"train": 0, "val": 1, "test": 2}
X264_PARAMS = "threads=1:sliced-threads=0"  # x264's own threads pinned: the same clip, the same bytes
WARMUP_STEPS = {"pong": 1500, "freeway": 500}  # the most warm-up steps before a clip's first state


def ale_available() -> bool:
    try:
        import ale_py  # noqa: F401
    except ImportError:
        return False
    return True


def require_ale() -> Any:
    """The ale_py module, or a UserError saying how to install it (recording needs it; reading states does not)."""
    try:
        import ale_py
    except ImportError:
        raise UserError(
            "the Atari emulator is not installed: pip install 'semworld[atari]' (ale-py, which carries the ROMs)"
        ) from None
    return ale_py


def clip_seed(split: str, seed: int, index: int) -> int:
    """The emulator and policy seed of clip `index` of `split` (a 31-bit int, as ALE takes)."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    return int(np.random.SeedSequence([SPLITS[split], seed, index]).generate_state(1)[0] >> 1)


class Emulator:
    """One game in the ALE at frame skip 4: `step(action word)` holds the action for 4 frames."""

    def __init__(self, game: Game, seed: int, sticky: float = 0.0) -> None:
        ale_py = require_ale()
        from ale_py import roms

        if not 0.0 <= sticky < 1.0:
            raise ValueError(f"sticky must be in [0, 1), got {sticky}")
        ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
        self.game = game
        self.ale = ale_py.ALEInterface()
        self.ale.setInt("random_seed", int(seed))
        self.ale.setInt(
            "frame_skip", FRAME_SKIP
        )  # each act() holds the action for 4 frames (sticky: per frame)
        self.ale.setFloat("repeat_action_probability", float(sticky))
        self.ale.loadROM(roms.get_rom_path(game.rom))
        self._actions = {word: getattr(ale_py.Action, name) for word, name in game.ale_actions.items()}

    def ram(self) -> np.ndarray:
        return self.ale.getRAM()  # (128,) uint8

    def state(self) -> str:
        return self.game.spell(self.game.read(self.ram()))

    def screen(self) -> np.ndarray:
        return self.ale.getScreenRGB()  # (210, 160, 3) uint8

    def step(self, action: str) -> float:
        """Hold `action` for FRAME_SKIP frames; the reward summed over them."""
        return float(self.ale.act(self._actions[action]))

    def over(self) -> bool:
        return bool(self.ale.game_over())

    def set_score(self, score: int) -> None:
        """Set the player's score in RAM; the screen shows it from the next step on. ValueError for a game whose
        score cannot be set."""
        writes = self.game.score_bytes(score)
        if writes is None:
            raise ValueError(f"the {self.game.name} recorder cannot set the score")
        self.write_ram(writes)

    def variants(self, limit: int, rng: np.random.Generator) -> list[dict[int, int]]:
        """Up to `limit` RAM writes (address -> value), each moving some of the game's positions within their
        bins, so that the state reads as it does now: other consoles that this state could be. All of them when
        there are no more than `limit`, else a random sample."""
        ram, now = self.ram(), self.state()
        options = []  # per position address: the values that read the same
        for address in self.game.positions:
            same, at = [], int(ram[address])
            for value in range(max(0, at - QUANTUM + 1), min(256, at + QUANTUM)):  # a byte's values
                moved = ram.copy()
                moved[address] = value
                if self.game.spell(self.game.read(moved)) == now:
                    same.append(value)
            options.append(same)
        sizes = [len(o) for o in options]
        total = int(np.prod(sizes))
        picks = range(total) if total <= limit + 1 else rng.choice(total, size=limit + 1, replace=False)
        out = []
        for pick in picks:
            values = np.unravel_index(int(pick), sizes)
            moves = zip(self.game.positions, options, values, strict=True)
            writes = {a: o[i] for a, o, i in moves if o[i] != ram[a]}
            if writes:  # not the console as it is
                out.append(writes)
        return out[:limit]

    def write_ram(self, writes: dict[int, int]) -> None:
        for address, value in writes.items():
            self.ale.setRAM(address, value)

    def clone(self) -> Any:
        """The emulator's full state (for replaying one history under other actions)."""
        return self.ale.cloneState(include_rng=True)

    def restore(self, snapshot: Any) -> None:
        self.ale.restoreState(snapshot)


@dataclass
class Policy:
    """The seeded behaviour policy: the scripted player with probability `track`, else a uniform action, which
    is then held on with probability `hold` each step (a run of 1 / (1 - hold) steps on average; 0: one step)."""

    game: Game
    track: float
    rng: np.random.Generator
    hold: float = 0.0
    held: str | None = None  # the random action being held on, if any

    @classmethod
    def make(cls, kind: str, game: Game, rng: np.random.Generator) -> Policy:
        if kind not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {kind!r}")
        track = {"random": 0.0, "tracking": 0.9}.get(kind)
        policy = cls(game, float(rng.uniform(0.2, 0.95)) if track is None else track, rng)
        if kind == "runs":
            policy.hold = float(rng.uniform(0.0, 0.9))
        return policy

    def __call__(self, ram: np.ndarray) -> str:
        if self.held is not None and self.rng.random() < self.hold:
            return self.held
        self.held = None
        if self.rng.random() < self.track:
            return self.game.track(ram)
        action = ACTIONS[int(self.rng.integers(len(ACTIONS)))]
        if self.hold > 0:
            self.held = action
        return action


@dataclass
class Clip:
    """One recorded clip: states[k], the action taken after it, the reward that step earned, the frames."""

    seed: int
    states: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    frames: list[np.ndarray] = field(default_factory=list)  # (210, 160, 3) uint8 each, when asked for


def start(
    game: Game | str,
    seed: int,
    policy: str = "mix",
    sticky: float = 0.0,
    warmup: int | None = None,
    score_max: int | None = None,
) -> tuple[Emulator, Policy]:
    """An emulator seeded with `seed` after its warm-up under the policy (0..warmup steps, drawn from the seed;
    None: the game's WARMUP_STEPS), and the policy (same seed, same run). `score_max`: then the player's score is
    set to one drawn from 0..score_max and one more step played, so that the screen shows it (scores that play
    seldom reaches, for a captioner to learn; Freeway)."""
    game = GAMES[game] if isinstance(game, str) else game
    rng = np.random.default_rng(seed)
    emu = Emulator(game, seed, sticky)
    act = Policy.make(policy, game, rng)
    most = WARMUP_STEPS.get(game.name, 500) if warmup is None else warmup
    for _ in range(int(rng.integers(0, most + 1))):
        emu.step(act(emu.ram()))
        if emu.over():
            emu.ale.reset_game()
    if score_max is not None:
        emu.set_score(int(rng.integers(0, score_max + 1)))
        emu.step(act(emu.ram()))
    return emu, act


def record_clip(
    game: Game | str,
    seed: int,
    length: int,
    policy: str = "mix",
    sticky: float = 0.0,
    frames: bool = True,
    warmup: int | None = None,
    score_max: int | None = None,
) -> Clip:
    """Record one clip of `length` states (fewer if the game ends first) from the emulator seeded with `seed`,
    after `start`'s warm-up (and score, with `score_max`)."""
    game = GAMES[game] if isinstance(game, str) else game
    if length < 1:
        raise ValueError(f"length must be >= 1, got {length}")
    emu, act = start(game, seed, policy, sticky, warmup, score_max)
    clip = Clip(seed)
    while len(clip.states) < length and not emu.over():
        ram = emu.ram()
        clip.states.append(game.spell(game.read(ram)))
        if frames:
            clip.frames.append(emu.screen())
        action = act(ram)
        clip.actions.append(action)
        clip.rewards.append(emu.step(action))
    return clip


def generate(
    game: Game | str,
    out: str | Path,
    *,
    clips: int,
    seed: int = 0,
    split: str = "train",
    length: int = 64,
    policy: str = "mix",
    sticky: float = 0.0,
    video: bool = True,
    progress: bool = True,
    warmup: int | None = None,
    score_max: int | None = None,
    **ignored: Any,
) -> Path:
    """Write `clips` clips of `game` into `out`: clips/NNNNNN.mp4 (15 states a second; with `video`) and one
    states.jsonl record per clip (states, actions, rewards, seed). Same arguments, same bytes. Returns the path
    of states.jsonl. `warmup`: the most steps played before a clip's first state (None: the game's WARMUP_STEPS).
    `score_max`: each clip's score set to one drawn from 0..score_max before its first state (see `start`).
    `ignored` takes the shapes world's options (size, workers) that mean nothing here."""
    from tqdm.auto import tqdm

    from pipeline.video import encode_mp4

    game = GAMES[game] if isinstance(game, str) else game
    if clips < 1:
        raise ValueError(f"--clips must be >= 1, got {clips}")
    if seed < 0:
        raise ValueError(f"--seed must be a non-negative integer, got {seed}")
    if warmup is not None and warmup < 0:
        raise ValueError(f"--warmup must be >= 0, got {warmup}")
    Policy.make(policy, game, np.random.default_rng(0))  # validates the policy before any file is written
    if score_max is not None:
        if score_max < 0:
            raise ValueError(f"--score-max must be >= 0, got {score_max}")
        if game.score_bytes(score_max) is None:  # (ValueError past the game's highest score)
            raise ValueError(f"--score-max: the {game.name} recorder cannot set the score")
    clip_seed(split, seed, 0)  # and the split
    root = Path(out)
    try:
        (root / "clips" if video else root).mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"--out {root}: cannot write there ({err.strerror or err})") from None
    path = root / "states.jsonl"
    with open(path, "w") as fh:
        for i in tqdm(range(clips), desc=f"{game.name} generate", unit="clip", disable=not progress):
            s = clip_seed(split, seed, i)
            clip = record_clip(
                game, s, length, policy, sticky, frames=video, warmup=warmup, score_max=score_max
            )
            record: dict[str, Any] = {"id": f"{split}-{seed}-{i:06d}"}
            if video:
                name = f"clips/{i:06d}.mp4"
                (root / name).write_bytes(encode_mp4(clip.frames, FPS, X264_PARAMS))
                record["clip"] = name
            record.update(
                fps=FPS,
                stride=1,
                game=game.name,
                seed=s,
                policy=policy,
                sticky=sticky,
                states=clip.states,
                actions=clip.actions,
                rewards=clip.rewards,
            )
            fh.write(json.dumps(record) + "\n")
    return path
