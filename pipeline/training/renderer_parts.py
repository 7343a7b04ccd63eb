"""The renderer trainer's parts: the model it starts from (a fresh StableDiffusionPipeline layout with the domain's
word-level tokenizer), its data (states and their true frames: drawn by the built-in world, or recorded from a
game's clips; the reconstruction loss), and its files (the saved diffusers folder, strips of samples, the log)."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from models.renderer import build_pipeline
from pipeline.domain import Domain, get_domain
from pipeline.evaluation.metrics import evaluate_frames, evaluate_screens
from pipeline.renderer import RenderSettings
from pipeline.training.image_args import TrainRendererArgs
from pipeline.training.recorded_frames import RecordedFrames
from pipeline.utils import atomic_dir, quiet_loading

logger = logging.getLogger(__name__)

LOG = "log.jsonl"  # one JSON line per logged step, in the run folder


# ---- the model -----------------------------------------------------------------------------------------
def build_tokenizer(max_length: int, domain: Domain | None = None):  # -> transformers.PreTrainedTokenizerFast
    """semworld's word-level tokenizer over the domain's vocabulary (default: the built-in world's), as a
    transformers fast tokenizer."""
    from pipeline.tokenizer import StateTokenizer
    from pipeline.training.captioner import domain_sentences

    tokenizer = StateTokenizer.build(domain_sentences(domain or get_domain("shapes"))).to_transformers()
    tokenizer.model_max_length = max_length
    return tokenizer


def fresh_pipeline(args: TrainRendererArgs):  # -> diffusers.StableDiffusionPipeline
    """The randomly initialised pipeline `args` describe, with its domain's word-level tokenizer."""
    with quiet_loading(diffusers=True):  # importing diffusers makes transformers note the absent torchvision
        return build_pipeline(args.model_config(), build_tokenizer(args.max_length, get_domain(args.domain)))


def count_parameters(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


# ---- data ----------------------------------------------------------------------------------------------
def scene_states(seed: int, n: int, count_weights: Sequence[float]) -> list[str]:
    """`n` random valid world states (uniform over identities and cells, object counts by `count_weights`)."""
    from pipeline.training.captioner import sample_scene
    from world.grammar import caption

    rng = np.random.default_rng(np.random.SeedSequence([seed, 4]))
    return [caption(sample_scene(rng, count_weights)) for _ in range(n)]


def eval_states(seed: int, n: int) -> list[str]:
    """`n` distinct states from test-split world sequences (the states the pipeline will be asked to draw)."""
    import world

    seen: dict[str, None] = {}
    clips = 0
    while len(seen) < n and clips < 100 * n:
        for record in world.sequences("all", 64, seed + clips, split="test"):
            for state in record["states"]:
                seen.setdefault(state, None)
        clips += 64
    states = list(seen)
    rng = np.random.default_rng(seed)
    rng.shuffle(states)
    return states[:n]


VARIED_SEED = (
    2026  # the varied set's seed in reports (bench/renderer_quality.py); training chooses by another
)


def varied_states(per_count: int, seed: int = VARIED_SEED) -> list[str]:
    """A fixed validation set of varied scenes: every state without objects, then `per_count`
    distinct random valid states with exactly 1, 2 and 3 objects."""
    states = ["empty .", "screen .", "lamp on .", "lamp off .", "screen , lamp on .", "screen , lamp off ."]
    for count in (1, 2, 3):
        weights = [1.0 if k == count else 0.0 for k in range(4)]
        seen: dict[str, None] = {}
        draw = 0
        while len(seen) < per_count:
            for s in scene_states(seed + 10 * count + draw, 4 * per_count, weights):
                if len(seen) < per_count:
                    seen.setdefault(s, None)
            draw += 1
        states += list(seen)
    return states


def validation_states(args: TrainRendererArgs) -> list[str]:
    """The states every periodic evaluation draws (and `best/` is chosen by): `eval_states` distinct test-split
    world states, or with eval_set "varied" the varied set with eval_states // 3 scenes per object count, seeded
    apart from the reported one."""
    if args.eval_set == "varied":
        return varied_states(max(1, args.eval_states // 3), seed=args.seed + 1000)
    return eval_states(args.seed + 1000, args.eval_states)


def frames_of(states: Sequence[str], size: int, render_size: int | None = None) -> torch.Tensor:
    """Ground-truth frames as a float batch in [-1, 1], (B, 3, size, size); drawn by the world at `render_size`
    (default: `size`) and resized (bicubic) to `size`."""
    from PIL import Image

    import world

    render_size = render_size or size
    arr = [world.render_state(s, size=render_size) for s in states]
    if render_size != size:
        arr = [np.asarray(Image.fromarray(f).resize((size, size), Image.Resampling.BICUBIC)) for f in arr]
    x = torch.from_numpy(np.stack(arr)).permute(0, 3, 1, 2)  # (B, H, W, 3) -> (B, 3, H, W)
    return x.float().div(127.5).sub(1.0)


BLOB = 16  # changed pixels in a 9 x 9 neighbourhood that get the full object weight (reconstruction_loss)


def static_background(frames: torch.Tensor) -> torch.Tensor:
    """What never moves in frames (N, 3, H, W): their per-pixel median, (3, H, W)."""
    return frames.median(dim=0).values


class DrawnScenes:
    """States of the built-in world whose frames are drawn when asked (at render_size, resized to size)."""

    background: str | torch.Tensor = "corner"  # the room's colour fills the corner (reconstruction_loss)

    def __init__(self, states: Sequence[str], size: int, render_size: int, by_objects: bool = False) -> None:
        self.states = list(states)
        self.size, self.render_size, self.by_objects = size, render_size, by_objects

    def __len__(self) -> int:
        return len(self.states)

    def frames(self, idx: Sequence[int]) -> torch.Tensor:
        """The true frames of states idx, (B, 3, size, size) in [-1, 1]."""
        return frames_of([self.states[i] for i in idx], self.size, self.render_size)

    def shown(self, i: int) -> np.ndarray:
        """State i's true frame as the renderer should draw it, (size, size, 3) uint8 (for strips)."""
        import world

        return world.render_state(self.states[i], size=self.size)

    def evaluate(self, frames: Sequence[np.ndarray], captioner: Any = None) -> dict[str, float]:
        """Drawn frames of every state against the world's (metrics.evaluate_frames)."""
        return evaluate_frames(self.states, frames, captioner, by_objects=self.by_objects)


class RecordedScenes:
    """States with the screens a recording domain's clips show them with: `screens` (F, H, W, 3) as recorded,
    and `square` (F, size, size, 3), the same resized (bicubic) to the side the renderer draws."""

    def __init__(self, domain: Domain, recorded: RecordedFrames, size: int) -> None:
        from PIL import Image

        self.domain, self.states, self.screens = domain, recorded.states, recorded.frames
        square = [Image.fromarray(f).resize((size, size), Image.Resampling.BICUBIC) for f in recorded.frames]
        self.square = np.stack([np.asarray(f) for f in square])  # (F, size, size, 3)
        self.background = static_background(self.frames(range(0, len(self), max(1, len(self) // 512))))

    def __len__(self) -> int:
        return len(self.states)

    @property
    def screen_size(self) -> tuple[int, int]:
        """(height, width) of the recorded screens: what the saved renderer hands out."""
        return (int(self.screens.shape[1]), int(self.screens.shape[2]))

    def frames(self, idx: Sequence[int]) -> torch.Tensor:
        """The true frames of states idx, (B, 3, size, size) in [-1, 1]."""
        x = torch.from_numpy(self.square[list(idx)]).permute(0, 3, 1, 2)  # (B, H, W, 3) -> (B, 3, H, W)
        return x.float().div(127.5).sub(1.0)

    def shown(self, i: int) -> np.ndarray:
        return self.square[i]

    def evaluate(self, frames: Sequence[np.ndarray], captioner: Any = None) -> dict[str, float]:
        """Drawn frames, resized to the screens' size, against the recorded screens (metrics.evaluate_screens)."""
        return evaluate_screens(self.domain, self.states, frames, list(self.screens), captioner)


def reconstruction_loss(
    recon: torch.Tensor,
    x: torch.Tensor,
    object_weight: float,
    symmetric: bool = True,
    background: str | torch.Tensor = "corner",
) -> torch.Tensor:
    """Weighted L1 + MSE of frames (B, 3, H, W) in [-1, 1]. Objects cover a few percent of a frame: pixels that
    differ from the background in the truth, and with `symmetric` also those that differ in the reconstruction,
    weigh object_weight times more, or the VAE learns the background long before the sprites. The background is
    the corner pixel's colour ("corner": the built-in world's room) or a frame (3, H, W) of what never moves (a
    game's screen: its walls and court, the per-pixel median of its frames, so that the weight goes to the few
    pixels that change, the paddles and the ball, and not to the walls, which are as white as the ball). Against
    a static frame, each changed pixel's extra weight is also divided by how crowded its 9 x 9 neighbourhood is
    with changed pixels (relative to `BLOB` of them): a 2 x 3 ball then weighs about as much as a 4 x 16 paddle,
    where by pixel count it would weigh an eighth, too little for the VAE ever to draw it.
    Symmetric, drawing a box's corners where a ball leaves the room visible costs as much as the converse (the
    truth's pixels alone let it draw every ball as a box); but from a random start every blurred halo of the
    reconstruction weighs as much as a sprite, so the VAE stage from scratch uses the truth's alone
    (TrainRendererArgs.vae_object_pixels)."""
    if isinstance(background, torch.Tensor):
        room = background[None]  # (1, 3, H, W)
    elif background == "corner":
        room = x[:, :, :1, :1]  # (B, 3, 1, 1)
    else:
        raise ValueError(f"background must be 'corner' or a (3, H, W) frame, got {background!r}")
    # Against a static frame, H.264's ringing around every moving object differs by ~0.1: not an object.
    threshold = 0.3 if isinstance(background, torch.Tensor) else 0.05
    differs = (x - room).abs().sum(1, keepdim=True) > threshold  # (B, 1, H, W)
    if symmetric:
        differs = differs | ((recon.detach() - room).abs().sum(1, keepdim=True) > 0.1)
    extra = differs.float()  # (B, 1, H, W)
    if isinstance(background, torch.Tensor):
        crowd = torch.nn.functional.avg_pool2d(extra, 9, stride=1, padding=4, count_include_pad=False) * 81
        extra = extra * BLOB / crowd.clamp(min=1.0)
    weight = 1.0 + (object_weight - 1.0) * extra
    err = recon - x
    return (weight * (err.abs() + err**2)).mean() / weight.mean()


# ---- checkpoints and logs ------------------------------------------------------------------------------
def write_log(out: Path, record: dict[str, Any]) -> None:
    with open(out / LOG, "a") as fh:
        fh.write(json.dumps(record) + "\n")


def rng_state() -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state()}


def save_strip(path: Path, truth: Sequence[np.ndarray], frames: Sequence[np.ndarray]) -> None:
    """A PNG of (truth | render) pairs, one pair per row."""
    from PIL import Image

    rows = []
    for t, f in zip(truth, frames):
        rows.append(np.concatenate([t, np.full((f.shape[0], 4, 3), 255, np.uint8), f], axis=1))
    strip = np.concatenate(rows, axis=0)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(strip).save(path)


def save_renderer(
    pipe,
    args: TrainRendererArgs,
    directory: Path,
    metrics: dict[str, Any] | None = None,
    dtype: torch.dtype = torch.float16,
    output_size: int | tuple[int, int] | None = None,
) -> None:
    """save_pretrained (safetensors) + renderer.json into `directory`, swapped in atomically. Weights are stored
    in `dtype` (float16 halves the files; loading casts them back to the dtype asked for) from a copy, so the
    training weights keep their precision. output_size: the frames' size the renderer hands out (default
    args.output_size)."""
    import copy

    stored = pipe
    if dtype != pipe.unet.dtype:
        stored = copy.deepcopy(pipe)
        # nn.Module.to itself: diffusers' ModelMixin.to warns on every dtype cast, even with no fp32 module to keep
        for module in stored.components.values():
            if isinstance(module, torch.nn.Module):
                torch.nn.Module.to(module, dtype=dtype)
    with (
        atomic_dir(directory) as tmp,
        quiet_loading(diffusers=True),
    ):  # no "Writing model shards" bar per save
        stored.save_pretrained(tmp, safe_serialization=True)
        RenderSettings(
            steps=args.sample_steps if args.shipped_steps is None else args.shipped_steps,
            guidance=args.guidance,
            output_size=output_size or args.output_size,
        ).save(tmp)
        if metrics is not None:
            (tmp / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")


# ---- sampling ------------------------------------------------------------------------------------------
@torch.no_grad()
def sample(pipe, states: Sequence[str], steps: int, guidance: float, seed: int) -> list[np.ndarray]:
    """Frames (image_size, image_size, 3) uint8 drawn by the pipeline (no resize), eval mode."""
    for m in (pipe.unet, pipe.text_encoder, pipe.vae):
        m.eval()
    images = pipe(
        prompt=list(states),
        num_inference_steps=steps,
        guidance_scale=guidance,
        generator=torch.Generator("cpu").manual_seed(seed),
        output_type="np",
    ).images
    return list(np.clip(np.rint(np.asarray(images) * 255.0), 0, 255).astype(np.uint8))
