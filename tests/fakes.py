"""Stand-ins shared across the tests: stages that need no weights (fast, deterministic, with the real ones'
interfaces), a toy domain, plug-in stage factories, and tiny random real stages saved like the shipped weights.

`make_pipeline` is also a `SEMWORLD_PIPELINE_FACTORY` target, for servers started in a subprocess.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pipeline.world_model import WorldModelPipeline


class Stop(Exception):
    """What a callback made by `stop_at` raises."""


def stop_at(n: int, calls: list[int]) -> Callable[[], None]:
    """A progress callback that counts its calls in `calls` and raises Stop at the n-th (a cancel, a deadline)."""

    def callback() -> None:
        calls.append(1)
        if len(calls) == n:
            raise Stop

    return callback


class BrightnessCaptioner:
    """States in words from the frame's mean brightness, so tests can check which frame gave which state; `batches`
    records the size of every batch it was given."""

    def __init__(self) -> None:
        self.batches: list[int] = []

    def caption(self, frames: list[np.ndarray]) -> list[str]:
        self.batches.append(len(frames))
        return [f"a scene of brightness {int(f.mean()) // 16}." for f in frames]


class EchoPredictor:
    def predict(self, states: list[list[str]], k: int, truncate: bool = False) -> list[list[str]]:
        return [[f"next {i} after {seq[-1]}" for i in range(k)] for seq in states]


class WorldCaptioner:
    """Frames as states of the built-in world: a red ball in the middle row, its column from the brightness."""

    def caption(self, frames: list[np.ndarray]) -> list[str]:
        from world.grammar import COLUMNS

        return [f"red ball middle {COLUMNS[int(f.mean()) // 8 % 5]} , lamp on ." for f in frames]


def accepts(automaton: Any, words: Sequence[str]) -> bool:
    """Whether a pipeline.domain.StateAutomaton reads `words` as one whole state."""
    prefix = automaton.start()
    for w in words:
        nxt = automaton.step(prefix)
        if w not in nxt:
            return False
        prefix = nxt[w]
    return bool(automaton.done(prefix))


def world_step(state: str) -> str:
    """The next state of WorldPredictor: every object one column right (from the right edge back to the left),
    the lamp switched, the screen taken away (so that no object stands in front of it). After "empty ." it says
    "empty room .", which is not a world state (a predictor may write such states; they are marked, not hidden)."""
    import dataclasses

    from pipeline.utils import canonical_state
    from world.grammar import GRID, Scene, caption, parse_state

    try:
        scene = parse_state(canonical_state(state))
    except ValueError:
        return state  # not a world state: it stays as it is
    if not scene.objects and scene.lamp is None:
        return "empty room ."
    moved = tuple(sorted(dataclasses.replace(o, col=(o.col + 1) % GRID) for o in scene.objects))
    return caption(Scene(moved, False, None if scene.lamp is None else not scene.lamp))


class WorldPredictor:
    """World states in, the next ones by `world_step` out (a stand-in for the shipped predictor)."""

    def predict(self, states: list[list[str]], k: int, truncate: bool = False) -> list[list[str]]:
        out = []
        for history in states:
            rolled = [history[-1]]
            for _ in range(k):
                rolled.append(world_step(rolled[-1]))
            out.append(rolled[1:])
        return out


@dataclass(eq=False)  # compared (and hashed) by identity, as a model is
class NoiseRenderer:
    """Seeded noise frames; `delay` seconds per batch, and an optional gate it waits on (to hold a job).

    With `step_delay`, each batch is `steps` (default `default_steps`) denoising steps of that many seconds,
    with `step_callback` after each, like a diffusers pipeline; `steps_run` counts them and `last_step_end`
    is the monotonic time the last one ended (how long the model stayed busy).
    """

    delay: float = 0.0
    gate: threading.Event | None = None
    step_delay: float = 0.0
    default_steps: int = 4
    calls: int = field(default=0, init=False)
    batches: list[int] = field(default_factory=list, init=False)  # the size of every batch it was given
    steps_run: int = field(default=0, init=False)
    last_step_end: float = field(default=0.0, init=False)

    def render(self, states, generator=None, steps=None, guidance=None, step_callback=None):
        self.calls += 1
        self.batches.append(len(states))
        if self.gate is not None:
            self.gate.wait(30)
        if self.delay:
            time.sleep(self.delay)
        if self.step_delay:
            for _ in range(steps or self.default_steps):
                time.sleep(self.step_delay)
                self.steps_run += 1
                self.last_step_end = time.monotonic()
                if step_callback is not None:
                    step_callback()
        g = generator or torch.Generator().manual_seed(0)
        return [(torch.rand(24, 32, 3, generator=g) * 255).to(torch.uint8).numpy() for _ in states]


class ActionEchoPredictor:
    """A stand-in predictor with actions: each forecast state names the action taken before it ("after up",
    "after unknown" when none was given)."""

    actions = ("stay", "up", "down")

    def predict(self, states: list[list[str]], k: int, truncate: bool = False) -> list[list[str]]:
        return self.predict_under(states, k, None, truncate)[0]

    def predict_under(
        self, states: list[list[str]], k: int, actions: Any = None, truncate: bool = False
    ) -> tuple[list[list[str]], list[list[str | None]]]:
        out, used = [], []
        for b, history in enumerate(states):
            acts = [*(actions[b] if actions else []), *[None] * (len(history) + k)]
            out.append(self.forecast(history, acts[len(history) - 1 : len(history) - 1 + k]))
            used.append(acts[len(history) : len(history) + k - 1])
        return out, used

    def forecast(self, history: list[str], actions: list[str | None]) -> list[str]:
        """One history's forecast, a state per action (actions[j] leads to forecast state j)."""
        return [f"after {a or 'unknown'}" for a in actions]


