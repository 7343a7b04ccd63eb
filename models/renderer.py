"""The embedded renderer's network: a small latent-diffusion model in the StableDiffusionPipeline layout.

`RendererConfig` fixes its shape (VAE, UNet, CLIP text encoder, the scheduler's prediction type) and validates
itself; `build_pipeline(config, tokenizer)` makes the randomly initialised pipeline that the trainer fits.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from models.checks import check_at_least

PREDICTION_TYPES = ("sample", "epsilon", "v_prediction")


@dataclass(frozen=True)
class RendererConfig:
    """Shape of the embedded renderer.

    image_size: side of the frames the model draws. With a VAE that halves the side len(vae_channels) - 1 times,
        80 gives a 5 x 5 latent: one latent pixel per cell of the world's 5 x 5 grid.
    vae_channels / vae_latent_channels: AutoencoderKL widths per level and its latent channels.
    unet_channels: UNet2DConditionModel widths per level (>= 2); every level but the first has cross-attention.
    text_width, text_layers, max_length: the CLIP text encoder (width, blocks, token positions).
    prediction_type: what the UNet predicts: "sample" (the clean latent x0), "epsilon" or "v_prediction".
    """

    image_size: int = 80
    vae_channels: tuple[int, ...] = (8, 16, 32, 64, 64)
    vae_latent_channels: int = 8
    unet_channels: tuple[int, ...] = (64, 128, 128)
    text_width: int = 128
    text_layers: int = 2
    max_length: int = 16
    prediction_type: str = "sample"

    def __post_init__(self) -> None:
        object.__setattr__(self, "vae_channels", tuple(int(c) for c in self.vae_channels))
        object.__setattr__(self, "unet_channels", tuple(int(c) for c in self.unet_channels))
        if self.image_size < 32 or self.image_size % 2 ** (len(self.vae_channels) - 1):
            raise ValueError(
                f"image_size must be >= 32 and divisible by the VAE's downsampling, got {self.image_size}"
            )
        if self.prediction_type not in PREDICTION_TYPES:
            raise ValueError(
                f"prediction_type must be sample, epsilon or v_prediction, got {self.prediction_type!r}"
            )
        if len(self.unet_channels) < 2:
            raise ValueError(f"unet_channels needs at least 2 levels, got {self.unet_channels}")
        check_at_least(self, ("vae_latent_channels", "text_width", "text_layers", "max_length"))

    @property
    def latent_size(self) -> int:
        """Side of the latent the UNet denoises."""
        return self.image_size // 2 ** (len(self.vae_channels) - 1)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def build_pipeline(config: RendererConfig, tokenizer):  # -> diffusers.StableDiffusionPipeline
    """A randomly initialised StableDiffusionPipeline sized by `config` for `tokenizer` (a transformers tokenizer
    whose "." ends a state), in the layout a real Stable Diffusion checkpoint has."""
    from diffusers import (
        AutoencoderKL,
        DPMSolverMultistepScheduler,
        StableDiffusionPipeline,
        UNet2DConditionModel,
    )
    from transformers import CLIPTextConfig, CLIPTextModel

    levels = len(config.vae_channels)
    groups = math.gcd(*config.vae_channels, 16)
    vae = AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * levels,
        up_block_types=("UpDecoderBlock2D",) * levels,
        block_out_channels=tuple(config.vae_channels),
        layers_per_block=1,
        latent_channels=config.vae_latent_channels,
        norm_num_groups=groups,
        sample_size=config.image_size,
        mid_block_add_attention=False,  # flat frames need no global mixing, and it is the costliest layer here
    )
    vocab = tokenizer.get_vocab()
    text_encoder = CLIPTextModel(
        CLIPTextConfig(
            vocab_size=len(vocab),
            hidden_size=config.text_width,
            intermediate_size=2 * config.text_width,
            num_hidden_layers=config.text_layers,
            num_attention_heads=max(1, config.text_width // 32),
            max_position_embeddings=config.max_length,
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.pad_token_id,
            eos_token_id=vocab.get(".", tokenizer.pad_token_id),
        )
    )
    ulevels = len(config.unet_channels)
    # No attention at the full-resolution level (the costliest); cross-attention at every coarser one.
    unet = UNet2DConditionModel(
        sample_size=config.latent_size,
        in_channels=config.vae_latent_channels,
        out_channels=config.vae_latent_channels,
        block_out_channels=tuple(config.unet_channels),
        down_block_types=("DownBlock2D",) + ("CrossAttnDownBlock2D",) * (ulevels - 1),
        up_block_types=("CrossAttnUpBlock2D",) * (ulevels - 1) + ("UpBlock2D",),
        layers_per_block=1,
        cross_attention_dim=config.text_width,
        attention_head_dim=16,
        norm_num_groups=math.gcd(*config.unet_channels, 32),
    )
    scheduler = DPMSolverMultistepScheduler(
        num_train_timesteps=1000,
        beta_schedule="scaled_linear",
        beta_start=0.00085,
        beta_end=0.012,
        prediction_type=config.prediction_type,
        timestep_spacing="trailing",  # the first of few steps starts from pure noise (t = 999)
        final_sigmas_type="zero",
        steps_offset=1,
    )
    return StableDiffusionPipeline(
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        unet=unet,
        scheduler=scheduler,
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
