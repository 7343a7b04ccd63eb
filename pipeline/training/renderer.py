"""Training of the embedded renderer: a small latent-diffusion model in the StableDiffusionPipeline layout, learned
from (state, frame) pairs: of the built-in world (drawn), or of a game's recorded clips (a recording domain). Stage 1 fits the VAE on frames; stage 2 freezes it and fits the
UNet together with the text encoder on cached latents, predicting the clean latent (x0) so that few steps suffice.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from pipeline.domain import Domain, get_domain
from pipeline.training.image_args import TrainRendererArgs, refuse_other_run
from pipeline.training.recorded_frames import record_frames
from pipeline.training.renderer_parts import (
    DrawnScenes,
    RecordedScenes,
    count_parameters,
    fresh_pipeline,
    reconstruction_loss,
    rng_state,
    sample,
    save_renderer,
    save_strip,
    scene_states,
    validation_states,
    write_log,
)
from pipeline.utils import atomic_torch_save, quiet_loading

logger = logging.getLogger(__name__)

CHECKPOINT = "checkpoint.pt"
FINAL_FOLDER = "pipeline"  # the diffusers checkpoint at the end of the run
UNET_WARMUP = 200  # steps of linear learning-rate warmup in stage 2
BEST_FOLDER = (
    "best"  # the one its periodic evaluation scored best (the shipped weights are one: checkpoints swing)
)


# ---- training ------------------------------------------------------------------------------------------
Scenes = DrawnScenes | RecordedScenes  # states with their true frames


def _load_captioner(args: TrainRendererArgs, domain: Domain):
    if not args.captioner:
        return None
    from pipeline.captioner import Captioner

    return Captioner.from_pretrained(args.captioner, domain=domain)


def renderer_data(args: TrainRendererArgs, domain: Domain) -> tuple[Scenes, Scenes]:
    """(training pool, held-out set). The built-in world: `pool` random scenes and the validation states, drawn.
    A recording domain: `clips` train-split clips of `clip_length` states, recorded once into out/data-train
    (every frame is in the pool), and eval_states frames spread through val-split clips (out/data-val)."""
    if domain.name == "shapes":
        held_out = DrawnScenes(validation_states(args), args.image_size, args.render_size,
                               by_objects=args.eval_set == "varied")  # fmt: skip
        pool = DrawnScenes(
            scene_states(args.seed, args.pool, args.count_weights), args.image_size, args.render_size
        )
        return pool, held_out
    out = Path(args.out)

    def recorded(split: str, clips: int):
        return record_frames(domain, out / f"data-{split}", clips=clips, length=args.clip_length, seed=args.seed,
                             split=split, progress=args.progress, warmup=args.clip_warmup,
                             score_max=args.clip_score_max)  # fmt: skip

    val_clips = -(-args.eval_states // args.clip_length)
    held: Scenes = RecordedScenes(
        domain, recorded("val", val_clips).spread(args.eval_states), args.image_size
    )
    return RecordedScenes(domain, recorded("train", args.clips), args.image_size), held


def _stage_done(args: TrainRendererArgs, stage: str, step: int, started: float) -> bool:
    steps = args.vae_steps if stage == "vae" else args.unet_steps
    minutes = args.vae_minutes if stage == "vae" else args.unet_minutes
    return step >= steps or (minutes > 0 and time.time() - started > 60 * minutes)


@dataclass
class RendererRun:
    """What a renderer run carries from step to step: the pipeline, both optimizers and where it stands."""

    args: TrainRendererArgs
    out: Path
    pipe: Any  # diffusers.StableDiffusionPipeline
    noise_schedule: Any  # diffusers.DDPMScheduler: the training-time forward process
    vae_opt: torch.optim.Optimizer
    unet_opt: torch.optim.Optimizer
    stage: str = "vae"
    step: int = 0
    elapsed: float = 0.0  # seconds of earlier sessions, from the checkpoint
    started: float = field(default_factory=time.time)  # when this session's current stage began
    ema: Any = None  # diffusers.training_utils.EMAModel of stage 2's networks when args.ema_decay > 0
    output_size: tuple[int, int] | None = (
        None  # the frames' size saved renderers hand out; None: args.output_size
    )

    def stage_two_parameters(self) -> list[torch.nn.Parameter]:
        """What stage 2 trains (UNet, text encoder, VAE decoder), the whole VAE included: the EMA's order."""
        return [
            *self.pipe.unet.parameters(),
            *self.pipe.text_encoder.parameters(),
            *self.pipe.vae.parameters(),
        ]

    def start_ema(self, state: dict[str, Any] | None = None) -> None:
        """The exponential moving average of stage 2's weights (from the current ones, or a saved state)."""
        from diffusers.training_utils import EMAModel

        self.ema = EMAModel(self.stage_two_parameters(), decay=self.args.ema_decay)
        if state is not None:
            self.ema.load_state_dict(state)

    @contextmanager
    def averaged(self) -> Iterator[None]:
        """Inside, the networks hold the EMA weights (when there is an EMA); the trained ones come back after."""
        if self.ema is None:
            yield
            return
        params = self.stage_two_parameters()
        self.ema.store(params)
        self.ema.copy_to(params)
        try:
            yield
        finally:
            self.ema.restore(params)

    def checkpoint(self) -> None:
        vae = self.pipe.vae
        atomic_torch_save(
            {
                "args": self.args.to_dict(),
                "stage": self.stage,
                "step": self.step,
                "elapsed": self.elapsed + time.time() - self.started,
                "vae": vae.state_dict(),
                "unet": self.pipe.unet.state_dict(),
                "text_encoder": self.pipe.text_encoder.state_dict(),
                "vae_opt": self.vae_opt.state_dict(),
                "unet_opt": self.unet_opt.state_dict(),
                "scaling_factor": vae.config.scaling_factor if self.stage != "vae" else None,
                "rng": rng_state(),
                "ema": self.ema.state_dict() if self.ema is not None else None,
            },
            self.out / CHECKPOINT,
        )

    def after_step(self, bar: Any, **losses: float) -> None:
        """Count the step, show the loss, and every 50 steps log the losses; checkpoint on schedule."""
        self.step += 1
        if self.ema is not None:
            self.ema.step(self.stage_two_parameters())
        bar.update(1)
        bar.set_postfix(loss=f"{losses['loss']:.4f}")
        if self.step % 50 == 0:
            elapsed = self.elapsed + time.time() - self.started
            write_log(self.out, {"stage": self.stage, "step": self.step, **losses, "time": elapsed})

    def checkpoint_due(self) -> bool:
        return self.step % self.args.checkpoint_every == 0


