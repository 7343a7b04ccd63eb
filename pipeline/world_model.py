"""`WorldModelPipeline`: clip -> captioned states -> predicted states -> rendered frames, as numbered steps.

The three stages sit behind small interfaces (`Captioner`, `Predictor`, `Renderer` in pipeline.interfaces) and load from one
weights directory whose `model_index.json` names a folder per stage, like a diffusers pipeline.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from pipeline.confidence import check_written_states, clip_warning
from pipeline.domain import Domain, domain_of_index, get_domain, parses, timeline
from pipeline.interfaces import (
    ActionPredictor,
    Captioner,
    Predictor,
    ProgressCallback,
    Renderer,
    ScoringCaptioner,
)
from pipeline.loading import (
    NotLoaded,
    index_state_rate,
    named_stages,
    plugin_stage,
    predictor_vocabulary,
    stage_folders,
)
from pipeline.params import HORIZON_MAX, check_params
from pipeline.placement import resolve_placement
from pipeline.planning import PlanOutput, plan_world
from pipeline.utils import MODEL_INDEX, STAGES, default_weights_dir
from pipeline.video import SampledClip, VideoLimits, VideoSource, encode_mp4, read_video

logger = logging.getLogger(__name__)

MAX_HORIZON = (
    HORIZON_MAX  # most states one call may predict, unless the pipeline is made with a lower max_horizon
)


@dataclass
class WorldModelOutput:
    """What one call produced. Frames are (H, W, 3) uint8 RGB; `video` is the predicted frames as MP4."""

    observed_states: list[str]
    predicted_states: list[str]
    observed_frames: list[np.ndarray]  # the sampled input frames (empty when starting from states)
    predicted_frames: list[np.ndarray]  # one per predicted state (empty when render=False)
    state_rate: float  # states per second: the frame rate of the predicted video
    source_indices: list[int] = field(default_factory=list)  # frame index in the clip of each observed state
    timings: dict[str, float] = field(default_factory=dict)  # seconds per stage, and "total"
    video: bytes | None = None  # H.264 MP4 of the predicted frames, when asked for
    # Per observed state: the captioner's mean token log-probability (None: given in words, or a captioner that
    # does not score), and whether it parses in the weights' domain (None: a domain without a grammar; states
    # given in words are refused unless they parse, so under a grammar they are True).
    observed_confidence: list[float | None] = field(default_factory=list)
    observed_parses: list[bool | None] = field(default_factory=list)
    # Per predicted state: whether it parses in the weights' domain (None: a domain without a grammar).
    predicted_parses: list[bool | None] = field(default_factory=list)
    confidence_threshold: float | None = None  # below it a read state is unsure (None: no threshold)
    warnings: list[str] = field(default_factory=list)  # said once per call (also logged)
    context_frames: list[np.ndarray] = field(default_factory=list)  # drawn for the last N observed states
    # Per step (observed states, then predicted): what changed since the step before, in the domain's words.
    changes: list[list[str]] = field(default_factory=list)
    domain: str | None = None  # the name of the domain the states are written in
    # A predictor with actions: the action after each observed state, then after each predicted state but the
    # last (None: not given, read as unknown); empty for a predictor of states alone.
    actions: list[str | None] = field(default_factory=list)


def check_call(
    video: object | None,
    states: Sequence[str] | None,
    horizon: int,
    stride: int | None = None,
    state_rate: float | None = None,
    steps: int | None = None,
    guidance: float | None = None,
    context: int | None = None,
    *,
    max_horizon: int = MAX_HORIZON,
    max_frames: int = VideoLimits.max_frames,
) -> None:
    """The one check of a world-model call's parameters (the pipeline runs it first; the HTTP layer runs it
    before it queues a job): the ranges of `pipeline.params.ForecastParams`, then this pipeline's own limits.
    Each error is a ValueError naming the parameter and the bad value."""
    if (video is None) == (states is None):
        raise ValueError("give exactly one of video or states")
    check_params(horizon=horizon, stride=stride, state_rate=state_rate, context=context, steps=steps,
                 guidance=guidance)  # fmt: skip
    if horizon > max_horizon:
        raise ValueError(f"horizon: at most {max_horizon}, got {horizon}")
    if states is not None:
        if len(states) == 0:
            raise ValueError("states is empty: give at least one state")
        if len(states) > max_frames:
            raise ValueError(f"got {len(states)} states; the limit is {max_frames}")
        for i, s in enumerate(states):
            if not isinstance(s, str) or not s.strip():
                raise ValueError(f"states[{i}] must be a non-empty string")


def sample_clip(
    video: VideoSource,
    stride: int | None,
    state_rate: float | None,
    limits: VideoLimits,
    default_state_rate: float | None = None,
    on_frame: Callable[[], None] | None = None,
) -> SampledClip:
    """`read_video` at `stride` or `state_rate`, or (neither) at `default_state_rate`; it needs no model, so a
    clip past the limits is refused before any is loaded. `on_frame()` runs after every decoded frame."""
    if stride is None and state_rate is None:
        state_rate = default_state_rate
    return read_video(video, stride=stride, state_rate=state_rate, limits=limits, on_frame=on_frame)


@contextlib.contextmanager
def timed(timings: dict[str, float], stage: str, notify: ProgressCallback | None = None) -> Iterator[None]:
    """Time the block into `timings[stage]`; with `notify`, report the stage as 0 of 1 before the block and as
    1 of 1 after it."""
    if notify is not None:
        notify(stage, 0, 1)
    t = time.perf_counter()
    yield
    timings[stage] = time.perf_counter() - t
    if notify is not None:
        notify(stage, 1, 1)


@dataclass
class Observed:
    """What a call observed: the states (read from `clip`, or given in words when it is None), per state the
    captioner's confidence and the domain's verdict, and the clip's warning if most of it is unsure."""

    states: list[str]
    clip: SampledClip | None
    confidence: list[float | None]
    parses: list[bool | None]
    warnings: list[str]


