"""The renderer trainer's parts: the model it starts from (a fresh StableDiffusionPipeline layout with the world's
word-level tokenizer), its data (world states and their true frames, the reconstruction loss), and its files (the
saved diffusers folder, strips of samples, the log)."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from models.renderer import build_pipeline
from pipeline.renderer import RenderSettings
from pipeline.training.image_args import TrainRendererArgs
from pipeline.utils import atomic_dir, quiet_loading

logger = logging.getLogger(__name__)

LOG = "log.jsonl"  # one JSON line per logged step, in the run folder


# ---- the model -----------------------------------------------------------------------------------------
def build_tokenizer(max_length: int):  # -> transformers.PreTrainedTokenizerFast
    """semworld's word-level tokenizer over the world vocabulary, as a transformers fast tokenizer."""
    from pipeline.tokenizer import StateTokenizer
    from pipeline.training.captioner import world_sentences

    tokenizer = StateTokenizer.build(world_sentences()).to_transformers()
    tokenizer.model_max_length = max_length
    return tokenizer


def fresh_pipeline(args: TrainRendererArgs):  # -> diffusers.StableDiffusionPipeline
    """The randomly initialised pipeline `args` describe, with the world's word-level tokenizer."""
    with quiet_loading(diffusers=True):  # importing diffusers makes transformers note the absent torchvision
        return build_pipeline(args.model_config(), build_tokenizer(args.max_length))


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


def reconstruction_loss(
    recon: torch.Tensor, x: torch.Tensor, object_weight: float, symmetric: bool = True
) -> torch.Tensor:
    """Weighted L1 + MSE of frames (B, 3, H, W) in [-1, 1]. Objects cover a few percent of a frame: pixels that
    differ from the room's colour (the corner pixel) in the truth, and with `symmetric` also those that differ in
    the reconstruction, weigh object_weight times more, or the VAE learns the background long before the sprites.
    Symmetric, drawing a box's corners where a ball leaves the room visible costs as much as the converse (the
    truth's pixels alone let it draw every ball as a box); but from a random start every blurred halo of the
    reconstruction weighs as much as a sprite, so the VAE stage from scratch uses the truth's alone
    (TrainRendererArgs.vae_object_pixels)."""
    room = x[:, :, :1, :1]  # (B, 3, 1, 1)
    differs = (x - room).abs().sum(1, keepdim=True) > 0.05  # (B, 1, H, W)
    if symmetric:
        differs = differs | ((recon.detach() - room).abs().sum(1, keepdim=True) > 0.1)
    weight = 1.0 + (object_weight - 1.0) * differs.float()
    err = recon - x
    return (weight * (err.abs() + err**2)).mean() / weight.mean()


# ---- checkpoints and logs ------------------------------------------------------------------------------
def write_log(out: Path, record: dict[str, Any]) -> None:
    with open(out / LOG, "a") as fh:
        fh.write(json.dumps(record) + "\n")


def rng_state() -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state()}


def save_strip(path: Path, states: Sequence[str], frames: Sequence[np.ndarray], size: int) -> None:
    """A PNG of (truth | render) pairs, one pair per row."""
    from PIL import Image

    import world

    rows = []
    for s, f in zip(states, frames):
        t = world.render_state(s, size=f.shape[0])
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
) -> None:
    """save_pretrained (safetensors) + renderer.json into `directory`, swapped in atomically. Weights are stored
    in `dtype` (float16 halves the files; loading casts them back to the dtype asked for) from a copy, so the
    training weights keep their precision."""
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
        RenderSettings(steps=args.sample_steps, guidance=args.guidance, output_size=args.output_size).save(
            tmp
        )
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