def train_renderer(args: TrainRendererArgs) -> dict[str, Any]:
    """Run (or resume) both stages; returns the final evaluation. The trained pipeline lands in out/pipeline,
    the best evaluated one in out/best."""
    torch.set_num_threads(args.threads)
    domain = get_domain(args.domain)
    run = setup_run(args)
    pool, held_out = renderer_data(args, domain)
    if isinstance(held_out, RecordedScenes):
        run.output_size = held_out.screen_size  # a game's renderer hands out frames of its screens' size
    captioner = _load_captioner(args, domain)
    run.started = time.time()
    if run.stage == "vae":
        fit_vae(run, pool, held_out, captioner)
    best = fit_unet(run, pool, held_out, captioner)
    with run.averaged():  # what ships is the average when there is one
        final = _eval_unet(run.pipe, held_out, args, captioner, run.out, run.step)
        save_renderer(run.pipe, args, run.out / FINAL_FOLDER, final, output_size=run.output_size)
    write_log(run.out, {"stage": "done", "step": run.step, "eval": final, "best": best})
    return final


def setup_run(args: TrainRendererArgs) -> RendererRun:
    """The seeded fresh pipeline and its optimizers, restored from out/checkpoint.pt when there is one."""
    from diffusers import DDPMScheduler

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(args.seed)
    pipe = fresh_pipeline(args)
    pipe.set_progress_bar_config(disable=True)
    vae, unet, text_encoder = pipe.vae, pipe.unet, pipe.text_encoder
    logger.info(
        "renderer: vae %.2fM, unet %.2fM, text encoder %.2fM parameters",
        count_parameters(vae) / 1e6,
        count_parameters(unet) / 1e6,
        count_parameters(text_encoder) / 1e6,
    )
    run = RendererRun(
        args,
        out,
        pipe,
        DDPMScheduler.from_config(pipe.scheduler.config),
        torch.optim.AdamW(vae.parameters(), lr=args.vae_lr, weight_decay=0.0),
        torch.optim.AdamW(
            list(unet.parameters()) + list(text_encoder.parameters()), lr=args.unet_lr, weight_decay=0.01
        ),
    )
    ckpt_path = out / CHECKPOINT
    if not ckpt_path.exists():
        if args.init_from:
            _init_from(run, Path(args.init_from))
        return run
    ckpt = torch.load(ckpt_path, weights_only=False)
    refuse_other_run(ckpt.get("args"), args.to_dict(), RESUME_KEYS, "renderer", ckpt_path)
    vae.load_state_dict(ckpt["vae"])
    run.vae_opt.load_state_dict(ckpt["vae_opt"])
    # At the start of stage 2 the UNet is still untrained: its sizes may be changed before resuming.
    if args.init_from or not (ckpt["stage"] == "unet" and ckpt["step"] == 0):
        unet.load_state_dict(ckpt["unet"])
        text_encoder.load_state_dict(ckpt["text_encoder"])
        run.unet_opt.load_state_dict(ckpt["unet_opt"])
    if ckpt.get("scaling_factor") is not None:
        vae.register_to_config(scaling_factor=ckpt["scaling_factor"])
    run.stage, run.step, run.elapsed = ckpt["stage"], ckpt["step"], ckpt.get("elapsed", 0.0)
    if run.stage == "done" and not _stage_done(args, "unet", run.step, time.time()):
        run.stage = "unet"  # a larger budget extends a finished run
    if ckpt.get("ema") is not None and args.ema_decay > 0:
        run.start_ema(ckpt["ema"])
    torch.set_rng_state(ckpt["rng"]["torch"])
    np.random.set_state(ckpt["rng"]["numpy"])
    logger.info("resumed %s at stage %s step %d", ckpt_path, run.stage, run.step)
    return run


