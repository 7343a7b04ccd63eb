"""The embedded captioner's network: a tiny BLIP (BlipForConditionalGeneration) sized by `CaptionerConfig`.

`build_blip(config, tokenizer)` makes the randomly initialised model and `build_processor` its image processor +
tokenizer pair; the word-level tokenizer itself is built by the trainer (pipeline.training.captioner).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from models.checks import check_at_least

BOS_TOKEN, EOS_TOKEN = "[BOS]", "[EOS]"
MAX_STATE_TOKENS = 16  # N: a state has at most this many word-level tokens


@dataclass
class CaptionerConfig:
    """Shape of the embedded BLIP.

    image_size: side the processor resizes frames to (world frames are rendered at 128).
    patch_size: ViT patch side; (image_size / patch_size)^2 image tokens feed the decoder's cross-attention.
    vision_layers / text_layers: transformer blocks in the image encoder / text decoder.
    hidden: width of both towers; the MLPs are `mlp_ratio` times wider. heads: attention heads in both.
    max_positions: text positions (a state is <= 16 tokens plus [BOS] and [EOS]).
    """

    image_size: int = 80
    patch_size: int = 16
    vision_layers: int = 3
    text_layers: int = 2
    hidden: int = 128
    heads: int = 4
    mlp_ratio: int = 2
    max_positions: int = 24

    def __post_init__(self) -> None:
        if self.image_size < 8 or self.image_size % self.patch_size:
            raise ValueError(
                f"image_size ({self.image_size}) must be >= 8 and a multiple of patch_size "
                f"({self.patch_size})"
            )
        if self.hidden % self.heads or self.hidden % 4:
            raise ValueError(f"hidden ({self.hidden}) must be divisible by heads ({self.heads}) and by 4")
        check_at_least(self, ("vision_layers", "text_layers", "mlp_ratio"))
        if self.max_positions < MAX_STATE_TOKENS + 2:
            raise ValueError(f"max_positions must be >= {MAX_STATE_TOKENS + 2}, got {self.max_positions}")


def build_processor(tokenizer, image_size: int):  # -> transformers.BlipProcessor
    """BlipProcessor with the slow (PIL) image processor: no torchvision needed; bicubic resize to image_size."""
    from transformers import BlipProcessor
    from transformers.models.blip.image_processing_pil_blip import BlipImageProcessorPil

    image_processor = BlipImageProcessorPil(size={"height": image_size, "width": image_size})
    return BlipProcessor(image_processor=image_processor, tokenizer=tokenizer)


def sincos_2d(grid: int, dim: int) -> torch.Tensor:
    """(grid * grid, dim) row-major 2-D sine-cosine position codes: half the channels code the row, half the
    column, each as sin/cos pairs at geometric frequencies."""
    if dim % 4:
        raise ValueError(f"dim must be divisible by 4, got {dim}")
    freqs = 1.0 / (10_000 ** (torch.arange(dim // 4, dtype=torch.float32) / (dim // 4)))  # (dim/4,)
    pos = torch.arange(grid, dtype=torch.float32)[:, None] * freqs[None]  # (grid, dim/4)
    code = torch.cat([pos.sin(), pos.cos()], dim=1)  # (grid, dim/2)
    rows = code[:, None, :].expand(grid, grid, dim // 2)  # (grid, grid, dim/2): varies with the row
    cols = code[None, :, :].expand(grid, grid, dim // 2)  # (grid, grid, dim/2): varies with the column
    return torch.cat([rows, cols], dim=-1).reshape(grid * grid, dim)  # (grid * grid, dim)


def build_blip(config: CaptionerConfig, tokenizer):  # -> transformers.BlipForConditionalGeneration
    """A randomly initialised BlipForConditionalGeneration sized by `config` for `tokenizer`'s vocabulary."""
    from transformers import BlipConfig, BlipForConditionalGeneration

    bos, eos, pad = tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id
    # both towers have the one width, MLP and head count
    width = dict(
        hidden_size=config.hidden,
        intermediate_size=config.mlp_ratio * config.hidden,
        num_attention_heads=config.heads,
    )
    blip_config = BlipConfig(
        vision_config=dict(
            **width,
            num_hidden_layers=config.vision_layers,
            image_size=config.image_size,
            patch_size=config.patch_size,
            initializer_range=0.02,  # BLIP's default (1e-10) starts the image tower at zero: it learns far slower
        ),
        text_config=dict(
            **width,
            vocab_size=len(tokenizer),
            num_hidden_layers=config.text_layers,
            max_position_embeddings=config.max_positions,
            encoder_hidden_size=config.hidden,
            bos_token_id=bos,
            eos_token_id=eos,
            sep_token_id=eos,
            pad_token_id=pad,
        ),
        projection_dim=config.hidden,
        image_text_hidden_size=config.hidden,
    )
    model = BlipForConditionalGeneration(blip_config)
    with torch.no_grad():  # fixed 2-D sin-cos positions to start from, as in MAE: "where" is readable at once
        embeddings = model.vision_model.embeddings
        grid = config.image_size // config.patch_size
        embeddings.position_embedding[0, 1:] = sincos_2d(grid, config.hidden)  # (grid * grid, hidden)
        embeddings.position_embedding[0, 0] = 0.0  # the class token has no place
    model.generation_config.max_new_tokens = MAX_STATE_TOKENS + 2
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = pad
    return model