class PongPhysicsPredictor(ActionEchoPredictor):
    """A stand-in Pong predictor with simple known physics in the pong domain's words: the player's paddle moves 3
    a step under "down" (3 up under "up"), the ball keeps the velocity of its last two states (else +1, +1) and
    bounces off y 11 and 51, comes back off the paddle when it meets it at x 47 (ball y - paddle y in 0..5) and
    otherwise gives the computer a point; the computer's paddle sits on the ball's y. A history that is not Pong
    (the service's warm-up reads a blank frame) stays as it is."""

    def forecast(self, history: list[str], actions: list[str | None]) -> list[str]:
        from pipeline.domains.atari.games import GAMES

        pong = GAMES["pong"]
        try:
            seen = [pong.parse(s) for s in history]
        except ValueError:
            return [history[-1]] * len(actions)
        now, before = seen[-1], seen[-2] if len(seen) > 1 else None
        v = (1, 1)
        if now["ball"] and before and before["ball"]:
            v = (now["ball"]["x"] - before["ball"]["x"] or 1, now["ball"]["y"] - before["ball"]["y"] or 1)
        rollout = []
        for action in actions:
            step = {"stay": 0, "up": -3, "down": 3}.get(action or "stay", 0)
            now = {**now, "player": min(max(now["player"] + step, 9), 50), "score": dict(now["score"])}
            if now["ball"]:
                x, y = now["ball"]["x"] + v[0], now["ball"]["y"] + v[1]
                if not 11 <= y <= 51:
                    v, y = (v[0], -v[1]), min(max(y, 11), 51)
                if x >= 47 and v[0] > 0:
                    if 0 <= y - now["player"] <= 5:
                        v, x = (-v[0], v[1]), 94 - x  # off the paddle at 47
                    else:
                        now["score"]["enemy"] += 1
                        now = {**now, "ball": None}
                if now["ball"]:
                    now = {**now, "ball": {"x": x, "y": y}, "enemy": y}
            rollout.append(pong.spell(now))
        return rollout


