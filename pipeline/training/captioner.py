"""Training of the embedded captioner: a tiny BLIP (BlipForConditionalGeneration + BlipProcessor with our
word-level tokenizer) learns world frames -> state text; saved in the Hugging Face layout that `Captioner` loads.

The loop is plain and visible: fresh seeded world frames every epoch, AdamW with warmup and cosine decay,
exact-match evaluation on a seeded held-out set each epoch, atomic resumable checkpoints, a JSON-lines log.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from models.captioner import (
    BOS_TOKEN,
    EOS_TOKEN,
    MAX_STATE_TOKENS,
    build_blip,
    build_processor,
)
from pipeline.domain import Domain, get_domain
from pipeline.evaluation.metrics import caption_scores, exact_match
from pipeline.training.image_args import TrainCaptionerArgs, refuse_other_run
from pipeline.training.recorded_frames import RecordedFrames, record_frames
from pipeline.training.schedule import warmup_cosine
from pipeline.utils import UserError, atomic_dir, atomic_torch_save, quiet_loading

if TYPE_CHECKING:
    from pipeline.captioner import Captioner

logger = logging.getLogger(__name__)


# ---- the tokenizer ---------------------------------------------------------------------------------------
def build_tokenizer(sentences: Iterable[str]):  # -> transformers.PreTrainedTokenizerFast
    """Our word-level state tokenizer (pipeline.tokenizer: [PAD]=0, [UNK]=1, same word ids) with [BOS] and
    [EOS] appended as special tokens and a "[BOS] $A [EOS]" template, wrapped for transformers."""
    from tokenizers import Tokenizer, processors
    from transformers import PreTrainedTokenizerFast

    from pipeline.tokenizer import PAD_TOKEN, UNK_TOKEN, StateTokenizer

    backend = Tokenizer.from_str(StateTokenizer.build(sentences).backend.to_str())
    backend.add_special_tokens([BOS_TOKEN, EOS_TOKEN])
    vocab = backend.get_vocab()
    backend.post_processor = processors.TemplateProcessing(
        single=f"{BOS_TOKEN} $A {EOS_TOKEN}",
        special_tokens=[(BOS_TOKEN, vocab[BOS_TOKEN]), (EOS_TOKEN, vocab[EOS_TOKEN])],
    )
    special = {"pad_token": PAD_TOKEN, "unk_token": UNK_TOKEN, "bos_token": BOS_TOKEN, "eos_token": EOS_TOKEN}
    special |= {"sep_token": EOS_TOKEN, "cls_token": BOS_TOKEN}  # the same two marks under their other names
    return PreTrainedTokenizerFast(tokenizer_object=backend, model_max_length=MAX_STATE_TOKENS + 2, **special)


# ---- the data ------------------------------------------------------------------------------------------
def sample_scene(rng: np.random.Generator, count_weights: Sequence[float]):  # -> world.grammar.Scene
    """A uniformly random valid scene whose object count follows `count_weights` (index = number of objects).

    Screen and lamp are each present half the time when the state still fits in N tokens; objects avoid the
    screen's column when it stands. Identities and cells are distinct.
    """
    from world.grammar import COLOURS, GRID, SCREEN_COLUMN, SHAPES, Scene, WorldObject, caption

    weights = np.asarray(count_weights, dtype=np.float64)
    while True:
        n = int(rng.choice(len(weights), p=weights / weights.sum()))
        screen = bool(rng.random() < 0.5)
        lamp_draw = rng.integers(3)  # 0: no lamp, 1: off, 2: on
        lamp = None if lamp_draw == 0 else bool(lamp_draw == 2)
        identities = [(c, s) for c in COLOURS for s in SHAPES]
        cells = [(r, c) for r in range(GRID) for c in range(GRID) if not (screen and c == SCREEN_COLUMN)]
        picked_ids = rng.choice(len(identities), size=n, replace=False)
        picked_cells = rng.choice(len(cells), size=n, replace=False)
        objects = tuple(
            WorldObject(*identities[i], *cells[j]) for i, j in zip(picked_ids.tolist(), picked_cells.tolist())
        )
        scene = Scene(objects, screen=screen, lamp=lamp)
        try:
            caption(scene)
        except ValueError:  # more than N tokens: draw again (3 objects leave no room for screen or lamp)
            continue
        return scene


def degrade(frame: np.ndarray, rng: np.random.Generator, quality: tuple[int, int]) -> np.ndarray:
    """A JPEG round trip at a random quality: the block and ringing artifacts that decoded video frames have."""
    import cv2

    q = int(rng.integers(quality[0], quality[1] + 1))
    ok, buf = cv2.imencode(".jpg", frame[..., ::-1], [cv2.IMWRITE_JPEG_QUALITY, q])
    decoded = cv2.imdecode(buf, cv2.IMREAD_COLOR) if ok else None
    if decoded is None:  # pragma: no cover - OpenCV always round-trips a uint8 image
        return frame
    return np.ascontiguousarray(decoded[..., ::-1])


def rescale(frame: np.ndarray, rng: np.random.Generator, sizes: Sequence[int]) -> np.ndarray:
    """The same scene drawn at a smaller random size and scaled back up (bicubic): the soft edges of a frame
    that a renderer drew at low resolution, or of an upscaled video."""
    from PIL import Image

    side = frame.shape[0]
    small = int(rng.choice(np.asarray(sizes)))
    shrunk = Image.fromarray(frame).resize((small, small), Image.Resampling.BICUBIC)
    return np.asarray(shrunk.resize((side, side), Image.Resampling.BICUBIC))


def add_noise(frame: np.ndarray, rng: np.random.Generator, std: tuple[float, float]) -> np.ndarray:
    """Gaussian pixel noise with a random standard deviation in `std` (in 0..255 units)."""
    sigma = rng.uniform(*std)
    noisy = frame.astype(np.float32) + rng.normal(0.0, sigma, frame.shape).astype(np.float32)
    return np.clip(np.rint(noisy), 0, 255).astype(np.uint8)


def make_examples(
    rng: np.random.Generator,
    n: int,
    count_weights: Sequence[float],
    frame_size: int = 128,
    degrade_prob: float = 0.0,
    jpeg_quality: tuple[int, int] = (60, 95),
    rescale_prob: float = 0.0,
    rescale_sizes: Sequence[int] = (48, 64, 80, 96),
    noise_prob: float = 0.0,
    noise_std: tuple[float, float] = (1.0, 8.0),
    jitter_prob: float = 0.0,
    jitter: float = 0.15,
    resize_prob: float = 0.0,
    resize_range: tuple[int, int] = (56, 192),
) -> tuple[list[np.ndarray], list[str]]:
    """`n` random world frames (frame_size, frame_size, 3) uint8 and their canonical states.

    Each frame is, with its probability, drawn with every object moved off its cell's centre by up to `jitter`
    cells and/or drawn natively at a random side in `resize_range` and resized to frame_size (sub-pixel
    placement and other rasterisations: a renderer's or a camera's frames are never pixel-identical to the
    world's), rescaled through a smaller size, given pixel noise, then sent through a JPEG round trip. A probability of 0 draws no random number, so adding an augmentation
    later in a run leaves the earlier epochs' data unchanged.
    """
    from PIL import Image

    from world.grammar import caption
    from world.render import draw_frame, render_scene

    frames, states = [], []
    for _ in range(n):
        scene = sample_scene(rng, count_weights)
        jittered = jitter_prob > 0 and rng.random() < jitter_prob
        side = frame_size
        if resize_prob > 0 and rng.random() < resize_prob:
            side = int(rng.integers(resize_range[0], resize_range[1] + 1))
        if jittered:
            offsets = rng.uniform(-jitter, jitter, size=(len(scene.objects), 2))
            placed = [
                (o.colour, o.shape, o.row + dy, o.col + dx) for o, (dy, dx) in zip(scene.objects, offsets)
            ]
            frame = draw_frame(placed, screen=scene.screen, lamp=scene.lamp, size=side)
        else:
            frame = render_scene(scene, size=side)
        if side != frame_size:
            frame = np.asarray(
                Image.fromarray(frame).resize((frame_size, frame_size), Image.Resampling.BICUBIC)
            )
        if rescale_prob > 0 and rng.random() < rescale_prob:
            frame = rescale(frame, rng, rescale_sizes)
        if noise_prob > 0 and rng.random() < noise_prob:
            frame = add_noise(frame, rng, noise_std)
        if degrade_prob > 0 and rng.random() < degrade_prob:
            frame = degrade(frame, rng, jpeg_quality)
        frames.append(frame)
        states.append(caption(scene))
    return frames, states


def world_sentences() -> list[str]:
    """Sentences that between them hold every word of the world's vocabulary (for building the tokenizer)."""
    from world.grammar import VOCAB

    return [" ".join(VOCAB)]


def domain_sentences(domain: Domain) -> list[str]:
    """The words a captioner of `domain` writes, for its tokenizer: the built-in world's in their fixed order,
    another closed vocabulary sorted."""
    if domain.name == "shapes":
        return world_sentences()
    if domain.vocabulary is None:
        raise UserError(
            f"domain {domain.name!r} has an open vocabulary: bring a captioner with its own tokenizer"
        )
    return [" ".join(sorted(domain.vocabulary))]


def lr_at(step: int, args: TrainCaptionerArgs) -> float:
    """Linear warmup over warmup_steps, then cosine decay from lr to lr * min_lr_ratio at the last step."""
    return warmup_cosine(args.lr, step, args.total_steps, args.warmup_steps, args.min_lr_ratio)


def encode_batch(processor, frames: list[np.ndarray], states: list[str]) -> dict[str, torch.Tensor]:
    """Model inputs of one batch: pixel_values (B, 3, S, S), input_ids / attention_mask / labels (B, L)."""
    pixel_values = processor.image_processor(images=frames, return_tensors="pt")[
        "pixel_values"
    ]  # (B, 3, S, S)
    text = processor.tokenizer(states, padding="longest", return_tensors="pt")  # "[BOS] words [EOS]" (B, L)
    labels = text["input_ids"].masked_fill(text["attention_mask"] == 0, -100)  # no loss on padding
    return {
        "pixel_values": pixel_values,
        "input_ids": text["input_ids"],
        "attention_mask": text["attention_mask"],
        "labels": labels,
    }


def caption_in_batches(captioner: Captioner, frames: Sequence[np.ndarray], batch: int = 256) -> list[str]:
    """`captioner.caption` over `frames` a batch at a time (a held-out set of a thousand frames at once is
    needlessly large in memory)."""
    return [t for i in range(0, len(frames), batch) for t in captioner.caption(frames[i : i + batch])]


def recorded_set(args: TrainCaptionerArgs, domain: Domain, split: str, clips: int) -> RecordedFrames:
    """`clips` clips of `split` of a recording domain, recorded once into run_dir/data-<split>."""
    return record_frames(domain, Path(args.run_dir) / f"data-{split}", clips=clips, length=args.clip_length,
                         seed=args.seed, split=split, progress=args.progress, warmup=args.clip_warmup,
                         score_max=args.clip_score_max)  # fmt: skip


def evaluation_set(seed: int, n: int, counts: int) -> tuple[list[np.ndarray], list[str]]:
    """The seeded held-out set: n frames, balanced over 0..counts-1 objects, clean (no JPEG)."""
    rng = np.random.default_rng([seed, 1_000_003])  # a stream no training epoch uses
    frames, states = [], []
    for k in range(counts):
        weights = [1.0 if i == k else 0.0 for i in range(counts)]
        f, s = make_examples(rng, n // counts + (1 if k < n % counts else 0), weights)
        frames += f
        states += s
    return frames, states


def attention_targets(states: Sequence[str], length: int, grid: int) -> torch.Tensor:
    """(B, L) index of the image token each text position should look at, -1 where none is prescribed.

    Input position 5k (the [BOS] or the ',' before object k) and the next three (its colour, shape and row
    words) predict object k's next word, which only that object's cell shows: image token 1 + row * grid + col
    (token 0 is the class token). Requires one ViT patch per world cell.
    """
    from world.grammar import parse_state

    targets = torch.full((len(states), length), -1, dtype=torch.long)  # (B, L)
    for b, state in enumerate(states):
        for k, obj in enumerate(parse_state(state).objects):
            targets[b, 5 * k : 5 * k + 4] = 1 + obj.row * grid + obj.col
    return targets


def place_targets(
    domain: Domain, states: Sequence[str], length: int, grid: int, screen: tuple[int, int]
) -> torch.Tensor:
    """attention_targets for a recording domain: (B, L) index of the image token holding the place where the
    domain says word w of each state is read (input position w writes word w), -1 where it names none. `screen`
    is the frames' (H, W), resized to the square image: one ViT patch covers H / grid rows, W / grid columns."""
    targets = torch.full((len(states), length), -1, dtype=torch.long)  # (B, L)
    height, width = screen
    for b, state in enumerate(states):
        places = domain.word_places(state) or []  # type: ignore[attr-defined]
        for w, place in enumerate(places[:length]):
            if place is not None:
                r = min(grid - 1, int(place[0] * grid / height))
                c = min(grid - 1, int(place[1] * grid / width))
                targets[b, w] = 1 + r * grid + c
    return targets


def world_split_exact_match(
    captioner, clips: int = 200, seed: int = 0, split: str = "test"
) -> dict[str, float]:
    """Exact match of `captioner` on the frames at the state instants of `clips` world clips of `split`
    (every scenario, as `semworld world generate --scenario all` makes them), overall and by object count."""
    from world import frames_and_states

    pairs = list(frames_and_states("all", n=clips, seed=seed, split=split))
    predicted = captioner.caption([frame for frame, _ in pairs])
    return {**exact_match(predicted, [state for _, state in pairs]), "frames": len(pairs)}


def save_model(model, processor, directory: Path) -> None:
    """save_pretrained (safetensors) of model and processor into `directory`, replaced atomically."""
    with atomic_dir(directory) as tmp, quiet_loading():  # no "Writing model shards" bar per save
        model.save_pretrained(tmp, safe_serialization=True)
        processor.save_pretrained(tmp)


@dataclass
class CaptionerRun:
    """One captioner training run: the model, its processor and optimizer, and where the run stands."""

    args: TrainCaptionerArgs
    model: Any  # transformers.BlipForConditionalGeneration
    processor: Any  # transformers.BlipProcessor
    optimizer: torch.optim.Optimizer
    device: torch.device
    domain: Domain
    pool: RecordedFrames | None = (
        None  # a recording domain's training frames (None: the world draws fresh ones)
    )
    start_epoch: int = 0
    best: dict[str, Any] = field(default_factory=lambda: {"exact_match": -1.0})
    hard: np.ndarray | None = None  # indices into pool of the frames read worst (rank_hard)

    @property
    def run_dir(self) -> Path:
        return Path(self.args.run_dir)

    def log(self, record: dict[str, Any]) -> None:
        with (self.run_dir / "log.jsonl").open("a") as f:
            f.write(json.dumps(record) + "\n")

    @property
    def supervise_attention(self) -> bool:
        """Attention supervision needs, for the built-in world, one ViT patch per world cell; for a recording
        domain, a domain that says where each word is read (word_places)."""
        from world.grammar import GRID

        if self.args.attn_weight <= 0:
            return False
        if self.pool is not None:
            return hasattr(self.domain, "word_places")
        return self.args.model.image_size // self.args.model.patch_size == GRID


def train_captioner(args: TrainCaptionerArgs) -> dict[str, float]:
    """Train (or resume) the embedded captioner; returns the best held-out metrics. See TrainCaptionerArgs."""
    from pipeline.captioner import Captioner

    torch.set_num_threads(args.threads)
    run = setup_run(args)
    if run.pool is None:
        eval_frames, eval_states = evaluation_set(args.seed, args.eval_frames, len(args.count_weights))
        # The same held-out scenes drawn at 64 and scaled up, then JPEG'd: a check of robustness, not of the
        # target.
        soft_rng = np.random.default_rng([args.seed, 1_000_033])
        soft_frames = [degrade(rescale(f, soft_rng, (64,)), soft_rng, (85, 85)) for f in eval_frames[::4]]
    else:  # a recording domain: val-split clips, the frames decoded from their MP4 files
        val = recorded_set(args, run.domain, "val", -(-args.eval_frames // args.clip_length)).spread(
            args.eval_frames
        )
        eval_frames, eval_states, soft_frames = list(val.frames), val.states, []
    captioner = Captioner(run.model, run.processor)  # the same adapter code that serves the model
    for epoch in range(run.start_epoch, args.epochs):
        if args.target is not None and run.best["exact_match"] >= args.target:
            break
        hard_due = run.hard is None or epoch % args.hard_every == 0
        if run.pool is not None and args.hard_share > 0 and hard_due:
            run.hard = rank_hard(run)
        t0 = time.time()
        losses, last_step = fit_epoch(run, epoch)
        train_s = time.time() - t0
        predicted = caption_in_batches(captioner, eval_frames)
        metrics = caption_scores(run.domain, predicted, eval_states)
        soft = (
            exact_match(captioner.caption(soft_frames), eval_states[::4])["exact_match"]
            if soft_frames
            else -1.0
        )
        wrong = [(p, s) for p, s in zip(predicted, eval_states) if p != s][:3]
        run.log({"event": "epoch", "epoch": epoch + 1, "step": (epoch + 1) * args.steps_per_epoch,
                 "loss": float(np.mean(losses)), "lr": lr_at(last_step, args), "train_s": round(train_s, 1),
                 "eval_s": round(time.time() - t0 - train_s, 1), **metrics, "soft_exact_match": soft,
                 "examples_wrong": wrong})  # fmt: skip
        logger.info("epoch %d: loss %.4f, exact match %.4f (%s), soft frames %.4f, %.0fs", epoch + 1,
                    float(np.mean(losses)), metrics["exact_match"],
                    {k: round(v, 3) for k, v in metrics.items() if k != "exact_match"}, soft, train_s)  # fmt: skip
        save_epoch(run, epoch, metrics)
    return save_and_test(run)


# What makes a run the run it is (resuming under other values would continue one run's checkpoint as another's);
# budgets, evaluation, threads and the target may change on a resume.
RESUME_KEYS = ("model", "domain", "clips", "clip_length", "clip_warmup", "clip_score_max", "seed", "init_from", "lr",
               "batch_size", "steps_per_epoch", "count_weights")  # fmt: skip


def setup_run(args: TrainCaptionerArgs) -> CaptionerRun:
    """The seeded fresh BLIP (or the --init-from model to fine-tune) and its optimizer, restored from
    run_dir/checkpoint.pt when there is one."""
    run_dir = Path(args.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    device = torch.device(args.device)
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    domain = get_domain(args.domain)
    tokenizer = build_tokenizer(domain_sentences(domain))
    processor = build_processor(tokenizer, args.model.image_size)
    model = build_blip(args.model, tokenizer).to(device)
    if args.init_from is not None:
        from safetensors.torch import load_file

        weights = Path(args.init_from) / "model.safetensors"
        if not weights.is_file():
            raise UserError(
                f"--init-from {args.init_from}: no model.safetensors (expected a captioner folder)"
            )
        missing, unexpected = model.load_state_dict(load_file(str(weights)), strict=False)
        if unexpected or [
            k for k in missing if "predictions.decoder" not in k
        ]:  # tied weights are not stored
            raise UserError(f"--init-from {args.init_from}: not a captioner of shape {args.model}")
        model.tie_weights()
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "embeddings" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "embeddings" not in n)]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr, betas=(0.9, 0.98),
    )  # fmt: skip
    run = CaptionerRun(args, model, processor, optimizer, device, domain)
    if domain.name != "shapes":
        run.pool = recorded_set(args, domain, "train", args.clips)
        logger.info("%d training frames of %s", len(run.pool), domain.name)
    ckpt_path = run_dir / "checkpoint.pt"
    if ckpt_path.exists():
        state = torch.load(ckpt_path, map_location=device, weights_only=False)
        refuse_other_run(state.get("args"), asdict(args), RESUME_KEYS, "captioner", ckpt_path)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        run.start_epoch, run.best = state["epoch"] + 1, state["best"]
        logger.info("resuming from %s at epoch %d (best exact match so far %.4f)", ckpt_path, run.start_epoch,
                    run.best["exact_match"])  # fmt: skip
    n_params = sum(p.numel() for p in model.parameters())
    grid = args.model.image_size // args.model.patch_size
    if args.attn_weight > 0 and not run.supervise_attention:
        logger.info("no attention supervision: the ViT grid (%d) is not the world's, or the domain does not say "
                    "where its words are read", grid)  # fmt: skip
    logger.info("captioner: %d parameters, %s", n_params, args.model)
    if run.start_epoch == 0:
        run.log({"event": "start", "args": asdict(args), "parameters": n_params})
    return run


def fit_epoch(run: CaptionerRun, epoch: int) -> tuple[list[float], int]:
    """One epoch of fresh seeded frames (the harder augmentations only from augment_from on); its losses and
    last step."""
    from tqdm import tqdm

    args, model, device = run.args, run.model, run.device
    model.train()
    rng = np.random.default_rng([args.seed, epoch])
    late = epoch >= args.augment_from
    rescale_prob, noise_prob = (args.rescale_prob, args.noise_prob) if late else (0.0, 0.0)
    jitter_prob, resize_prob = (args.jitter_prob, args.resize_prob) if late else (0.0, 0.0)
    losses: list[float] = []
    step = epoch * args.steps_per_epoch
    bar = tqdm(range(args.steps_per_epoch), desc=f"captioner epoch {epoch + 1}/{args.epochs}", leave=False,
               mininterval=5.0, disable=not args.progress)  # fmt: skip
    for i in bar:
        step = epoch * args.steps_per_epoch + i
        if run.pool is None:
            frames, states = make_examples(rng, args.batch_size, args.count_weights, degrade_prob=args.degrade_prob,
                                           rescale_prob=rescale_prob, noise_prob=noise_prob,
                                           jitter_prob=jitter_prob, resize_prob=resize_prob)  # fmt: skip
        else:  # recorded frames, already H.264's; a JPEG round trip on some, as for the world's
            n_hard = round(args.batch_size * args.hard_share) if run.hard is not None else 0
            frames, states = run.pool.sample(rng, args.batch_size - n_hard)
            if n_hard and run.hard is not None:
                hard_frames, hard_states = run.pool.take(rng.choice(run.hard, size=n_hard))
                frames, states = frames + hard_frames, states + hard_states
            frames = [degrade(f, rng, (60, 95)) if rng.random() < args.degrade_prob else f for f in frames]
        batch = {k: v.to(device) for k, v in encode_batch(run.processor, frames, states).items()}
        for group in run.optimizer.param_groups:
            group["lr"] = lr_at(step, args)
        loss = _loss(run, batch, states)
        run.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        run.optimizer.step()
        losses.append(loss.item())
        bar.set_postfix(loss=f"{np.mean(losses[-50:]):.4f}", refresh=False)
    return losses, step


def _decode(model: Any, batch: dict[str, torch.Tensor], **options: Any) -> Any:
    """The computation of model(**batch) spelled out, so that the text decoder takes `options` (its loss's
    reduction, its attention maps): the decoder's output."""
    image = model.vision_model(pixel_values=batch["pixel_values"]).last_hidden_state  # (B, 1+P, d)
    return model.text_decoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                              encoder_hidden_states=image, labels=batch["labels"], return_dict=True,
                              **options)  # fmt: skip


