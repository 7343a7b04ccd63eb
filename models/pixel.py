"""The pixel-space baseline: a SimVP-style video predictor (convolutional encoder, a temporal translator over the
stacked frames' features, convolutional decoder) that forecasts the next frame from the last `context` frames and
rolls itself out autoregressively. It is what semworld is measured against: same world, same context. With action
words (a game), the action taken after the last context frame is a learned vector added to the translator's
features everywhere, as semworld's predictor adds its action embedding to the slice it conditions.

Notation used for tensor shapes:
    B  batch          T  context frames (config.context)       K  frames a rollout predicts
    C  image channels (3, RGB in [0, 1])                        S  image side the network works at (image_size)
    Cs encoder width at the latent resolution (hid_s)          Ct translator width (hid_t)
    L  latent side = S / 2**downsample
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from models.checks import check_at_least
from models.hub import SavedModel

MODEL_KIND = "pixel_simvp"


@dataclass(frozen=True)
class PixelConfig:
    """Shape of the SimVP-style predictor.

    context: frames the model reads (T); 4 = the states the semantic predictor reads.
    image_size: side of the frames inside the network. The world draws 128-pixel frames; 64 (the default) makes
        every convolution 4x cheaper on CPU. The adapter (pipeline.pixel) resizes in and out.
    hid_s: encoder/decoder width at the latent resolution (the spatial features of one frame).
    hid_t: width of the translator, which mixes all T frames' features (stacked on the channel axis).
    downsample: stride-2 stages of the encoder (the latent side is image_size / 2**downsample).
    translator_blocks: residual blocks of the translator, each a large-kernel depthwise convolution (the
        receptive field that carries motion across the latent) and a pointwise MLP; SimVP v2's gSTA, simplified.
    kernel: side of the translator's depthwise kernel (odd).
    residual: predict the next frame as the last frame plus a change (else the frame itself).
    actions: the action words it forecasts under, in id order (empty: frames alone).
    """

    context: int = 4
    image_size: int = 64
    hid_s: int = 16
    hid_t: int = 128
    downsample: int = 2
    translator_blocks: int = 4
    kernel: int = 7
    residual: bool = True
    actions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "actions", tuple(self.actions))
        if len(set(self.actions)) != len(self.actions) or not all(
            isinstance(a, str) and a for a in self.actions
        ):
            raise ValueError(f"PixelConfig.actions must be distinct non-empty words, got {self.actions!r}")
        check_at_least(
            self, ("context", "hid_s", "hid_t", "translator_blocks"), label="PixelConfig.{}".format
        )
        if self.downsample < 0:
            raise ValueError(f"PixelConfig.downsample must be >= 0, got {self.downsample}")
        if self.image_size < 8 or self.image_size % 2**self.downsample:
            raise ValueError(
                f"PixelConfig.image_size must be >= 8 and divisible by 2**downsample = {2**self.downsample}, "
                f"got {self.image_size}"
            )
        if self.kernel < 1 or self.kernel % 2 == 0:
            raise ValueError(f"PixelConfig.kernel must be a positive odd number, got {self.kernel}")

    @property
    def latent_size(self) -> int:
        """L: side of the latent the translator works on."""
        return self.image_size // 2**self.downsample

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PixelConfig:
        """Build from a dict; keys that are not fields (e.g. "semworld_model") are ignored."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def _conv(c_in: int, c_out: int, stride: int = 1, transpose: bool = False) -> nn.Sequential:
    """3x3 convolution (stride 2 halves the side; transposed, doubles it), GroupNorm, SiLU: SimVP's ConvSC."""
    if transpose:
        conv: nn.Module = nn.ConvTranspose2d(c_in, c_out, 3, stride, padding=1, output_padding=stride - 1)
    else:
        conv = nn.Conv2d(c_in, c_out, 3, stride, padding=1)
    return nn.Sequential(conv, nn.GroupNorm(min(8, c_out), c_out), nn.SiLU())


class Encoder(nn.Module):
    """One frame (B, C, S, S) -> latent (B, Cs, L, L), and the full-resolution features for the decoder's skip."""

    def __init__(self, cfg: PixelConfig) -> None:
        super().__init__()
        self.stem = _conv(3, cfg.hid_s)
        self.down = nn.ModuleList(_conv(cfg.hid_s, cfg.hid_s, stride=2) for _ in range(cfg.downsample))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        skip = self.stem(x)  # (B, Cs, S, S)
        h = skip
        for layer in self.down:
            h = layer(h)  # side halves each stage -> (B, Cs, L, L)
        return h, skip