def make_pipeline(
    delay: float | None = None, step_delay: float | None = None, world: bool | None = None
) -> WorldModelPipeline:
    """The stand-in pipeline; FAKE_RENDER_DELAY (seconds per batch) and FAKE_STEP_DELAY (seconds per denoising
    step) slow it down for servers in a subprocess; FAKE_WORLD=1 (or `world`) speaks the built-in world's
    language (WorldCaptioner, WorldPredictor, grammar "world") instead of free sentences."""
    delay = float(os.environ.get("FAKE_RENDER_DELAY", "0")) if delay is None else delay
    step_delay = float(os.environ.get("FAKE_STEP_DELAY", "0")) if step_delay is None else step_delay
    world = os.environ.get("FAKE_WORLD", "") == "1" if world is None else world
    renderer = NoiseRenderer(delay, step_delay=step_delay)
    if os.environ.get("FAKE_ACTIONS", "") == "1":  # a predictor with actions (ActionEchoPredictor)
        return WorldModelPipeline(BrightnessCaptioner(), ActionEchoPredictor(), renderer, render_batch_size=2)
    if (
        os.environ.get("FAKE_UNSURE", "") == "1"
    ):  # every read far below the threshold: each clip gets a warning
        captioner = UnsureWorldCaptioner() if world else UnsureCaptioner()
        return WorldModelPipeline(captioner, WorldPredictor() if world else EchoPredictor(), renderer,
                                  render_batch_size=2, domain="shapes" if world else None,
                                  confidence_threshold=-0.01)  # fmt: skip
    if world:
        return WorldModelPipeline(
            WorldCaptioner(), WorldPredictor(), renderer, render_batch_size=2, domain="shapes"
        )
    return WorldModelPipeline(BrightnessCaptioner(), EchoPredictor(), renderer, render_batch_size=2)


class UnsureCaptioner(BrightnessCaptioner):
    """BrightnessCaptioner's states, each scored far below any threshold (as on footage the model never saw)."""

    def caption_scored(self, frames: list[np.ndarray]) -> list[tuple[str, float]]:
        return [(s, -0.5) for s in self.caption(frames)]


class UnsureWorldCaptioner(WorldCaptioner):
    def caption_scored(self, frames: list[np.ndarray]) -> list[tuple[str, float]]:
        return [(s, -0.5) for s in self.caption(frames)]


def tiny_four_tensor(tokenizer: Any, N: int, T: int = 4, memory: Any = None) -> Any:  # -> FourTensorModel
    """A randomly initialised one-layer 4-tensor model of width 8 x 4 (two heads) for `tokenizer`'s vocabulary
    and sentence ends, with N token slots per state, windows of T states and an optional TensorMemoryConfig
    (seed torch before it to get the same weights)."""
    from models.four_tensor import FourTensorConfig, FourTensorModel

    return FourTensorModel(
        FourTensorConfig(vocab_size=tokenizer.vocab_size, d_x=8, d_t=4, n_heads=2, n_layers=1, N=N, T=T,
                         end_ids=tokenizer.end_ids, memory=memory)
    )  # fmt: skip


def build_action_weights(root: Path) -> Path:
    """A weights folder of a game with a predictor alone: a tiny random 4-tensor model for Pong states with the
    action slot (its tokenizer knows stay/up/down), and model_index.json naming the pong domain."""
    from pipeline.tokenizer import StateTokenizer

    if (root / "model_index.json").is_file():
        return root
    torch.manual_seed(0)
    words = " ".join(str(i) for i in range(64))
    states = StateTokenizer.build([f"ball none player enemy score {words} ."], actions=("stay", "up", "down"))
    tiny_four_tensor(states, N=13).save_pretrained(root / "predictor")
    states.save(root / "predictor")
    index = {"domain": "pong", "state_rate": 15.0, "predictor": ["semworld", "FourTensorModel"]}
    (root / "model_index.json").write_text(json.dumps(index, indent=2) + "\n")
    return root


