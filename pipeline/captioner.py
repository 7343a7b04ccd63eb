"""The captioning stage: frames in, textual semantic states out.

`Captioner` wraps any local Hugging Face image-to-text checkpoint (our embedded BLIP, a real BLIP or GIT
directory) loaded offline through `AutoProcessor` + `AutoModelForImageTextToText`, and spells what it generates
as the weights' domain spells a state (`Domain.spell`; free text: as written, white space collapsed).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pipeline.domain import Domain
from pipeline.utils import (
    UserError,
    default_dtype,
    quiet_loading,
    read_user_json,
    resolve_device,
)

logger = logging.getLogger(__name__)

# New tokens per caption when neither the domain (`Domain.caption_tokens`) nor the checkpoint's generation config
# says: room for a sentence of a real captioner's sub-word pieces.
DEFAULT_MAX_NEW_TOKENS = 40

_WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
_TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer.model", "vocab.json")


def _check_checkpoint_dir(directory: Path) -> None:
    """Raise one `UserError` naming the directory and the first thing an image-to-text checkpoint lacks."""
    what = "an image-to-text checkpoint (config.json, weights, processor and tokenizer files)"
    config = read_user_json(directory, "config.json", what, "captioner weights")
    if not isinstance(config, dict) or "model_type" not in config:
        raise UserError(f"captioner weights directory {directory}: config.json has no model_type")

    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    model_type = config["model_type"]
    if model_type not in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES:
        raise UserError(
            f"captioner weights directory {directory} holds a {model_type!r} model, which is not an "
            "image-to-text model (expected e.g. blip or git)"
        )
    if not any((directory / name).is_file() for name in _WEIGHT_FILES):
        raise UserError(f"captioner weights directory {directory} has no model weights (model.safetensors)")
    has_image_processor = (directory / "preprocessor_config.json").is_file()
    processor_config = directory / "processor_config.json"
    if not has_image_processor and processor_config.is_file():
        try:
            has_image_processor = "image_processor" in json.loads(processor_config.read_text())
        except (OSError, ValueError):
            has_image_processor = False
    if not has_image_processor:
        raise UserError(
            f"captioner weights directory {directory} has no preprocessor_config.json "
            "(nor an image_processor entry in processor_config.json)"
        )
    if not any((directory / name).is_file() for name in _TOKENIZER_FILES):
        raise UserError(
            f"captioner weights directory {directory} has no tokenizer (tokenizer.json or vocab.txt)"
        )


class Captioner:
    """Image-to-text stage: `caption(frames) -> list[str]`, one state per frame, in one forward pass (the
    pipeline decides the batches).

    Args:
        model / processor: a transformers image-to-text model and its processor.
        max_new_tokens: tokens generated per caption at most (None: the model's generation config, else
            DEFAULT_MAX_NEW_TOKENS).
        spell: turns a decoded caption into a state (the domain's `spell`; None: strip and collapse white space).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        processor: object,
        *,
        max_new_tokens: int | None = None,
        spell: Callable[[str], str] | None = None,
    ) -> None:
        if max_new_tokens is None:
            config = getattr(model, "generation_config", None)
            max_new_tokens = getattr(config, "max_new_tokens", None) or DEFAULT_MAX_NEW_TOKENS
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        self.model = model.eval()
        self.processor = processor
        self.max_new_tokens = int(max_new_tokens)
        self.spell = spell or (lambda text: " ".join(text.split()))

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    @classmethod
    def from_pretrained(
        cls,
        directory: str | os.PathLike[str],
        device: str | torch.device | None = None,
        dtype: torch.dtype | None = None,
        domain: Domain | None = None,
        max_new_tokens: int | None = None,
    ) -> Captioner:
        """Load a local image-to-text checkpoint offline; fp16/bf16 on CUDA, fp32 on CPU unless `dtype` is given.
        Captions are spelled as `domain` spells states, and as long as its states may be (`caption_tokens`)
        unless `max_new_tokens` says otherwise.

        Only files already in `directory` are read (`local_files_only`, whatever HF_HUB_OFFLINE says) and no
        code from the checkpoint is ever run (no `trust_remote_code`).
        """
        path = Path(directory).expanduser()
        _check_checkpoint_dir(path)
        dev = resolve_device(device)
        dtype = dtype or default_dtype(dev)
        try:
            with quiet_loading():
                from transformers import AutoModelForImageTextToText, AutoProcessor

                # The PIL image processor: portable, needs no torchvision, and the one the embedded model trained
                # with.
                processor = AutoProcessor.from_pretrained(
                    str(path), local_files_only=True, trust_remote_code=False, backend="pil"
                )
                model = AutoModelForImageTextToText.from_pretrained(
                    str(path), local_files_only=True, trust_remote_code=False, dtype=dtype
                )
        except Exception as err:  # noqa: BLE001 - any failure inside a checkpoint is the user's file, reported in one line
            first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise UserError(f"captioner weights directory {path} could not be loaded: {first_line}") from err
        module: torch.nn.Module = model  # (transformers' own `to` wrapper confuses type checkers)
        module.to(dev)
        logger.info("captioner %s loaded from %s on %s (%s)", type(model).__name__, path, dev, dtype)
        if max_new_tokens is None and domain is not None:
            max_new_tokens = domain.caption_tokens
        return cls(model, processor, max_new_tokens=max_new_tokens,
                   spell=domain.spell if domain is not None else None)  # fmt: skip

    @torch.inference_mode()
    def caption_scored(self, frames: Sequence[np.ndarray] | np.ndarray) -> list[tuple[str, float]]:
        """Caption frames, each (H, W, 3) uint8 (or one (B, H, W, 3) array), into (state text, confidence):
        the confidence is the mean log-probability per generated token (the end token included; 0 is certain),
        from the same greedy pass that writes the text."""
        images = _as_frame_list(frames)
        inputs = self.processor(images=images, return_tensors="pt")  # type: ignore[operator]
        pixel_values = inputs["pixel_values"].to(self.device, self.dtype)  # (B, 3, S, S)
        out = self.model.generate(  # type: ignore[operator]
            pixel_values=pixel_values,
            max_new_tokens=self.max_new_tokens,
            do_sample=False,
            num_beams=1,
            output_scores=True,
            return_dict_in_generate=True,
        )
        sequences = out.sequences  # (B, L) token ids, the prompt's first
        model: Any = self.model  # a transformers generation model (its mixin's methods confuse type checkers)
        logp = model.compute_transition_scores(sequences, out.scores, normalize_logits=True)  # (B, G)
        generated = sequences[:, -logp.shape[1] :]  # (B, G): the token each score is for
        eos = model.generation_config.eos_token_id
        eos_ids = torch.tensor(eos if isinstance(eos, list) else [eos], device=generated.device)
        is_end = torch.isin(generated, eos_ids)  # (B, G)
        # Tokens up to and including the first end token count; the padding after it does not.
        before_end = (is_end.long().cumsum(dim=1) - is_end.long()) == 0  # (B, G)
        counted = before_end.float()
        mean = (
            logp.float().masked_fill(~before_end, 0.0).sum(dim=1) / counted.sum(dim=1).clamp(min=1)
        ).tolist()
        decoded = self.processor.batch_decode(sequences, skip_special_tokens=True)  # type: ignore[attr-defined]
        return [(self.spell(t), float(c)) for t, c in zip(decoded, mean, strict=True)]

    def caption(self, frames: Sequence[np.ndarray] | np.ndarray) -> list[str]:
        """Caption frames, each (H, W, 3) uint8 (or one (B, H, W, 3) array), into state texts."""
        return [text for text, _ in self.caption_scored(frames)]


def _as_frame_list(frames: Sequence[np.ndarray] | np.ndarray) -> list[np.ndarray]:
    """Validate frames and return a list of (H, W, 3) uint8 arrays."""
    if isinstance(frames, np.ndarray):
        if frames.ndim == 3:
            frames = frames[None]
        if frames.ndim != 4:
            raise ValueError(
                f"frames must be (H, W, 3) or (B, H, W, 3), got an array of shape {frames.shape}"
            )
        frames = list(frames)
    images = list(frames)
    for i, frame in enumerate(images):
        if not isinstance(frame, np.ndarray) or frame.ndim != 3 or frame.shape[2] != 3:
            shape = getattr(frame, "shape", type(frame).__name__)
            raise ValueError(f"frames[{i}] must be an (H, W, 3) array, got {shape}")
        if frame.dtype != np.uint8:
            raise ValueError(f"frames[{i}] must be uint8, got {frame.dtype}")
    return images