@torch.inference_mode()
def frame_losses(run: CaptionerRun, batch: int = 128) -> np.ndarray:
    """The model's mean token loss on each frame of the training pool, teacher-forced: (F,)."""
    model, pool = run.model, run.pool
    assert pool is not None
    model.eval()
    losses = np.empty(len(pool), dtype=np.float32)
    for i in range(0, len(pool), batch):
        states = pool.states[i : i + batch]
        inputs = {k: v.to(run.device) for k, v in encode_batch(run.processor, list(pool.frames[i : i + batch]),
                                                                  states).items()}  # fmt: skip
        out = _decode(model, inputs, reduction="none")  # loss (B,): summed over each caption's tokens
        # the decoder predicts tokens 1..L-1
        tokens = (inputs["labels"][:, 1:] != -100).sum(dim=1).clamp(min=1)  # (B,)
        losses[i : i + len(states)] = (out.loss / tokens).float().cpu().numpy()
    model.train()
    return losses


def rank_hard(run: CaptionerRun) -> np.ndarray:
    """Indices of the top `hard_top` share of the training pool by the model's loss (frame_losses)."""
    assert run.pool is not None
    t0 = time.time()
    losses = frame_losses(run)
    k = max(1, round(run.args.hard_top * len(losses)))
    hard = np.argsort(losses, kind="stable")[-k:]  # (k,)
    logger.info("hard frames: %d of %d, mean loss %.4f (pool %.4f), ranked in %.0fs", k, len(losses),
                float(losses[hard].mean()), float(losses.mean()), time.time() - t0)  # fmt: skip
    return hard