def build_tiny_weights(root: Path) -> Path:
    """A weights folder of tiny randomly initialised real stages: BLIP captioner, 4-tensor predictor with its
    tokenizer, and a StableDiffusionPipeline-layout renderer, each saved with save_pretrained, plus
    model_index.json. Their outputs are nonsense; their structure, files and loading are the real ones.

    """
    from models.captioner import CaptionerConfig, build_blip, build_processor
    from pipeline.tokenizer import StateTokenizer
    from pipeline.training.captioner import build_tokenizer, world_sentences
    from pipeline.training.image_args import TrainRendererArgs
    from pipeline.training.renderer_parts import fresh_pipeline, save_renderer

    if (root / "model_index.json").is_file():  # built earlier in this session: the index is written last
        return root
    torch.manual_seed(0)
    root.mkdir(parents=True, exist_ok=True)
    sentences = world_sentences()
    tokenizer = build_tokenizer(sentences)
    config = CaptionerConfig(image_size=32, patch_size=8, vision_layers=1, text_layers=1, hidden=32, heads=2)
    build_blip(config, tokenizer).save_pretrained(root / "captioner")
    build_processor(tokenizer, config.image_size).save_pretrained(root / "captioner")

    states = StateTokenizer.build(sentences)
    predictor = tiny_four_tensor(states, N=12)
    predictor.save_pretrained(root / "predictor")
    states.save(root / "predictor")

    args = TrainRendererArgs(
        out=str(root / "run"), image_size=32, output_size=32, vae_channels=(8, 16), unet_channels=(16, 32),
        text_width=32, text_layers=1, max_length=16, sample_steps=2,
    )  # fmt: skip
    save_renderer(fresh_pipeline(args), args, root / "renderer")
    index = {"captioner": "captioner", "predictor": "predictor", "renderer": "renderer"}
    (root / "model_index.json").write_text(json.dumps(index, indent=2) + "\n")
    return root


def build_quick_game_stage(
    root: Path, stage: str | list[str], game: str = "pong"
) -> tuple[dict[str, Any], dict[str, Any]]:
    """`semworld train all --quick --domain GAME --stages STAGE...` into root/w (runs in root/run): the summary
    and the model_index.json it wrote."""
    from pipeline.training.all import train_all
    from pipeline.training.args import TrainAllArgs

    stages = [stage] if isinstance(stage, str) else stage
    summary = train_all(TrainAllArgs(out=str(root / "w"), run_dir=str(root / "run"), domain=game, stages=stages,
                                     quick=True, progress=False))  # fmt: skip
    return summary, json.loads((root / "w" / "model_index.json").read_text())


class ToyDomain:
    """A domain of two states, "up" and "down"; a change between them is a "flip"."""

    name = "toy"
    description = "a switch that is up or down"
    actions: tuple[str, ...] = ()
    vocabulary: frozenset[str] | None = frozenset({"up", "down"})
    max_tokens: int | None = 1
    mirror: Mapping[str, str] | None = {"up": "down", "down": "up"}
    confidence_threshold: float | None = None
    caption_tokens: int | None = 4
    unsure_hint = "the switch is hard to see"

    def spell(self, text: str) -> str:
        return text.strip().lower()

    def parse(self, text: str) -> dict[str, Any] | None:
        if self.spell(text) not in ("up", "down"):
            raise ValueError(f"{text!r} is not up or down")
        return {"position": self.spell(text)}

    def changes(self, previous: str, current: str) -> list[str]:
        return [] if self.spell(previous) == self.spell(current) else ["flip"]

    def automaton(self, max_tokens: int) -> None:
        return None

    def sample_clips(self, seed: int = 0) -> list:
        return []

    def draw(self, state: str, size: int) -> np.ndarray | None:
        return np.full((size, size, 3), 255 if self.spell(state) == "up" else 0, dtype=np.uint8)


class FlipStages:
    """All three stages of the toy world: a frame's brightness is its state, each step flips the switch, and a
    state is drawn white (up) or black (down)."""

    default_steps = 1

    def caption(self, frames: Sequence[np.ndarray]) -> list[str]:
        return ["up" if f.mean() > 127 else "down" for f in frames]

    def predict(self, histories: Sequence[Sequence[str]], k: int, truncate: bool = False) -> list[list[str]]:
        out = []
        for h in histories:
            last, states = h[-1], []
            for _ in range(k):
                last = "down" if last == "up" else "up"
                states.append(last)
            out.append(states)
        return out

    def render(self, states: Sequence[str], **kwargs: Any) -> list[np.ndarray]:
        return [ToyDomain().draw(s, 32) for s in states]  # type: ignore[misc]


def make_flip_stage(folder: Any, device: Any = None, dtype: Any = None, domain: Any = None) -> FlipStages:
    """A plug-in stage factory, as model_index.json names one: `["tests.fakes", "make_flip_stage"]`."""
    return FlipStages()
