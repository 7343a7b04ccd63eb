"""`PixelPredictor`: the pixel-space baseline (models.pixel) behind a frames-in, frames-out call, for the comparison
with semworld (`semworld eval compare`). It takes uint8 RGB frames of any size (a game's 210 x 160 screens too),
resizes them to the network's square side, rolls the network out autoregressively (under action words, for a model
that has them) and hands back uint8 frames at the input's size."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from models.hub import CONFIG_NAME
from models.pixel import PixelModel, resize_frames


class PixelPredictor:
    """Context frames -> the next k frames, in pixels."""

    def __init__(self, model: PixelModel, device: torch.device | str = "cpu") -> None:
        self.model = model.to(device).eval()
        self.device = torch.device(device)

    @classmethod
    def from_pretrained(cls, directory: str | Path, device: torch.device | str = "cpu") -> PixelPredictor:
        """Load a saved PixelModel; `directory` is the model folder or a `semworld train pixel` run folder
        (whose model/ holds the weights)."""
        root = Path(directory)
        if not (root / CONFIG_NAME).is_file() and (root / "model" / CONFIG_NAME).is_file():
            root = root / "model"
        return cls(PixelModel.from_pretrained(root, map_location=device), device)

    @property
    def context(self) -> int:
        """T: frames each prediction reads."""
        return self.model.config.context

    @property
    def actions(self) -> tuple[str, ...]:
        """The action words it forecasts under (empty: frames alone)."""
        return self.model.config.actions

    @torch.no_grad()
    def predict_frames(
        self,
        contexts: Sequence[Sequence[np.ndarray]],
        k: int,
        actions: Sequence[Sequence[str]] | None = None,
    ) -> list[list[np.ndarray]]:
        """For each context (at least T frames (H, W, 3) uint8; the last T are read), the next `k` frames; for a
        model with action words, `actions[i]` holds the k words taken before each of clip i's predicted frames."""
        if not contexts:
            return []
        t, size = self.context, self.model.config.image_size
        for i, ctx in enumerate(contexts):
            if len(ctx) < t:
                raise ValueError(f"contexts[{i}] has {len(ctx)} frames; the pixel model reads {t}")
        arr = np.stack([np.stack(list(ctx)[-t:]) for ctx in contexts])  # (B, T, H, W, 3) uint8
        if arr.ndim != 5 or arr.shape[-1] != 3:
            raise ValueError(f"contexts must hold RGB frames (H, W, 3), got {arr.shape[2:]}")
        ids = self._action_ids(actions, len(contexts), k)
        x = torch.from_numpy(arr).to(self.device).permute(0, 1, 4, 2, 3).float().div(255.0)  # (B, T, C, H, W)
        pred = self.model.rollout(resize_frames(x, size), k, ids)  # (B, K, C, S, S)
        pred = resize_frames(pred, (arr.shape[2], arr.shape[3])).clamp(0, 1)  # (B, K, C, H, W)
        out = pred.mul(255.0).round().to(torch.uint8).permute(0, 1, 3, 4, 2).cpu().numpy()  # (B, K, H, W, 3)
        return [list(clip) for clip in out]

    def _action_ids(self, actions: Sequence[Sequence[str]] | None, b: int, k: int) -> torch.Tensor | None:
        """(B, K) ids of the action words; None for a model of frames alone (which refuses any)."""
        if not self.actions:
            if actions is not None:
                raise ValueError("actions: this pixel model forecasts from frames alone")
            return None
        if actions is None or len(actions) != b or any(len(a) < k for a in actions):
            raise ValueError(f"actions: {k} action words for each of the {b} contexts")
        index = {word: i for i, word in enumerate(self.actions)}
        unknown = [w for row in actions for w in row[:k] if w not in index]
        if unknown:
            raise ValueError(f"actions: {unknown[0]!r} is not one of {', '.join(self.actions)}")
        return torch.tensor([[index[w] for w in row[:k]] for row in actions], device=self.device)  # (B, K)