def _loss(run: CaptionerRun, batch: dict[str, torch.Tensor], states: list[str]) -> torch.Tensor:
    """The captioning loss, plus the attention-supervision term when it applies."""
    model = run.model
    if not run.supervise_attention:
        return model(**batch).loss
    dec = _decode(model, batch, output_attentions=True)  # keeping the decoder's cross-attention maps
    attn = torch.stack(dec.cross_attentions).mean(dim=(0, 2))  # (layers, B, H, L, 1+P) -> (B, L, 1+P)
    grid = run.args.model.image_size // run.args.model.patch_size
    if run.pool is None:
        targets = attention_targets(states, attn.shape[1], grid)  # (B, L)
    else:
        screen = (run.pool.frames.shape[1], run.pool.frames.shape[2])
        targets = place_targets(run.domain, states, attn.shape[1], grid, screen)
    targets = targets.to(run.device)
    mask = targets >= 0
    picked = attn.gather(-1, targets.clamp(min=0)[..., None])[..., 0]  # (B, L)
    if not mask.any():  # no word of this batch is read from one place
        return dec.loss
    attn_loss = -(picked[mask] + 1e-6).log().mean()
    return dec.loss + run.args.attn_weight * attn_loss


def save_epoch(run: CaptionerRun, epoch: int, metrics: dict[str, float]) -> None:
    """Keep the best evaluated weights (ties go to the later epoch), then checkpoint the run."""
    if metrics["exact_match"] >= run.best["exact_match"]:
        run.best = {**metrics, "epoch": epoch + 1}
        atomic_torch_save({"model": run.model.state_dict(), "metrics": run.best}, run.run_dir / "best.pt")
    atomic_torch_save({"model": run.model.state_dict(), "optimizer": run.optimizer.state_dict(), "epoch": epoch,
                       "best": run.best, "args": asdict(run.args)}, run.run_dir / "checkpoint.pt")  # fmt: skip