class WorldModelPipeline:
    """Caption a clip into states, forecast the next ones, and draw them.

    Args:
        captioner: frames -> one state per frame.
        predictor: batch of state histories -> the next `k` states of each.
        renderer: states -> one frame per state.
        limits: what an input clip may be (frames, resolution, duration).
        caption_batch_size / render_batch_size: frames per forward pass of those stages.
        default_state_rate: states per second to read a clip at when a call gives neither stride nor state_rate
            (from_pretrained takes it from model_index.json: the rate the predictor was trained for); None reads
            every frame.
        domain: the domain the stages' states are written in (a Domain or a registry name; None: free text):
            read and predicted states are checked against its grammar, states given in words too, and the
            timeline is in its words (from_pretrained: model_index.json's "domain").
        confidence_threshold: mean token log-probability below which a read state is unsure; when most states of
            a clip are, the output carries one plain warning (from_pretrained: model_index.json's
            "confidence_threshold"; None: the domain's, which may be none).
    """

    def __init__(
        self,
        captioner: Captioner,
        predictor: Predictor,
        renderer: Renderer,
        *,
        limits: VideoLimits | None = None,
        caption_batch_size: int = 16,
        render_batch_size: int = 8,
        max_horizon: int = MAX_HORIZON,
        default_state_rate: float | None = None,
        domain: Domain | str | None = None,
        confidence_threshold: float | None = None,
    ) -> None:
        if default_state_rate is not None and not default_state_rate > 0:
            raise ValueError(f"default_state_rate must be > 0 states per second, got {default_state_rate}")
        if caption_batch_size < 1 or render_batch_size < 1:
            raise ValueError(
                f"batch sizes must be >= 1, got caption={caption_batch_size} render={render_batch_size}"
            )
        self.captioner = captioner
        self.predictor = predictor
        self.renderer = renderer
        self.limits = limits or VideoLimits()
        self.caption_batch_size = caption_batch_size
        self.render_batch_size = render_batch_size
        self.max_horizon = max_horizon
        self.default_state_rate = default_state_rate
        self.domain = get_domain(domain)
        if confidence_threshold is None:
            confidence_threshold = self.domain.confidence_threshold
        self.confidence_threshold = None if confidence_threshold is None else float(confidence_threshold)

    @classmethod
    def from_pretrained(
        cls,
        weights_dir: str | Path | None = None,
        *,
        device: str | torch.device | None = None,
        dtype: str | torch.dtype | None = None,
        stage_devices: Iterable[str] | Mapping[str, str] | None = None,
        stage_dtypes: Iterable[str] | Mapping[str, str] | None = None,
        compile: bool = False,
        captioner: str | Path | None = None,
        predictor: str | Path | None = None,
        renderer: str | Path | None = None,
        stages: Collection[str] | None = None,
        project: bool = True,
        mirror: bool = False,
        **kwargs: Any,
    ) -> WorldModelPipeline:
        """Load the three stages named by `weights_dir/model_index.json` (offline, local files only).

        `weights_dir` defaults to `$SEMWORLD_WEIGHTS_DIR`, else the shipped weights. `captioner`, `predictor`
        or `renderer` load that stage from its own folder instead. `device` (None: CUDA when present) and
        `dtype` (None: per stage) hold for every stage; `stage_devices` / `stage_dtypes` ('predictor=cpu' items or
        a mapping) override them per stage and `compile` compiles the predictor's rollout step
        (pipeline.placement.resolve_placement chooses them all). The index's `state_rate` becomes `default_state_rate` unless kwargs give one.
        `stages` picks which of captioner, predictor and renderer to load (e.g. only the captioner to turn
        videos into states); the others are stand-ins that raise if called, and need no entry in the index.
        None: every stage the index names (weights of a game may have a predictor alone; using a stage they
        lack is a UserError saying so).
        `project`: when the index's domain has an automaton of its valid states, each predicted state is
        projected onto them and fed back as such (pipeline/projection.py); False keeps the predictor's raw argmax
        states. `mirror`: the predictor forecasts from the mean of each history and its mirror (pipeline/symmetry.py;
        a domain with a mirror; about 2.7x the predictor's time).

        A stage whose index entry is `[module, factory]` of an installed module other than transformers,
        diffusers or semworld is a plug-in: `factory(folder, device=..., dtype=..., domain=...)` makes it
        (`plugin_stage`).
        """
        weights_dir = Path(weights_dir) if weights_dir is not None else default_weights_dir()
        overrides = {"captioner": captioner, "predictor": predictor, "renderer": renderer}
        named = stages is None  # then the stages the weights name (and the predictor, always)
        stages = named_stages(weights_dir, overrides) if stages is None else stages
        folders, index = stage_folders(weights_dir, overrides, stages)
        kwargs.setdefault("default_state_rate", index_state_rate(index, weights_dir / MODEL_INDEX))
        kwargs.setdefault("domain", domain_of_index(index, weights_dir / MODEL_INDEX))
        domain = get_domain(kwargs["domain"])
        if isinstance(index.get("confidence_threshold"), int | float):
            kwargs.setdefault("confidence_threshold", float(index["confidence_threshold"]))
        # One choice for all stages (a device this machine lacks, a bad dtype: one line).
        place = resolve_placement(device, dtype, stage_devices=stage_devices, stage_dtypes=stage_dtypes,
                                  compile=compile)  # fmt: skip
        logger.info("placement: %s", place.describe(stages))

        # The stage modules are imported here so that the pipeline itself stays cheap to import.
        from pipeline.captioner import Captioner as HFCaptioner
        from pipeline.predictor import Predictor as TensorPredictor
        from pipeline.renderer import Renderer as HFRenderer

        builtin: dict[str, Callable[[], Any]] = {
            "captioner": lambda: HFCaptioner.from_pretrained(folders["captioner"], device=place.captioner.device,
                                                             dtype=place.captioner.dtype, domain=domain),
            "predictor": lambda: TensorPredictor.from_pretrained(folders["predictor"], device=place.predictor.device,
                                                                 dtype=place.predictor.dtype, compile=place.compile,
                                                                 domain=domain, project=project, mirror=mirror),
            "renderer": lambda: HFRenderer.from_pretrained(folders["renderer"], device=place.renderer.device,
                                                           dtype=place.renderer.dtype),
        }  # fmt: skip
        t0 = time.perf_counter()
        loaded: list[Any] = []
        for stage in STAGES:
            factory = plugin_stage(index, stage) if overrides.get(stage) is None and stage in stages else None
            if stage not in stages:
                loaded.append(NotLoaded(stage, missing=named))
            elif factory is not None:
                at = getattr(place, stage)
                loaded.append(factory(folders.get(stage), device=at.device, dtype=at.dtype, domain=domain))
            else:
                loaded.append(builtin[stage]())
        logger.info("loaded %s from %s in %.1f s", ", ".join(stages), weights_dir, time.perf_counter() - t0)
        return cls(*loaded, **kwargs)

    def check_states(self, states: Sequence[str], label: str = "states") -> None:
        """Refuse states given in words that the models cannot read (a UserError naming the state and the word):
        under the domain's grammar when it has one, words outside the predictor's vocabulary, a state longer
        than the predictor's token slots. Needs no forward pass: the API runs it before queueing."""
        vocabulary, n = predictor_vocabulary(self.predictor)
        check_written_states(states, domain=self.domain, vocabulary=vocabulary, max_tokens=n, label=label)

    # ---- step 1 ---------------------------------------------------------------------------------------------
    def check_inputs(
        self,
        video: VideoSource | SampledClip | None,
        states: Sequence[str] | None,
        horizon: int,
        stride: int | None,
        state_rate: float | None,
        steps: int | None,
        guidance: float | None,
        context: int | None = None,
    ) -> None:
        """`check_call` with this pipeline's max_horizon and frame limit."""
        check_call(video, states, horizon, stride, state_rate, steps, guidance, context,
                   max_horizon=self.max_horizon, max_frames=self.limits.max_frames)  # fmt: skip

    def _check_request(
        self, from_clip: bool, render: bool, render_context: int, actions: Sequence[str | None] | None
    ) -> None:
        """The rest of step 1: render_context, the actions, and the stages the call needs (weights without a
        captioner or a renderer say so before any work)."""
        if isinstance(render_context, bool) or not isinstance(render_context, int) or render_context < 0:
            raise ValueError(f"render_context must be a non-negative integer, got {render_context!r}")
        self.check_actions(actions)
        for stage, used in ((self.captioner, from_clip), (self.renderer, render)):
            if used and isinstance(stage, NotLoaded) and stage.missing:
                stage._fail()

    def __call__(
        self,
        video: VideoSource | SampledClip | None = None,
        *,
        states: Sequence[str] | None = None,
        horizon: int = 8,
        stride: int | None = None,
        state_rate: float | None = None,
        seed: int | None = None,
        generator: torch.Generator | None = None,
        steps: int | None = None,
        guidance: float | None = None,
        context: int | None = None,
        render: bool = True,
        render_context: int = 0,
        encode_video: bool = False,
        callback: ProgressCallback | None = None,
        actions: Sequence[str | None] | None = None,
    ) -> WorldModelOutput:
        """Forecast `horizon` states after a clip (`video`: path, bytes or file, or a clip `sample_clip` read)
        or after given `states`. With neither `stride` nor `state_rate`, a clip is read at `default_state_rate`.

        `context` keeps only the first N sampled frames of the clip as the observed past (the rest can be held out
        as ground truth). `seed` (or a `generator`) makes rendering reproducible; `steps`/`guidance` override
        the renderer's defaults. `render_context` also draws the last N observed states (e.g. states given in
        words, which have no frames) into `output.context_frames`. With `encode_video`, the predicted frames also
        come back as MP4 bytes in `output.video`. `actions`: see `predict_under` (a predictor with actions).
        """
        notify = callback or (lambda stage, done, total: None)
        timings: dict[str, float] = {}
        t_start = time.perf_counter()

        # 1. check inputs
        self.check_inputs(video, states, horizon, stride, state_rate, steps, guidance, context)
        self._check_request(video is not None, render, render_context, actions)

        # 2. decode and sample; 3. caption, batched (or take the states given in words)
        seen = self._observe(video, states, stride, state_rate, context, notify, timings)

        # 4. predict (captions that run past the token slots are cut; states a user wrote never are)
        with timed(timings, "predict", notify):
            predicted, used = self.predict_under(
                seen.states, horizon, actions, truncate=seen.clip is not None
            )
            predicted_parses = [self.parses(s) for s in predicted]

        # 5. render, batched
        frames: list[np.ndarray] = []
        context_frames: list[np.ndarray] = []
        if render:
            if generator is None and seed is not None:
                generator = torch.Generator("cpu").manual_seed(seed)
            drawn = seen.states[-render_context:] if render_context else []
            frames, context_frames = self._draw(predicted, drawn, generator, steps, guidance, notify, timings)

        # 6. encode
        rate = seen.clip.state_rate if seen.clip is not None else float(state_rate or 1.0)
        mp4: bytes | None = None
        if encode_video and frames:
            with timed(timings, "encode", notify):
                mp4 = encode_mp4(frames, rate)

        timings["total"] = time.perf_counter() - t_start
        return WorldModelOutput(
            observed_states=seen.states,
            predicted_states=predicted,
            observed_frames=seen.clip.frames if seen.clip is not None else [],
            predicted_frames=frames,
            state_rate=rate,
            source_indices=seen.clip.indices if seen.clip is not None else [],
            timings=timings,
            video=mp4,
            observed_confidence=seen.confidence,
            observed_parses=seen.parses,
            predicted_parses=predicted_parses,
            confidence_threshold=self.confidence_threshold,
            warnings=seen.warnings,
            context_frames=context_frames,
            changes=timeline(self.domain, [*seen.states, *predicted]),
            domain=self.domain.name,
            actions=used,
        )

    def _observe(self, video: VideoSource | SampledClip | None, states: Sequence[str] | None, stride: int | None,
                 state_rate: float | None, context: int | None, notify: ProgressCallback,
                 timings: dict[str, float]) -> Observed:  # fmt: skip
        """Steps 2 and 3 of a call: the clip decoded, sampled and captioned (with a confidence, a verdict and,
        when most of it is unsure, a warning), or the states given in words, checked."""
        if video is None:
            observed = [s.strip() for s in states or ()]
            self.check_states(observed)  # refused here unless they parse: then each is a valid state
            return Observed(observed, None, [None] * len(observed), [self.parses(s) for s in observed], [])
        with timed(timings, "decode", notify):
            if isinstance(video, SampledClip):  # read already (the CLI reads a clip before it loads models)
                clip = video
            else:  # a stop check after every decoded frame too
                clip = self.read(
                    video, stride, state_rate, on_frame=functools.partial(notify, "decode", 0, 1)
                )
            if context is not None:
                clip.frames, clip.indices, clip.times = (
                    clip.frames[:context],
                    clip.indices[:context],
                    clip.times[:context],
                )

        with timed(timings, "caption"):
            scored = self.caption_scored(clip.frames, notify)
            observed = [text for text, _ in scored]
            confidence = [c for _, c in scored]
            parses = [self.parses(s) for s in observed]
        warning = clip_warning(confidence, parses, self.confidence_threshold, self.domain)
        if warning:
            logger.warning("%s", warning)
        return Observed(observed, clip, confidence, parses, [warning] if warning else [])

    def _draw(self, predicted: list[str], observed: list[str], generator: torch.Generator | None, steps: int | None,
              guidance: float | None, notify: ProgressCallback,
              timings: dict[str, float]) -> tuple[list[np.ndarray], list[np.ndarray]]:  # fmt: skip
        """Step 5 of a call: the predicted states drawn, then the observed ones asked for (`render_context`), from
        the one generator, in that order."""
        with timed(timings, "render"):
            frames = self.render(
                predicted, generator=generator, steps=steps, guidance=guidance, notify=notify
            )
            context_frames = (
                self.render(observed, generator=generator, steps=steps, guidance=guidance, notify=notify)
                if observed
                else []
            )
        return frames, context_frames

    # ---- the stages, each usable on its own -----------------------------------------------------------------
    def parses(self, state: str) -> bool | None:
        """Whether `state` is a valid state of the pipeline's domain (None: a domain without a grammar)."""
        return parses(self.domain, state)

    def read(
        self,
        video: VideoSource,
        stride: int | None = None,
        state_rate: float | None = None,
        on_frame: Callable[[], None] | None = None,
    ) -> SampledClip:
        """Decode and sample a clip within this pipeline's limits; with neither stride nor state_rate, at
        `default_state_rate` (else every frame). `on_frame()` runs after every decoded frame (it may raise)."""
        return sample_clip(video, stride, state_rate, self.limits, self.default_state_rate, on_frame)

    def caption(self, frames: Sequence[np.ndarray], notify: ProgressCallback | None = None) -> list[str]:
        """One state per frame, in batches of `caption_batch_size`."""
        return [text for text, _ in self.caption_scored(frames, notify)]

    def caption_scored(
        self, frames: Sequence[np.ndarray], notify: ProgressCallback | None = None
    ) -> list[tuple[str, float | None]]:
        """(state, confidence) per frame, in batches; the confidence is None for a captioner that does not score."""
        notify = notify or (lambda stage, done, total: None)
        out: list[tuple[str, float | None]] = []
        notify("caption", 0, len(frames))
        for i in range(0, len(frames), self.caption_batch_size):
            batch = list(frames[i : i + self.caption_batch_size])
            scored: list[tuple[str, float | None]]
            if isinstance(self.captioner, ScoringCaptioner):
                scored = list(self.captioner.caption_scored(batch))
            else:
                scored = [(text, None) for text in self.captioner.caption(batch)]
            if len(scored) != len(batch):
                raise RuntimeError(f"captioner returned {len(scored)} states for {len(batch)} frames")
            out.extend(scored)
            notify("caption", len(out), len(frames))
        return out

    @property
    def actions(self) -> tuple[str, ...]:
        """The action words the predictor forecasts under; () for a predictor of states alone."""
        return tuple(getattr(self.predictor, "actions", ()) or ())

    def check_actions(self, actions: Sequence[str | None] | None) -> None:
        """Refuse actions a predictor of states alone cannot take, and entries that are not its action words or
        None (how many a forecast takes is checked once the observed states are known)."""
        if actions is None:
            return
        if isinstance(actions, str) or not isinstance(actions, Sequence):
            raise ValueError(f"actions must be a list of action words, got {type(actions).__name__}")
        if not self.actions:
            raise ValueError("actions: this predictor forecasts from states alone (its data had no actions)")
        bad = [i for i, a in enumerate(actions) if a is not None and not (isinstance(a, str) and a.strip())]
        if bad:
            raise ValueError(f"actions[{bad[0]}] must be an action word or null, got {actions[bad[0]]!r}")
        unknown = [
            i for i, a in enumerate(actions) if a is not None and a.strip().lower() not in self.actions
        ]
        if unknown:
            raise ValueError(f"actions[{unknown[0]}] is {actions[unknown[0]]!r}, not an action of this predictor "
                             f"({', '.join(self.actions)})")  # fmt: skip

    def predict_under(
        self,
        states: Sequence[str],
        horizon: int,
        actions: Sequence[str | None] | None = None,
        truncate: bool = False,
    ) -> tuple[list[str], list[str | None]]:
        """The next `horizon` states after `states` under `actions`, and every action the forecast read: the
        observed states' (None where not given), then the forecast's (see WorldModelOutput.actions).

        actions (a predictor with actions, docs/atari.md): the action after each observed state, then one per
        forecast step (None: unknown); at most len(states) + horizon - 1."""
        if not self.actions:
            self.check_actions(actions)
            return self.predict(states, horizon, truncate=truncate), []
        try:
            (predicted,), (read,) = self.forecast_under([list(states)], horizon, [actions], truncate=truncate)
        except ValueError as err:  # a word the predictor lacks, too many actions: the caller's input
            raise ValueError(str(err).replace("actions[0]: ", "actions: ")) from None
        return predicted, read

    def forecast_under(
        self,
        histories: list[list[str]],
        horizon: int,
        actions: Sequence[Sequence[str | None] | None],
        truncate: bool = False,
    ) -> tuple[list[list[str]], list[list[str | None]]]:
        """`predict_under` for a batch of histories (batch runs use it): each history's next `horizon` states and
        every action its forecast read; actions[b] (None: none given) is checked and spelled as the predictor
        reads it (stripped, lowercase)."""
        for acts in actions:
            self.check_actions(acts)
        if not self.actions:  # (then no history was given any)
            return self.predictor.predict(histories, horizon, truncate=truncate), [[] for _ in histories]
        given = [[None if a is None else a.strip().lower() for a in acts or ()] for acts in actions]
        rollouts, used = cast(ActionPredictor, self.predictor).predict_under(
            histories, horizon, given, truncate=truncate
        )
        read = [
            [*(g + [None] * len(h))[: len(h)], *u] for g, h, u in zip(given, histories, used, strict=True)
        ]
        return [list(r) for r in rollouts], read

    def plan(self, video: VideoSource | None = None, **options: Any) -> PlanOutput:
        """Actions towards a goal in words, planned with the predictor: pipeline.planning.plan_world's options."""
        return plan_world(self, video, **options)

    def predict(self, states: Sequence[str], horizon: int, truncate: bool = False) -> list[str]:
        """The next `horizon` states after `states` (`truncate`: cut states longer than the predictor reads)."""
        (predicted,) = self.predictor.predict([list(states)], horizon, truncate=truncate)
        if len(predicted) != horizon:
            raise RuntimeError(f"predictor returned {len(predicted)} states for horizon {horizon}")
        return list(predicted)

    def render(
        self,
        states: Sequence[str],
        *,
        generator: torch.Generator | None = None,
        steps: int | None = None,
        guidance: float | None = None,
        notify: ProgressCallback | None = None,
    ) -> list[np.ndarray]:
        """One frame per state, in batches of `render_batch_size`; `notify` also runs after every denoising
        step (with the count of frames done so far), so a raising callback stops within one step."""
        notify = notify or (lambda stage, done, total: None)
        frames: list[np.ndarray] = []
        notify("render", 0, len(states))
        for i in range(0, len(states), self.render_batch_size):
            batch = list(states[i : i + self.render_batch_size])
            done = len(frames)
            drawn = self.renderer.render(
                batch,
                generator=generator,
                steps=steps,
                guidance=guidance,
                # a stop check after every denoising step, not only between batches
                step_callback=functools.partial(notify, "render", done, len(states)),
            )
            if len(drawn) != len(batch):
                raise RuntimeError(f"renderer returned {len(drawn)} frames for {len(batch)} states")
            frames.extend(np.asarray(f, dtype=np.uint8) for f in drawn)
            notify("render", len(frames), len(states))
        return frames

    def warmup(self) -> None:
        """Run every stage once on a tiny input, so the first request does not pay for lazy initialisation."""
        blank = np.zeros((64, 64, 3), dtype=np.uint8)
        states = self.caption([blank])
        predicted = self.predict(states, 1, truncate=True)
        self.render(predicted, generator=torch.Generator("cpu").manual_seed(0))