# What makes a run the run it is: resuming with other values would continue one recipe's checkpoint as another's
# (e.g. `train all` after a recipe was renamed). Budgets, evaluation, threads and sampling may change on a resume.
RESUME_KEYS = (
    "domain",
    "clips",
    "clip_warmup",
    "clip_score_max",
    "seed",
    "count_weights",
    "pool",
    "init_from",
    "refit_vae",
    "vae_lr",
    "unet_lr",
    "ema_decay",
    "prediction_type",
    "image_size",
    "vae_channels",
    "vae_latent_channels",
    "object_weight",
    "pixel_weight",
)


def _init_from(run: RendererRun, folder: Path) -> None:
    """Start from a saved renderer's VAE, UNet and text encoder (a fine-tune): at stage 2, or at stage 1 with
    `refit_vae`. The saved networks must have the shapes `run.args` describe; a mismatch is refused with the
    folder's name."""
    from diffusers import StableDiffusionPipeline

    if not (folder / "model_index.json").is_file():
        raise ValueError(f"init_from: {folder} is not a saved renderer (no model_index.json)")
    with quiet_loading(diffusers=True):
        saved = StableDiffusionPipeline.from_pretrained(
            folder,
            local_files_only=True,
            dtype=torch.float32,
            safety_checker=None,
            requires_safety_checker=False,
        )
    for name in ("vae", "unet", "text_encoder"):
        try:
            getattr(run.pipe, name).load_state_dict(getattr(saved, name).state_dict())
        except RuntimeError as exc:
            raise ValueError(
                f"init_from: the {name} of {folder} does not match these renderer arguments "
                f"({str(exc).splitlines()[0]})"
            ) from None
    run.pipe.vae.register_to_config(scaling_factor=saved.vae.config.scaling_factor)
    run.stage, run.step = ("vae" if run.args.refit_vae else "unet"), 0
    logger.info("renderer: stage %s starts from %s", run.stage, folder)


