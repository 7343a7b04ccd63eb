"""The rendering stage: states written in words -> frames, through any local diffusers text-to-image checkpoint
(semworld's embedded renderer in weights/renderer/, or a real Stable Diffusion / SD-Turbo directory), offline only."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from pipeline.interfaces import StepCallback
from pipeline.utils import UserError, default_dtype, quiet_loading, read_user_json, resolve_device

logger = logging.getLogger(__name__)

# Optional file beside model_index.json with the sampling settings a checkpoint was made for.
DEFAULTS_FILE = "renderer.json"


@dataclass
class RenderSettings:
    """How to sample a checkpoint when the caller does not say.

    steps: denoising steps per frame (the embedded renderer is trained for few-step sampling).
    guidance: classifier-free guidance scale; <= 1 switches guidance off (one UNet pass per step, not two).
    height, width: the size the pipeline draws at; None takes the checkpoint's native size
        (unet sample_size x the VAE's scale factor).
    output_size: when set, frames are resized (bicubic) after drawing to output_size x output_size, or to
        (height, width) when it is a pair: a model that draws at 80 handing out the world's 128-pixel frames, or
        one that draws a game's 210 x 160 screen as a 160-pixel square.
    """

    steps: int = 25
    guidance: float = 7.5
    height: int | None = None
    width: int | None = None
    output_size: int | tuple[int, int] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.output_size, list):  # a pair, as JSON stores it
            self.output_size = tuple(self.output_size)  # type: ignore[assignment]
        if not isinstance(self.steps, int) or self.steps < 1:
            raise ValueError(f"steps must be a positive integer, got {self.steps!r}")
        if not isinstance(self.guidance, int | float) or self.guidance < 0:
            raise ValueError(f"guidance must be a number >= 0, got {self.guidance!r}")
        sides = self.output_size if isinstance(self.output_size, tuple) else (self.output_size,)
        if self.output_size is not None and (
            len(sides) not in (1, 2) or not all(isinstance(n, int) and n >= 8 for n in sides)
        ):
            raise ValueError(
                f"output_size must be an int >= 8, a (height, width) pair of them, or None, got {self.output_size!r}"
            )
        for name in ("height", "width"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 8 or value % 8):
                raise ValueError(f"{name} must be a multiple of 8 (>= 8) or None, got {value!r}")

    def describe(self) -> str:
        """In words, for the log: "4 steps, no guidance, native size, frames resized to 128 px"."""
        guidance = "no guidance" if self.guidance <= 1 else f"guidance {self.guidance:g}"
        size = f"{self.width}x{self.height}" if self.height and self.width else "native size"
        out = ""
        if isinstance(self.output_size, tuple):
            out = f", frames resized to {self.output_size[1]}x{self.output_size[0]}"
        elif self.output_size:
            out = f", frames resized to {self.output_size} px"
        return f"{self.steps} steps, {guidance}, {size}{out}"

    @classmethod
    def from_directory(cls, directory: Path) -> RenderSettings:
        """Settings stored in `directory/renderer.json`, or the generic defaults when there is none."""
        path = directory / DEFAULTS_FILE
        if not path.is_file():
            return cls()
        try:
            data = json.loads(path.read_text())
            known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
            return cls(**known)
        except (json.JSONDecodeError, TypeError, ValueError) as err:
            raise UserError(f"renderer weights {directory}: bad {DEFAULTS_FILE} ({err})") from err

    def save(self, directory: str | os.PathLike) -> None:
        Path(directory, DEFAULTS_FILE).write_text(json.dumps(asdict(self), indent=2) + "\n")


def _check_directory(directory: Path) -> None:
    """One clear UserError for a directory that cannot hold a diffusers text-to-image checkpoint."""
    what = "a diffusers text-to-image checkpoint (model_index.json plus its component folders)"
    components = read_user_json(directory, "model_index.json", what, "renderer weights")
    missing = [
        name
        for name in ("unet", "vae", "text_encoder", "tokenizer", "scheduler")
        if name in components and components[name] and components[name][0] and not (directory / name).is_dir()
    ]
    if missing:
        raise UserError(
            f"renderer weights {directory}: model_index.json names missing folders: {', '.join(missing)}"
        )


class Renderer:
    """Draws the frame of each state: `render(states) -> list of (H, W, 3) uint8 arrays`, in one pass (the
    pipeline decides the batches; successive calls draw their noise from the same generator in turn)."""

    def __init__(self, pipe, settings: RenderSettings | None = None, directory: Path | None = None) -> None:
        self.pipe = pipe
        self.settings = settings or RenderSettings()
        self.directory = directory
        self.pipe.set_progress_bar_config(disable=True)

    @classmethod
    def from_pretrained(
        cls,
        directory: str | os.PathLike,
        device: str | torch.device | None = None,
        dtype: torch.dtype | None = None,
    ) -> Renderer:
        """Load any local diffusers text-to-image checkpoint, offline (never remote code).

        device: None picks CUDA when present, else CPU. dtype: None gives `pipeline.utils.default_dtype`.
        A missing or malformed directory raises one `UserError` naming it and what was expected.
        """
        path = Path(directory).expanduser()
        _check_directory(path)
        device = resolve_device(device)
        dtype = dtype or default_dtype(device)
        try:
            with quiet_loading(
                diffusers=True
            ):  # the import too: it is what makes transformers note torchvision
                from diffusers import AutoPipelineForText2Image

                pipe = AutoPipelineForText2Image.from_pretrained(
                    str(path), dtype=dtype, local_files_only=True
                )
        except Exception as err:  # diffusers raises OSError, ValueError, KeyError... for broken checkpoints
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise UserError(
                f"renderer weights {path}: could not load a diffusers text-to-image pipeline ({first})"
            ) from err
        pipe = pipe.to(device)
        settings = RenderSettings.from_directory(path)
        logger.info("renderer %s loaded on %s (%s): %s", path, device, dtype, settings.describe())
        return cls(pipe, settings, path)

    @property
    def device(self) -> torch.device:
        return self.pipe.device

    @property
    def default_steps(self) -> int:
        """Denoising steps per frame when a call does not say."""
        return self.settings.steps

    @property
    def draw_size(self) -> tuple[int, int]:
        """(height, width) the pipeline draws at."""
        scale = getattr(self.pipe, "vae_scale_factor", 8)
        native = self.pipe.unet.config.sample_size
        native = native if isinstance(native, int) else native[0]
        return (self.settings.height or native * scale, self.settings.width or native * scale)

    @property
    def size(self) -> tuple[int, int]:
        """(height, width) of the frames `render` returns."""
        out = self.settings.output_size
        if isinstance(out, tuple):
            return out
        if out:
            return (out, out)
        return self.draw_size

    @torch.inference_mode()
    def render(
        self,
        states: Sequence[str],
        generator: torch.Generator | None = None,
        steps: int | None = None,
        guidance: float | None = None,
        step_callback: StepCallback | None = None,
    ) -> list[np.ndarray]:
        """Frames for `states`, one (H, W, 3) uint8 array per state, in order.

        Randomness comes only from `generator`; None uses a fresh generator seeded 0, so the same call
        gives the same frames. `step_callback()` runs after every denoising step (diffusers' step-end
        callback); whatever it raises stops the render there and propagates unchanged.
        """
        # 1. check inputs
        if isinstance(states, str) or not isinstance(states, Sequence):
            raise ValueError(f"states must be a list of strings, got {type(states).__name__}")
        bad = [s for s in states if not isinstance(s, str) or not s.strip()]
        if bad:
            raise ValueError(f"states must be non-empty strings, got {bad[0]!r}")
        settings = RenderSettings(
            steps=self.settings.steps if steps is None else steps,
            guidance=self.settings.guidance if guidance is None else guidance,
            height=self.settings.height,
            width=self.settings.width,
            output_size=self.settings.output_size,
        )
        if generator is not None and not isinstance(generator, torch.Generator):
            raise ValueError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
        if not states:
            return []
        # 2. denoise and decode all states in one pass; output_type="np" gives (B, H, W, 3) floats in [0, 1]
        generator = generator if generator is not None else torch.Generator("cpu").manual_seed(0)
        height, width = self.draw_size
        on_step_end = None
        if step_callback is not None:

            def on_step_end(pipe, step: int, timestep, tensors: dict) -> dict:  # type: ignore[no-untyped-def]
                step_callback()
                return tensors

        images = self.pipe(
            prompt=list(states),
            num_inference_steps=settings.steps,
            guidance_scale=float(settings.guidance),
            generator=generator,
            height=height,
            width=width,
            output_type="np",
            callback_on_step_end=on_step_end,
        ).images
        # 3. to uint8, resized to the output size when the checkpoint asks for it
        frames = [
            _resize(image, self.size)
            for image in np.clip(np.rint(np.asarray(images) * 255.0), 0, 255).astype(np.uint8)
        ]
        return frames


def _resize(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    if image.shape[:2] == size:
        return image
    from PIL import Image

    return np.asarray(Image.fromarray(image).resize((size[1], size[0]), Image.Resampling.BICUBIC))
