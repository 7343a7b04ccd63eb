"""Training of the embedded renderer: a small latent-diffusion model in the StableDiffusionPipeline layout, learned
from (state, frame) pairs of the built-in world. Stage 1 fits the VAE on frames; stage 2 freezes it and fits the
UNet together with the text encoder on cached latents, predicting the clean latent (x0) so that few steps suffice.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from models.renderer import RendererConfig, build_pipeline
from pipeline.evaluation.metrics import evaluate_frames
from pipeline.renderer import RenderSettings
from pipeline.utils import UserError, atomic_dir, atomic_torch_save

logger = logging.getLogger(__name__)

CHECKPOINT = "checkpoint.pt"
LOG = "log.jsonl"
STAGES = ("vae", "unet", "done")


# ---- arguments -----------------------------------------------------------------------------------------
@dataclass
class TrainRendererArgs:
    """Arguments of `semworld train renderer` (each field is a flag: --out, --vae-steps, ...).

    out: run directory: checkpoint.pt (atomic, resumable), log.jsonl, strips/*.png (truth | render) and, when
        the run ends, pipeline/ (the diffusers checkpoint, save_pretrained with safetensors).
    image_size: side of the frames the model draws (the world renders them at this size). 80 with a VAE that
        downsamples 16x gives a 5 x 5 latent: one latent pixel per cell of the world's 5 x 5 grid, which makes
        the UNet ~6x cheaper per sample than 16 x 16 latents (the shipped captioner reads frames at 64 anyway).
    output_size: side of the frames the Renderer adapter hands out (resized from image_size; 128 = the world's).
    render_size: the world draws the training frames at this size, then they are resized to image_size. 128 keeps the sprites' exact sub-pixel geometry of the world's 128-pixel frames, which
        the shipped captioner depends on (it reads 80-pixel world frames resized to 128 with ~6% exact match).
    seed: seeds the data stream, initialisation and sampling.
    count_weights: relative frequency of scenes with 0, 1, 2, 3 objects in the training stream.
    vae_channels / vae_latent_channels: AutoencoderKL widths per level (len - 1 = number of 2x downsamplings)
        and latent channels.
    vae_steps, vae_batch, vae_lr, kl_weight: stage 1 optimisation (L1 + MSE reconstruction + kl_weight * KL).
    vae_sample: decode a draw from the posterior (the textbook VAE) instead of its mean; the draw's unit noise
        at initialisation drowns the sprites' colour and shape for hundreds of steps, so the mean is the default.
    object_weight: reconstruction weight of pixels that differ from the room's colour (objects, screen, lamp).
    unet_channels: UNet2DConditionModel widths per level; every level but the first has cross-attention.
    text_width, text_layers, max_length: the CLIP text encoder (trained from scratch with the UNet).
    unet_steps, unet_batch, unet_lr: stage 2 optimisation.
    prediction_type: what the UNet predicts: "sample" (x0), "epsilon" or "v_prediction".
    cond_dropout: probability of training with the empty prompt (enables classifier-free guidance > 1).
    timestep_power: training timesteps are (1 - u**power) * (T - 1), u uniform: 1 is uniform, 2 puts more weight
        on the noisy end, where few-step sampling decides what goes where.
    decoder_every: in stage 2, also train the VAE decoder (on the cached latents of the frozen encoder) every
        this many UNet steps, with vae_batch frames (0 = never): the decoder keeps sharpening while the UNet learns.
    pixel_weight: with prediction_type "sample", on those same steps the decoder learns from the UNet's clean-latent
        estimates instead, with this weight on the pixel loss through the decoder, which also reaches the UNet.
    sample_steps, guidance: how evaluation samples (and the defaults written to renderer.json).
    pool: number of distinct training scenes whose latents are cached (drawn once, seeded).
    eval_every, eval_states: evaluation period (steps) and size (test-split world states).
    checkpoint_every: steps between atomic checkpoints.
    vae_minutes / unet_minutes: optional wall-clock caps per stage (0 = none; steps are the reproducible stop).
    threads: torch intra-op threads (1 leaves the other core to everyone else).
    captioner: optional captioner directory for the round-trip metric at evaluation.
    """

    out: str
    image_size: int = 80
    output_size: int = 128
    render_size: int = 128
    seed: int = 0
    count_weights: tuple[float, ...] = (0.05, 0.25, 0.35, 0.35)
    vae_channels: tuple[int, ...] = (8, 16, 32, 64, 64)
    vae_latent_channels: int = 8
    vae_steps: int = 2200
    vae_batch: int = 16
    vae_lr: float = 1.5e-3
    kl_weight: float = 1e-6
    object_weight: float = 10.0
    vae_sample: bool = False
    unet_channels: tuple[int, ...] = (64, 128, 128)
    text_width: int = 128
    text_layers: int = 2
    max_length: int = 16
    unet_steps: int = 2600
    unet_batch: int = 32
    unet_lr: float = 8e-4
    prediction_type: str = "sample"
    cond_dropout: float = 0.0
    timestep_power: float = 2.0
    decoder_every: int = 2
    pixel_weight: float = 0.0
    sample_steps: int = 4
    guidance: float = 1.0
    pool: int = 8000
    eval_every: int = 250
    eval_states: int = 64
    checkpoint_every: int = 200
    vae_minutes: float = 0.0
    unet_minutes: float = 0.0
    threads: int = 1
    captioner: str | None = None
    _help: dict[str, str] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.model_config()  # validates the network's shape (models.renderer.RendererConfig)
        if self.render_size < 32:
            raise ValueError(
                f"render_size must be >= 32 (the world's smallest frame), got {self.render_size}"
            )
        if self.output_size < 8 or self.output_size % 8:
            raise ValueError(f"output_size must be a multiple of 8, got {self.output_size}")
        if self.pixel_weight < 0 or (self.pixel_weight > 0 and self.prediction_type != "sample"):
            raise ValueError(
                f"pixel_weight must be >= 0, and 0 unless prediction_type is 'sample', got {self.pixel_weight}"
            )
        if self.object_weight < 1:
            raise ValueError(f"object_weight must be >= 1, got {self.object_weight}")
        if self.timestep_power <= 0:
            raise ValueError(f"timestep_power must be > 0, got {self.timestep_power}")
        if not 0 <= self.cond_dropout < 1:
            raise ValueError(f"cond_dropout must be in [0, 1), got {self.cond_dropout}")
        if len(self.count_weights) < 1 or len(self.count_weights) > 4 or min(self.count_weights) < 0:
            raise ValueError(
                f"count_weights needs 1-4 non-negative weights (0..3 objects), got {self.count_weights}"
            )
        for name in ("vae_steps", "unet_steps", "decoder_every"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in (
            "vae_batch",
            "unet_batch",
            "sample_steps",
            "eval_every",
            "eval_states",
            "checkpoint_every",
            "threads",
            "pool",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

    def model_config(self) -> RendererConfig:
        """The network's shape among these arguments."""
        return RendererConfig(**{f.name: getattr(self, f.name) for f in dataclasses.fields(RendererConfig)})

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if not k.startswith("_")}


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


def reconstruction_loss(recon: torch.Tensor, x: torch.Tensor, object_weight: float) -> torch.Tensor:
    """Weighted L1 + MSE of frames (B, 3, H, W) in [-1, 1]. Objects cover a few percent of a frame: pixels that
    differ from the room's colour (the corner pixel) in the truth or in the reconstruction weigh object_weight
    times more, or the VAE learns the background long before the sprites (and, weighting the truth's pixels only,
    never learns a ball from a box: it loses nothing by drawing a box's corners on the room)."""
    room = x[:, :, :1, :1]  # (B, 3, 1, 1)
    # Symmetric: pixels where either the truth or the reconstruction differs from the room weigh more, so that
    # drawing a box's corners where a ball leaves the room visible costs as much as the converse.
    differs = ((x - room).abs().sum(1, keepdim=True) > 0.05) | (
        (recon.detach() - room).abs().sum(1, keepdim=True) > 0.1
    )
    weight = 1.0 + (object_weight - 1.0) * differs.float()
    err = recon - x
    return (weight * (err.abs() + err**2)).mean() / weight.mean()


# ---- checkpoints and logs ------------------------------------------------------------------------------
def _log(out: Path, record: dict[str, Any]) -> None:
    with open(out / LOG, "a") as fh:
        fh.write(json.dumps(record) + "\n")


def _rng_state() -> dict[str, Any]:
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

    stored = copy.deepcopy(pipe).to(dtype=dtype) if dtype != pipe.unet.dtype else pipe
    with atomic_dir(directory) as tmp:
        stored.save_pretrained(tmp, safe_serialization=True)
        RenderSettings(steps=args.sample_steps, guidance=args.guidance, output_size=args.output_size).save(tmp)
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


# ---- training ------------------------------------------------------------------------------------------
def _load_captioner(args: TrainRendererArgs):
    if not args.captioner:
        return None
    from pipeline.captioner import Captioner

    return Captioner.from_pretrained(args.captioner)


def _stage_done(args: TrainRendererArgs, stage: str, step: int, started: float) -> bool:
    steps = args.vae_steps if stage == "vae" else args.unet_steps
    minutes = args.vae_minutes if stage == "vae" else args.unet_minutes
    return step >= steps or (minutes > 0 and time.time() - started > 60 * minutes)


def train_renderer(args: TrainRendererArgs) -> dict[str, Any]:
    """Run (or resume) both stages; returns the final evaluation. The trained pipeline lands in out/pipeline."""
    from diffusers import DDPMScheduler
    from tqdm import tqdm

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(args.seed)
    pipe = fresh_pipeline(args)
    pipe.set_progress_bar_config(disable=True)
    vae, unet, text_encoder, tokenizer = pipe.vae, pipe.unet, pipe.text_encoder, pipe.tokenizer
    noise_schedule = DDPMScheduler.from_config(pipe.scheduler.config)
    logger.info(
        "renderer: vae %.2fM, unet %.2fM, text encoder %.2fM parameters",
        count_parameters(vae) / 1e6,
        count_parameters(unet) / 1e6,
        count_parameters(text_encoder) / 1e6,
    )

    vae_opt = torch.optim.AdamW(vae.parameters(), lr=args.vae_lr, weight_decay=0.0)
    unet_opt = torch.optim.AdamW(
        list(unet.parameters()) + list(text_encoder.parameters()), lr=args.unet_lr, weight_decay=0.01
    )
    stage, step, elapsed = "vae", 0, 0.0
    pool_latents: torch.Tensor | None = None
    ckpt_path = out / CHECKPOINT
    if ckpt_path.exists():
        ckpt = torch.load(ckpt_path, weights_only=False)
        vae.load_state_dict(ckpt["vae"])
        vae_opt.load_state_dict(ckpt["vae_opt"])
        # At the start of stage 2 the UNet is still untrained: its sizes may be changed before resuming.
        if not (ckpt["stage"] == "unet" and ckpt["step"] == 0):
            unet.load_state_dict(ckpt["unet"])
            text_encoder.load_state_dict(ckpt["text_encoder"])
            unet_opt.load_state_dict(ckpt["unet_opt"])
        if ckpt.get("scaling_factor") is not None:
            vae.register_to_config(scaling_factor=ckpt["scaling_factor"])
        stage, step, elapsed = ckpt["stage"], ckpt["step"], ckpt.get("elapsed", 0.0)
        if stage == "done" and not _stage_done(args, "unet", step, time.time()):
            stage = "unet"  # a larger budget extends a finished run
        torch.set_rng_state(ckpt["rng"]["torch"])
        np.random.set_state(ckpt["rng"]["numpy"])
        logger.info("resumed %s at stage %s step %d", ckpt_path, stage, step)

    def checkpoint() -> None:
        atomic_torch_save(
            {
                "args": args.to_dict(),
                "stage": stage,
                "step": step,
                "elapsed": elapsed + time.time() - started,
                "vae": vae.state_dict(),
                "unet": unet.state_dict(),
                "text_encoder": text_encoder.state_dict(),
                "vae_opt": vae_opt.state_dict(),
                "unet_opt": unet_opt.state_dict(),
                "scaling_factor": vae.config.scaling_factor if stage != "vae" else None,
                "rng": _rng_state(),
            },
            ckpt_path,
        )

    held_out = eval_states(args.seed + 1000, args.eval_states)
    captioner = _load_captioner(args)
    train_pool = scene_states(args.seed, args.pool, args.count_weights)

    # Stage 1: the VAE learns to reconstruct frames (the stream draws batches from the seeded pool).
    started = time.time()
    if stage == "vae":
        vae.train()
        for group in vae_opt.param_groups:
            group["lr"] = args.vae_lr
        bar = tqdm(total=args.vae_steps, initial=step, desc="renderer vae", unit="step")
        while not _stage_done(args, "vae", step, started):
            gen = torch.Generator().manual_seed(args.seed * 1_000_003 + step)
            vae_idx = torch.randint(len(train_pool), (args.vae_batch,), generator=gen).tolist()
            x = frames_of(
                [train_pool[i] for i in vae_idx], args.image_size, args.render_size
            )  # (B, 3, H, W) in [-1, 1]
            posterior = vae.encode(x).latent_dist
            latent = posterior.sample(generator=gen) if args.vae_sample else posterior.mode()
            recon = vae.decode(latent).sample
            rec = reconstruction_loss(recon, x, args.object_weight)
            kl = posterior.kl().mean() / x[0].numel()
            loss = rec + args.kl_weight * kl
            vae_opt.zero_grad(set_to_none=True)
            loss.backward()
            vae_opt.step()
            step += 1
            bar.update(1)
            bar.set_postfix(loss=f"{loss.item():.4f}")
            if step % 50 == 0:
                _log(
                    out,
                    {
                        "stage": "vae",
                        "step": step,
                        "loss": loss.item(),
                        "rec": rec.item(),
                        "kl": kl.item(),
                        "time": elapsed + time.time() - started,
                    },
                )
            if step % args.eval_every == 0:
                _log(out, {"stage": "vae", "step": step, "eval": _eval_vae(vae, held_out, args)})
            if step % args.checkpoint_every == 0:
                checkpoint()
        bar.close()
        metrics = _eval_vae(vae, held_out, args)
        _log(out, {"stage": "vae", "step": step, "eval": metrics, "final": True})
        logger.info("vae done at step %d: %s", step, metrics)
        vae.register_to_config(scaling_factor=_scaling_factor(vae, train_pool[:256], args))
        stage, step = "unet", 0
        checkpoint()

    # Stage 2: the frozen VAE's latents of the pool are cached once; the UNet and text encoder learn them.
    vae.eval().requires_grad_(False)
    pool_latents = _encode_pool(vae, train_pool, args, out)
    # The encoder stays frozen (so the cached latents stay valid); the decoder may keep learning from them.
    decoder_params = list(vae.post_quant_conv.parameters()) + list(vae.decoder.parameters())
    if args.decoder_every:
        for p in decoder_params:
            p.requires_grad_(True)
        for group in vae_opt.param_groups:
            group["lr"] = args.vae_lr / 3  # fine-tuning: steadier than the stage-1 rate
    ids = tokenizer(
        train_pool, padding="max_length", max_length=args.max_length, truncation=True, return_tensors="pt"
    ).input_ids  # (P, L)
    empty_ids = tokenizer(
        [""], padding="max_length", max_length=args.max_length, return_tensors="pt"
    ).input_ids
    best: dict[str, Any] = {}
    if stage == "unet":
        started = time.time()
        unet.train()
        text_encoder.train()
        bar = tqdm(total=args.unet_steps, initial=step, desc="renderer unet", unit="step")
        warmup = 200
        while not _stage_done(args, "unet", step, started):
            gen = torch.Generator().manual_seed(args.seed * 1_000_003 + 7 + step)
            idx = torch.randint(len(train_pool), (args.unet_batch,), generator=gen)
            x0 = pool_latents[idx]  # (B, C, h, w)
            batch_ids = ids[idx].clone()  # (B, L)
            if args.cond_dropout > 0:
                drop = torch.rand(len(idx), generator=gen) < args.cond_dropout
                batch_ids[drop] = empty_ids
            noise = torch.randn(x0.shape, generator=gen)
            # Timesteps skewed towards pure noise when asked: few-step sampling decides the layout at t ~ T.
            u = torch.rand(len(idx), generator=gen) ** args.timestep_power
            t = ((1.0 - u) * (noise_schedule.config.num_train_timesteps - 1)).round().long()  # (B,)
            xt = noise_schedule.add_noise(x0, noise, t)
            if args.prediction_type == "sample":
                target = x0
            elif args.prediction_type == "epsilon":
                target = noise
            else:
                target = noise_schedule.get_velocity(x0, noise, t)
            for group in unet_opt.param_groups:
                group["lr"] = args.unet_lr * min(1.0, (step + 1) / warmup)
            cond = text_encoder(batch_ids)[0]  # (B, L, text_width)
            pred = unet(xt, t, cond).sample
            loss = F.mse_loss(pred, target)
            pixel = args.pixel_weight > 0 and args.decoder_every and step % args.decoder_every == 0
            if pixel:
                # End to end: decode the UNet's clean-latent estimate and compare it with the world's frame, so
                # the UNet and decoder can carry what the frozen encoder's latents miss (a ball against a box).
                x = frames_of(
                    [train_pool[i] for i in idx.tolist()], args.image_size, args.render_size
                )  # (B, 3, H, W)
                recon = vae.decode(pred / vae.config.scaling_factor).sample
                loss = loss + args.pixel_weight * reconstruction_loss(recon, x, args.object_weight)
                vae_opt.zero_grad(set_to_none=True)
            unet_opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(list(unet.parameters()) + list(text_encoder.parameters()), 1.0)
            unet_opt.step()
            if pixel:
                vae_opt.step()
            elif args.decoder_every and step % args.decoder_every == 0:
                didx = torch.randint(len(train_pool), (args.vae_batch,), generator=gen)
                x = frames_of(
                    [train_pool[i] for i in didx.tolist()], args.image_size, args.render_size
                )  # (B, 3, H, W)
                recon = vae.decode(pool_latents[didx] / vae.config.scaling_factor).sample
                dec_loss = reconstruction_loss(recon, x, args.object_weight)
                vae_opt.zero_grad(set_to_none=True)
                dec_loss.backward()
                vae_opt.step()
            step += 1
            bar.update(1)
            bar.set_postfix(loss=f"{loss.item():.4f}")
            if step % 50 == 0:
                _log(
                    out,
                    {
                        "stage": "unet",
                        "step": step,
                        "loss": loss.item(),
                        "time": elapsed + time.time() - started,
                    },
                )
            if step % args.eval_every == 0:
                metrics = _eval_unet(pipe, held_out, args, captioner, out, step)
                unet.train()
                text_encoder.train()
                score = metrics.get("roundtrip_acc", metrics["frame_acc"])
                if not best or score >= best["score"]:
                    best = {"score": score, "step": step, **metrics}
                    save_renderer(pipe, args, out / "best", metrics)
            if step % args.checkpoint_every == 0:
                checkpoint()
        bar.close()
        stage = "done"
        checkpoint()
    final = _eval_unet(pipe, held_out, args, captioner, out, step)
    save_renderer(pipe, args, out / "pipeline", final)
    _log(out, {"stage": "done", "step": step, "eval": final, "best": best})
    return final


def _eval_vae(vae, states: Sequence[str], args: TrainRendererArgs) -> dict[str, float]:
    was_training = vae.training
    vae.eval()
    with torch.no_grad():
        x = frames_of(states, args.image_size, args.render_size)
        recon = vae.decode(vae.encode(x).latent_dist.mode()).sample
    vae.train(was_training)
    frames = ((recon.clamp(-1, 1) + 1) * 127.5).round().byte().permute(0, 2, 3, 1).numpy()
    return evaluate_frames(states, list(frames))


def _scaling_factor(vae, states: Sequence[str], args: TrainRendererArgs) -> float:
    """1 / std of the VAE's latents, so that the diffusion sees unit-variance data (as SD's 0.18215 does)."""
    with torch.no_grad():
        z = vae.encode(frames_of(states, args.image_size, args.render_size)).latent_dist.mode()
    return float(1.0 / z.std())


def _encode_pool(vae, states: Sequence[str], args: TrainRendererArgs, out: Path) -> torch.Tensor:
    """Scaled latents (P, C, h, w) of every pool state, cached on disk beside the checkpoint."""
    path = out / "pool_latents.pt"
    if path.exists():
        cached = torch.load(path)
        if cached["n"] == len(states) and cached["scaling_factor"] == vae.config.scaling_factor:
            return cached["latents"]
    from tqdm import tqdm

    chunks = []
    with torch.no_grad():
        for i in tqdm(range(0, len(states), 64), desc="renderer latents", unit="batch"):
            z = vae.encode(
                frames_of(states[i : i + 64], args.image_size, args.render_size)
            ).latent_dist.mode()
            chunks.append(z * vae.config.scaling_factor)
    latents = torch.cat(chunks)  # (P, C, h, w)
    atomic_torch_save(
        {"n": len(states), "scaling_factor": vae.config.scaling_factor, "latents": latents}, path
    )
    return latents


def _eval_unet(pipe, states, args: TrainRendererArgs, captioner, out: Path, step: int) -> dict[str, Any]:
    t = time.time()
    frames = sample(pipe, states, args.sample_steps, args.guidance, seed=args.seed)
    seconds = time.time() - t
    metrics: dict[str, Any] = evaluate_frames(states, frames, captioner)
    metrics["sample_seconds_per_frame"] = seconds / len(states)
    save_strip(out / "strips" / f"unet_{step:06d}.png", states[:8], frames[:8], args.image_size)
    _log(out, {"stage": "unet", "step": step, "eval": metrics})
    logger.info("renderer eval at step %d: %s", step, metrics)
    return metrics


def evaluate_renderer(
    renderer,
    states: Sequence[str],
    captioner=None,
    seed: int = 0,
    steps: int | None = None,
    guidance: float | None = None,
) -> dict[str, float]:
    """Score a loaded `Renderer` on `states` at the size it hands out: PSNR/SSIM against the world's frames,
    the layout check, and (with a captioner) the round-trip accuracy; plus seconds per frame."""
    t = time.time()
    frames = renderer.render(list(states), generator=torch.Generator("cpu").manual_seed(seed), steps=steps,
                             guidance=guidance)  # fmt: skip
    seconds = (time.time() - t) / max(1, len(states))
    metrics = evaluate_frames(states, frames, captioner)
    metrics["seconds_per_frame"] = seconds
    metrics["states"] = len(states)
    return metrics


# ---- command line --------------------------------------------------------------------------------------
def add_parser(train_subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """`semworld train renderer --out DIR ...`: one flag per field of TrainRendererArgs."""
    parser = train_subparsers.add_parser(
        "renderer",
        help="train the embedded diffusion renderer on world frames",
        description=(TrainRendererArgs.__doc__ or "").split("\n")[0],
    )
    for f in dataclasses.fields(TrainRendererArgs):
        if f.name.startswith("_"):
            continue
        flag = "--" + f.name.replace("_", "-")
        if f.name == "out":
            parser.add_argument(flag, required=True, help="run directory")
        elif f.name in ("vae_channels", "unet_channels"):
            parser.add_argument(flag, type=int, nargs="+", default=list(f.default))  # type: ignore[arg-type]
        elif f.name == "count_weights":
            parser.add_argument(flag, type=float, nargs="+", default=list(f.default))  # type: ignore[arg-type]
        elif f.name == "captioner":
            parser.add_argument(flag, default=None, help="captioner directory for the round-trip metric")
        elif isinstance(f.default, bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default)
        else:
            parser.add_argument(flag, type=type(f.default), default=f.default)
    parser.set_defaults(func=_run)
    return parser


def _run(ns: argparse.Namespace) -> int:
    fields = {f.name for f in dataclasses.fields(TrainRendererArgs) if not f.name.startswith("_")}
    values = {k: v for k, v in vars(ns).items() if k in fields}
    for k in ("vae_channels", "unet_channels", "count_weights"):
        values[k] = tuple(values[k])
    try:
        args = TrainRendererArgs(**values)
    except ValueError as err:
        raise UserError(str(err)) from None
    train_renderer(args)
    return 0


# The settings of the shipped weights/renderer (read by `pipeline.training.all`). The shipped files come from a run
# with restarts under wall-clock caps on the shared CPU (weights/README.md lists them); this recipe is that design
# as one uninterrupted, seeded run: the VAE on 128-pixel world frames resized to 80, then the UNet + text encoder
# with the decoder fine-tuned alongside. Not yet run from scratch end to end.
SHIPPED_RECIPE: dict[str, Any] = {
    "image_size": 80,
    "render_size": 128,
    "output_size": 128,
    "vae_channels": (8, 16, 32, 64, 64),
    "vae_latent_channels": 8,
    "vae_lr": 1.5e-3,
    "vae_steps": 2200,
    "object_weight": 10.0,
    "unet_channels": (64, 128, 128),
    "text_width": 128,
    "unet_batch": 32,
    "unet_lr": 8e-4,
    "timestep_power": 2.0,
    "decoder_every": 2,
    "unet_steps": 2600,
    "pool": 8000,
    "eval_every": 250,
}
SHIPPED_FOLDER = "best"  # the checkpoint its periodic evaluation scored best; the shipped weights are one (checkpoints swing)