def fit_vae(run: RendererRun, pool: Scenes, held_out: Scenes, captioner: Any = None) -> None:
    """Stage 1: the VAE learns to reconstruct frames (batches drawn from the seeded pool); then its latents'
    scaling factor is fixed and the run moves to stage 2. With a captioner its evaluations read the VAE's own
    reconstructions back ("roundtrip_acc"): the most the UNet's frames, decoded by this VAE, can read back, known
    before stage 2's hour is spent."""
    from tqdm import tqdm

    args, vae = run.args, run.pipe.vae
    vae.train()
    for group in run.vae_opt.param_groups:
        group["lr"] = args.vae_lr
    bar = tqdm(
        total=args.vae_steps, initial=run.step, desc="renderer vae", unit="step", disable=not args.progress
    )
    while not _stage_done(args, "vae", run.step, run.started):
        gen = torch.Generator().manual_seed(args.seed * 1_000_003 + run.step)
        x = pool.frames(torch.randint(len(pool), (args.vae_batch,), generator=gen).tolist())  # (B, 3, H, W)
        posterior = vae.encode(x).latent_dist
        latent = posterior.sample(generator=gen) if args.vae_sample else posterior.mode()
        recon = vae.decode(latent).sample
        rec = reconstruction_loss(recon, x, args.object_weight, symmetric=args.vae_object_pixels == "both",
                                  background=pool.background)  # fmt: skip
        kl = posterior.kl().mean() / x[0].numel()
        loss = rec + args.kl_weight * kl
        run.vae_opt.zero_grad(set_to_none=True)
        loss.backward()
        run.vae_opt.step()
        run.after_step(bar, loss=loss.item(), rec=rec.item(), kl=kl.item())
        if run.step % args.eval_every == 0:
            write_log(
                run.out, {"stage": "vae", "step": run.step, "eval": _eval_vae(vae, held_out, captioner)}
            )
        if run.checkpoint_due():
            run.checkpoint()
    bar.close()
    metrics = _eval_vae(vae, held_out, captioner)
    write_log(run.out, {"stage": "vae", "step": run.step, "eval": metrics, "final": True})
    logger.info("vae done at step %d: %s", run.step, metrics)
    vae.register_to_config(scaling_factor=_scaling_factor(vae, pool))
    run.stage, run.step = "unet", 0
    run.checkpoint()