class TranslatorBlock(nn.Module):
    """x + pointwise MLP(x + depthwise large-kernel conv(norm x)): spatial mixing, then channel mixing."""

    def __init__(self, width: int, kernel: int) -> None:
        super().__init__()
        self.norm1 = nn.GroupNorm(1, width)
        self.spatial = nn.Conv2d(width, width, kernel, padding=kernel // 2, groups=width)
        self.norm2 = nn.GroupNorm(1, width)
        self.mlp = nn.Sequential(nn.Conv2d(width, 2 * width, 1), nn.GELU(), nn.Conv2d(2 * width, width, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, Ct, L, L) -> same
        x = x + self.spatial(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Translator(nn.Module):
    """The T frames' latents stacked on channels (B, T*Cs, L, L) -> the next frame's latent (B, Cs, L, L)."""

    def __init__(self, cfg: PixelConfig) -> None:
        super().__init__()
        self.inp = nn.Conv2d(cfg.context * cfg.hid_s, cfg.hid_t, 1)
        self.blocks = nn.Sequential(
            *(TranslatorBlock(cfg.hid_t, cfg.kernel) for _ in range(cfg.translator_blocks))
        )
        self.out = nn.Conv2d(cfg.hid_t, cfg.hid_s, 1)

    def forward(self, z: torch.Tensor, condition: torch.Tensor | None = None) -> torch.Tensor:
        """z (B, T*Cs, L, L), condition (B, Ct) or None -> (B, Cs, L, L)."""
        h = self.inp(z)  # (B, Ct, L, L)
        if condition is not None:
            h = h + condition[:, :, None, None]
        return self.out(self.blocks(h))


class Decoder(nn.Module):
    """Latent (B, Cs, L, L) and the last frame's skip features (B, Cs, S, S) -> RGB (B, C, S, S), unbounded."""

    def __init__(self, cfg: PixelConfig) -> None:
        super().__init__()
        self.up = nn.ModuleList(
            _conv(cfg.hid_s, cfg.hid_s, stride=2, transpose=True) for _ in range(cfg.downsample)
        )
        self.fuse = _conv(2 * cfg.hid_s, cfg.hid_s)
        self.head = nn.Conv2d(cfg.hid_s, 3, 1)

    def forward(self, h: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        for layer in self.up:
            h = layer(h)  # side doubles each stage -> (B, Cs, S, S)
        return self.head(self.fuse(torch.cat([h, skip], dim=1)))  # (B, 2Cs, S, S) -> (B, C, S, S)


class PixelModel(SavedModel):
    """SimVP-style next-frame predictor; `rollout` feeds its own frames back for K steps."""

    kind = MODEL_KIND
    config_class = PixelConfig

    def __init__(self, config: PixelConfig) -> None:
        super().__init__()
        self.config = config
        self.encoder = Encoder(config)
        self.translator = Translator(config)
        self.decoder = Decoder(config)
        self.action_embed = nn.Embedding(len(config.actions), config.hid_t) if config.actions else None

    def check_frames(self, frames: torch.Tensor, name: str = "frames") -> None:
        """Raise a ValueError naming `name` unless it is (B, T, 3, S, S) with this config's T and S."""
        cfg = self.config
        if frames.ndim != 5 or tuple(frames.shape[1:]) != (cfg.context, 3, cfg.image_size, cfg.image_size):
            raise ValueError(
                f"{name} must be (B, {cfg.context}, 3, {cfg.image_size}, {cfg.image_size}), got {tuple(frames.shape)}"
            )

    def _condition(self, actions: torch.Tensor | None, b: int) -> torch.Tensor | None:
        """The translator's action vector (B, Ct) for action ids (B,); None for a model of frames alone."""
        if self.action_embed is None:
            if actions is not None:
                raise ValueError("actions: this pixel model forecasts from frames alone")
            return None
        if actions is None or tuple(actions.shape) != (b,):
            got = None if actions is None else tuple(actions.shape)
            raise ValueError(f"actions must be ({b},) ids of {self.config.actions}, got {got}")
        return self.action_embed(actions)

    def forward(self, frames: torch.Tensor, actions: torch.Tensor | None = None) -> torch.Tensor:
        """frames (B, T, C, S, S) in [0, 1], actions (B,) (the action after the last frame; a model with action
        words only) -> the next frame (B, C, S, S), clamped to [0, 1]."""
        self.check_frames(frames)
        b = frames.shape[0]
        condition = self._condition(actions, b)
        flat = rearrange(frames, "b t c h w -> (b t) c h w")
        z, skip = self.encoder(flat)  # (B*T, Cs, L, L), (B*T, Cs, S, S)
        z = rearrange(z, "(b t) c h w -> b (t c) h w", b=b)  # stacked frames: (B, T*Cs, L, L)
        last_skip = rearrange(skip, "(b t) c h w -> b t c h w", b=b)[:, -1]  # (B, Cs, S, S)
        out = self.decoder(self.translator(z, condition), last_skip)  # (B, C, S, S)
        if self.config.residual:
            out = frames[:, -1] + out
        return out.clamp(0.0, 1.0)

    def rollout(self, frames: torch.Tensor, k: int, actions: torch.Tensor | None = None) -> torch.Tensor:
        """frames (B, T, C, S, S), actions (B, K) ids (the action before each predicted frame; a model with action
        words only) -> the next k frames (B, K, C, S, S), each predicted from the T before it (its own predictions
        once past the context). Gradients flow through the whole rollout."""
        if not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be an int >= 1, got {k!r}")
        self.check_frames(frames)
        if actions is not None and (actions.ndim != 2 or actions.shape[1] < k):
            raise ValueError(f"actions must be (B, K >= {k}) ids, got {tuple(actions.shape)}")
        window, out = frames, []
        for i in range(k):
            nxt = self(window, None if actions is None else actions[:, i])  # (B, C, S, S)
            out.append(nxt)
            window = torch.cat([window[:, 1:], nxt[:, None]], dim=1)  # slide: (B, T, C, S, S)
        return torch.stack(out, dim=1)  # (B, K, C, S, S)


def resize_frames(frames: torch.Tensor, size: int | tuple[int, int]) -> torch.Tensor:
    """(..., C, H, W) -> (..., C, size, size), or (..., C, height, width) for a pair, by antialiased bilinear
    resampling (identity when already there)."""
    hw = (size, size) if isinstance(size, int) else tuple(size)
    if tuple(frames.shape[-2:]) == hw:
        return frames
    lead = frames.shape[:-3]
    flat = frames.reshape(-1, *frames.shape[-3:])  # (N, C, H, W)
    out = F.interpolate(flat, size=hw, mode="bilinear", antialias=True, align_corners=False)
    return out.reshape(*lead, *out.shape[-3:])