def save_and_test(run: CaptionerRun) -> dict[str, float]:
    """Save the best weights to `out` in the Hugging Face layout; with test_clips, reload them through the
    serving adapter (offline) and score the world's test split."""
    from pipeline.captioner import Captioner

    args, model, best = run.args, run.model, run.best
    best_path = run.run_dir / "best.pt"
    if best_path.exists():
        model.load_state_dict(torch.load(best_path, map_location=run.device, weights_only=False)["model"])
    save_model(model.cpu(), run.processor, Path(args.out))
    run.log({"event": "saved", "out": str(args.out), **best})
    logger.info("saved the best captioner (epoch %s, exact match %.4f) to %s", best.get("epoch"),
                best["exact_match"], args.out)  # fmt: skip
    if args.test_clips:
        served = Captioner.from_pretrained(args.out, device="cpu", domain=run.domain)
        if run.pool is None:
            test = world_split_exact_match(served, clips=args.test_clips)
        else:
            clips = recorded_set(args, run.domain, "test", args.test_clips)
            read = caption_in_batches(served, list(clips.frames))
            test = {**caption_scores(run.domain, read, clips.states), "frames": len(clips)}
        run.log({"event": "test", "split": "test", "clips": args.test_clips, **test})
        logger.info("test split (%d frames): exact match %.4f %s", test["frames"], test["exact_match"],
                    {k: round(v, 4) for k, v in test.items() if "=" in k})  # fmt: skip
        best = {**best, **{f"test_{k}": v for k, v in test.items()}}
    return best