def fit_unet(run: RendererRun, pool: Scenes, held_out: Scenes, captioner: Any) -> dict[str, Any]:
    """Stage 2: the frozen VAE's latents of the pool are cached once; the UNet and text encoder learn them
    (the decoder may keep learning alongside). Returns the best periodic evaluation ({} when none ran)."""
    from tqdm import tqdm

    args, pipe = run.args, run.pipe
    vae = pipe.vae
    vae.eval().requires_grad_(False)
    pool_latents = _encode_pool(vae, pool, args, run.out)
    # The encoder stays frozen (so the cached latents stay valid); the decoder may keep learning from them.
    if args.decoder_every:
        for p in list(vae.post_quant_conv.parameters()) + list(vae.decoder.parameters()):
            p.requires_grad_(True)
        for group in run.vae_opt.param_groups:
            group["lr"] = args.vae_lr / 3  # fine-tuning: steadier than the stage-1 rate
    tokenize = partial(pipe.tokenizer, padding="max_length", max_length=args.max_length, return_tensors="pt")
    ids = tokenize(pool.states, truncation=True).input_ids  # (P, L)
    empty_ids = tokenize([""]).input_ids  # (1, L)
    best = _saved_best(run.out / BEST_FOLDER)  # a resumed run competes with what best/ already holds
    if run.stage != "unet":
        return best
    run.started = time.time()
    if args.ema_decay > 0 and run.ema is None:
        run.start_ema()
    pipe.unet.train()
    pipe.text_encoder.train()
    bar = tqdm(
        total=args.unet_steps, initial=run.step, desc="renderer unet", unit="step", disable=not args.progress
    )
    while not _stage_done(args, "unet", run.step, run.started):
        loss = _unet_step(run, pool, pool_latents, ids, empty_ids)
        run.after_step(bar, loss=loss)
        if run.step % args.eval_every == 0:
            with run.averaged():
                metrics = _eval_unet(pipe, held_out, args, captioner, run.out, run.step)
                score = _score(metrics)
                if not best or score >= best["score"]:
                    best = {"score": score, "step": run.step, **metrics}
                    save_renderer(pipe, args, run.out / BEST_FOLDER, metrics, output_size=run.output_size)
            pipe.unet.train()
            pipe.text_encoder.train()
        if run.checkpoint_due():
            run.checkpoint()
    bar.close()
    run.stage = "done"
    run.checkpoint()
    return best


def _score(metrics: dict[str, Any]) -> float:
    """What best/ is chosen by: the captioner round trip when there was a captioner, else the world's frame check,
    else (a game's screens without a captioner) SSIM."""
    key = next(k for k in ("roundtrip_acc", "frame_acc", "ssim") if k in metrics)
    return float(metrics[key])


def _saved_best(folder: Path) -> dict[str, Any]:
    """The evaluation best/ was saved with, as fit_unet records it ({} when there is none yet)."""
    path = folder / "metrics.json"
    if not path.is_file():
        return {}
    metrics = json.loads(path.read_text())
    return {"score": _score(metrics), **metrics}


def _unet_step(
    run: RendererRun,
    pool: Scenes,
    pool_latents: torch.Tensor,
    ids: torch.Tensor,
    empty_ids: torch.Tensor,
) -> float:
    """One optimizer step of the UNet + text encoder (and, every decoder_every steps, of the VAE decoder)."""
    args, vae, unet, step = run.args, run.pipe.vae, run.pipe.unet, run.step
    gen = torch.Generator().manual_seed(args.seed * 1_000_003 + 7 + step)
    idx = torch.randint(len(pool), (args.unet_batch,), generator=gen)
    x0 = pool_latents[idx]  # (B, C, h, w)
    batch_ids = ids[idx].clone()  # (B, L)
    if args.cond_dropout > 0:
        drop = torch.rand(len(idx), generator=gen) < args.cond_dropout
        batch_ids[drop] = empty_ids
    noise = torch.randn(x0.shape, generator=gen)
    # Timesteps skewed towards pure noise when asked: few-step sampling decides the layout at t ~ T.
    u = torch.rand(len(idx), generator=gen) ** args.timestep_power
    schedule = run.noise_schedule
    t = ((1.0 - u) * (schedule.config.num_train_timesteps - 1)).round().long()  # (B,)
    xt = schedule.add_noise(x0, noise, t)
    if args.prediction_type == "sample":
        target = x0
    elif args.prediction_type == "epsilon":
        target = noise
    else:
        target = schedule.get_velocity(x0, noise, t)
    for group in run.unet_opt.param_groups:
        group["lr"] = args.unet_lr * min(1.0, (step + 1) / UNET_WARMUP)
    cond = run.pipe.text_encoder(batch_ids)[0]  # (B, L, text_width)
    pred = unet(xt, t, cond).sample
    loss = F.mse_loss(pred, target)
    decoder_turn = bool(args.decoder_every) and step % args.decoder_every == 0
    pixel = args.pixel_weight > 0 and decoder_turn
    if pixel:
        # End to end: decode the UNet's clean-latent estimate and compare it with the world's frame, so the
        # UNet and decoder can carry what the frozen encoder's latents miss (a ball against a box).
        x = pool.frames(idx.tolist())  # (B, 3, H, W)
        recon = vae.decode(pred / vae.config.scaling_factor).sample
        loss = loss + args.pixel_weight * reconstruction_loss(
            recon, x, args.object_weight, background=pool.background
        )
        run.vae_opt.zero_grad(set_to_none=True)
    run.unet_opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(list(unet.parameters()) + list(run.pipe.text_encoder.parameters()), 1.0)
    run.unet_opt.step()
    if pixel:
        run.vae_opt.step()
    elif decoder_turn:
        didx = torch.randint(len(pool), (args.vae_batch,), generator=gen)
        x = pool.frames(didx.tolist())  # (B, 3, H, W)
        recon = vae.decode(pool_latents[didx] / vae.config.scaling_factor).sample
        dec_loss = reconstruction_loss(recon, x, args.object_weight, background=pool.background)
        run.vae_opt.zero_grad(set_to_none=True)
        dec_loss.backward()
        run.vae_opt.step()
    return loss.item()


def _eval_vae(vae, held_out: Scenes, captioner: Any = None) -> dict[str, float]:
    was_training = vae.training
    vae.eval()
    with torch.no_grad():
        recon = torch.cat([vae.decode(vae.encode(held_out.frames(idx)).latent_dist.mode()).sample
                           for idx in _chunks(len(held_out), 64)])  # fmt: skip
    vae.train(was_training)
    frames = ((recon.clamp(-1, 1) + 1) * 127.5).round().byte().permute(0, 2, 3, 1).numpy()
    return held_out.evaluate(list(frames), captioner)


def _chunks(n: int, size: int) -> list[range]:
    return [range(i, min(n, i + size)) for i in range(0, n, size)]


def _scaling_factor(vae, pool: Scenes) -> float:
    """1 / std of the VAE's latents of the pool's first 256 frames, so that the diffusion sees unit-variance data
    (as SD's 0.18215 does)."""
    with torch.no_grad():
        z = vae.encode(pool.frames(range(min(256, len(pool))))).latent_dist.mode()
    return float(1.0 / z.std())


def _encode_pool(vae, pool: Scenes, args: TrainRendererArgs, out: Path) -> torch.Tensor:
    """Scaled latents (P, C, h, w) of every pool state, cached on disk beside the checkpoint."""
    path = out / "pool_latents.pt"
    if path.exists():
        cached = torch.load(path)
        if cached["n"] == len(pool) and cached["scaling_factor"] == vae.config.scaling_factor:
            return cached["latents"]
    from tqdm import tqdm

    chunks = []
    with torch.no_grad():
        for idx in tqdm(
            _chunks(len(pool), 64), desc="renderer latents", unit="batch", disable=not args.progress
        ):
            z = vae.encode(pool.frames(idx)).latent_dist.mode()
            chunks.append(z * vae.config.scaling_factor)
    latents = torch.cat(chunks)  # (P, C, h, w)
    atomic_torch_save({"n": len(pool), "scaling_factor": vae.config.scaling_factor, "latents": latents}, path)
    return latents


def _eval_unet(
    pipe, held_out: Scenes, args: TrainRendererArgs, captioner, out: Path, step: int
) -> dict[str, Any]:
    t = time.time()
    frames = sample(pipe, held_out.states, args.sample_steps, args.guidance, seed=args.seed)
    seconds = time.time() - t
    metrics: dict[str, Any] = held_out.evaluate(frames, captioner)
    metrics["sample_seconds_per_frame"] = seconds / len(held_out)
    save_strip(
        out / "strips" / f"unet_{step:06d}.png",
        [held_out.shown(i) for i in range(min(8, len(held_out)))],
        frames[:8],
    )
    write_log(out, {"stage": "unet", "step": step, "eval": metrics})
    logger.info("renderer eval at step %d: %s", step, metrics)
    return metrics
