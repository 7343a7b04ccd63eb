"""Rolling a trained predictor forward: k future states from a history of states, by sliding the window.

Each new window is the last T states, embedded again at positions 0..T-1 (section 2.3); the recurrent state
that each step returns (None, or the tensor memory's (h, c)) is handed to the next window's call.

On the device: a model with `decode_step` (the 4-tensor one) gets its readout matrix M materialised once per
rollout and a fixed-shape step with no host round trip; the whole rollout stays on the device and may be compiled
(`compile=True`: torch.compile, CUDA graphs on a GPU) and run in bfloat16/float16 under autocast (`dtype`).

With a projection (pipeline/projection.py) each predicted state is first made a valid state of the weights'
domain, from the model's per-slot logits (`next_logits`), and that state is what the next window reads.

A predictor trained on states with actions (its tokenizer has action words) reads the action taken after each
state in the state's last slot. A forecast under given actions writes each given action into the predicted
state's slot before the next step reads it; a step with no action given reads the slot as empty (unknown), as
the predictor saw a share of its training windows (pipeline/data.py, ACTION_DROPOUT).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import torch

from pipeline.domain import Domain, get_domain
from pipeline.projection import GrammarProjection, projection_for
from pipeline.symmetry import MirrorAveraged, mirror_for
from pipeline.tokenizer import PAD_ID, StateTokenizer
from pipeline.utils import UserError, resolve_device

Step = Callable[
    [torch.Tensor, torch.Tensor, object | None], tuple[torch.Tensor, object | None]
]  # (w, M, state)
Advance = Callable[[torch.Tensor, object | None], tuple[torch.Tensor, object | None]]  # (window, state)

logger = logging.getLogger(__name__)


class Predictor:
    """A predictor model plus its tokenizer: text histories in, predicted text states out.

    Notation: B histories, T states per window, N token slots per state.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: StateTokenizer,
        device: torch.device | str = "cpu",
        dtype: torch.dtype | None = None,
        compile: bool = False,
        projection: GrammarProjection | None = None,
    ) -> None:
        """dtype: the compute dtype of the matrix products (None or float32: plain float32; bfloat16/float16:
        autocast, the weights and the softmax stay float32). compile: torch.compile the rollout step (static
        shapes; mode reduce-overhead, i.e. CUDA graphs, on a GPU); if compiling fails the step runs eagerly.
        projection: None (the model's own argmax decoding) or a GrammarProjection that turns each predicted
        state's logits (`next_logits`) into a valid state; the rollout feeds the projected state back (it runs
        the packed next_logits step, never the compiled one)."""
        if model.config.vocab_size != tokenizer.vocab_size:
            raise ValueError(
                f"model vocab_size {model.config.vocab_size} != tokenizer vocab_size {tokenizer.vocab_size}"
            )
        if projection is not None and not hasattr(model, "next_logits"):
            raise ValueError(f"projection: {type(model).__name__} has no next_logits to project")
        if dtype is not None and dtype not in (torch.float32, torch.bfloat16, torch.float16):
            raise ValueError(f"dtype must be torch.float32, torch.bfloat16 or torch.float16, got {dtype!r}")
        self.device = torch.device(device)
        self.dtype = dtype or torch.float32
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        self.projection = projection
        # The action slot (the last) of a predictor that forecasts under actions; None for states alone.
        acts = getattr(tokenizer, "actions", ())  # (a stand-in tokenizer may not say)
        self.action_slot: int | None = int(model.config.N) - 1 if acts else None
        self.compile = bool(compile)
        self._compiled: Step | None = None
        # The fixed-shape step (no host round trip) off the CPU or when compiled; on the CPU the packed
        # predict_next, which skips padding slots, is faster at large batches (docs/benchmarks.md, GPU section).
        self.fixed_shapes = hasattr(model, "decode_step") and (self.device.type != "cpu" or self.compile)
        if self.compile and hasattr(model, "decode_step"):
            # Fixed shapes per (batch, T, N): one graph per batch size, no dynamic-shape tracing.
            mode = "reduce-overhead" if self.device.type == "cuda" else None
            try:
                self._compiled = torch.compile(self._eager_step, mode=mode, dynamic=False)
            except Exception as err:  # torch.compile unsupported here (Python version, platform)
                logger.warning(
                    "predictor: torch.compile is not available (%s); the rollout runs eagerly", err
                )
        elif self.compile:
            logger.warning("predictor: compile=True, but %s has no decode_step; it runs eagerly",
                           type(model).__name__)  # fmt: skip

    @classmethod
    def from_pretrained(
        cls,
        directory: str | Path,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        compile: bool = False,
        domain: Domain | str | None = None,
        project: bool = True,
        mirror: bool = False,
    ) -> Predictor:
        """Load weights (either model kind) and tokenizer.json from a training output directory.

        domain: the domain the weights were trained on (model_index.json's "domain"; None: free text). When it
        has an automaton of its valid states and `project` is on (the default), predicted states are projected
        onto them (pipeline/projection.py).
        mirror: forecast from the mean of each history and its mirror (pipeline/symmetry.py; the 4-tensor model
        in a domain with a mirror only; the model reads twice the rows: 2.5-2.7x its time on the CPU,
        docs/benchmarks.md).
        """
        from models.hub import load_predictor

        dev = resolve_device(device)
        try:
            model = load_predictor(directory, map_location=dev)
            tokenizer = StateTokenizer.from_file(directory)
        except (FileNotFoundError, ValueError) as err:  # the user's folder: one line, like the other stages
            raise UserError(f"predictor weights {err}") from None
        n_slots = int(cast(Any, model).config.N)  # nn.Module's typing does not see the config
        domain = get_domain(domain)
        if mirror:
            perm = mirror_for(domain, tokenizer)
            if perm is None or not hasattr(model, "readout_matrix"):
                raise UserError(f"mirror averaging needs the 4-tensor model and a domain with a mirror; the "
                                f"{domain.name} domain has none")  # fmt: skip
            model = MirrorAveraged(model, perm)
        projection = projection_for(domain, tokenizer, n_slots, tokenizer.end_ids) if project else None
        return cls(model, tokenizer, dev, dtype=dtype, compile=compile, projection=projection)

    @property
    def T(self) -> int:
        return int(self.model.config.T)

    @property
    def N(self) -> int:
        return int(self.model.config.N)

    @property
    def has_memory(self) -> bool:
        """The model carries a tensor memory: predict streams whole histories through it."""
        return getattr(self.model, "memory", None) is not None

    @property
    def actions(self) -> tuple[str, ...]:
        """The action words this predictor forecasts under; () when it reads states alone."""
        return tuple(getattr(self.tokenizer, "actions", ()))

    def encode_histories(
        self,
        states: list[list[str]],
        truncate: bool = False,
        keep: int | None = None,
        actions: list[list[str | None]] | None = None,
    ) -> torch.Tensor:
        """Histories -> the first window (B, T, N): the last T states (keep: the last `keep` states instead,
        (B, keep, N)), front-padded with empty states. actions[b][i]: the action after history b's state i
        (a predictor with actions; None or missing: unknown)."""
        if not isinstance(states, list) or not states:
            raise ValueError(
                "states: expected a non-empty list of histories (each a non-empty list of strings)"
            )
        T, N = keep or self.T, self.N
        width = N - (self.action_slot is not None)  # the slots a state's own words may fill
        window = torch.full((len(states), T, N), PAD_ID, dtype=torch.long)  # (B, T, N)
        for b, history in enumerate(states):
            if isinstance(history, str) or not isinstance(history, list) or not history:
                raise ValueError(f"states[{b}]: expected a non-empty list of state strings, got {history!r}")
            if not all(isinstance(s, str) for s in history):
                raise ValueError(f"states[{b}]: every state must be a string")
            recent = history[-T:]
            acts = None if actions is None else list(actions[b][: len(history)])[len(history) - len(recent) :]
            try:
                enc = self.tokenizer.encode_states(recent, N, acts)
            except ValueError as err:  # an action word the predictor does not know
                raise ValueError(f"actions[{b}]: {err}") from None
            if enc.truncated:
                long = [(i, n) for i, n in enumerate(enc.lengths) if n > width]
                where = ", ".join(f"state {len(history) - len(recent) + i} has {n} tokens" for i, n in long)
                if not truncate:
                    raise ValueError(
                        f"states[{b}]: {where}; the model reads at most N={N} tokens per state"
                        + (", one of them the action's" if width < N else "")
                        + " (pass truncate=True to cut them)"
                    )
                logger.warning("states[%d]: %s; truncated to %d tokens", b, where, width)
            window[b, T - len(recent) :] = enc.ids  # shorter histories: empty states in front
        return window

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        """Autocast to the compute dtype (float32: none, so the 'meta' device and plain runs need no autocast)."""
        if self.dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def readout(self) -> torch.Tensor:
        """The readout matrix M (d, V), materialised once per rollout in the compute dtype (paper 3.5.1)."""
        with torch.no_grad():
            return self.model.readout_matrix().to(self.dtype)  # type: ignore[no-any-return]

    def _eager_step(
        self, window: torch.Tensor, readout: torch.Tensor, state: object | None
    ) -> tuple[torch.Tensor, object | None]:
        with self._autocast():
            return self.model.decode_step(window, readout, state)  # type: ignore[no-any-return]

    def _step(
        self, window: torch.Tensor, readout: torch.Tensor, state: object | None
    ) -> tuple[torch.Tensor, object | None]:
        """One step, compiled when asked; a compile failure is one warning, then every step runs eagerly."""
        if self._compiled is not None:
            try:
                if self.device.type == "cuda":
                    torch.compiler.cudagraph_mark_step_begin()  # a new replay: the last step's outputs are copied
                ids, state = self._compiled(window, readout, state)
                # CUDA graph outputs live in the graph's memory and the next replay overwrites them: copy them
                # before they are fed back.
                return ids.clone(), _clone_state(state)
            except Exception as err:  # no C compiler, no Triton, an unsupported op: run eagerly from now on
                first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
                logger.warning("predictor: torch.compile failed (%s: %s); the rollout runs eagerly",
                               type(err).__name__, first[:200])  # fmt: skip
                self._compiled = None
        return self._eager_step(window, readout, state)

    @torch.no_grad()
    def predict_ids(
        self, window: torch.Tensor, k: int, state: object | None = None, actions: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, object | None]:
        """window (B, T, N) -> k >= 1 predicted states (B, k, N), and the recurrent state after the last window.

        actions (B, k), a predictor with actions: the action id written into predicted state j's action slot
        (PAD_ID: none given, read as unknown; None: every step unknown). Everything stays on the device: no
        value is read back to the host inside the loop."""
        window = window.to(self.device)
        B, _, N = window.shape
        predicted = window.new_empty(B, k, N)  # (B, k, N)
        if hasattr(self.model, "readout_matrix"):
            readout = self.readout()  # once per rollout, not per step (paper 3.5.1)
        if self.projection is not None:  # per-slot logits, then the nearest valid state (host-side search)
            step: Advance = lambda w, s: self._projected_next(  # noqa: E731
                w, s, readout if hasattr(self.model, "readout_matrix")
                else None)  # fmt: skip
        elif self.fixed_shapes:
            step = lambda w, s: self._step(w, readout, s)  # noqa: E731
        elif hasattr(self.model, "decode_step"):  # the 4-tensor model on the CPU: the packed path, same ids
            step = lambda w, s: self._predict_next(w, s, readout)  # noqa: E731
        else:  # a model with predict_next only (the baseline, stand-ins)
            step = lambda w, s: self._predict_next(w, s)  # noqa: E731
        slot = self.action_slot
        if slot is not None:  # (B, k): whatever the model wrote in the slot is replaced
            given = window.new_full((B, k), PAD_ID) if actions is None else actions.to(self.device)
        for j in range(k):
            next_ids, state = step(window, state)  # (B, N)
            if slot is not None:
                next_ids[:, slot] = given[:, j]
            predicted[:, j] = next_ids
            # Slide: drop the oldest state, append the prediction; the model re-embeds slots 0..T-1.
            window = torch.cat([window[:, 1:], next_ids[:, None, :].to(window.dtype)], dim=1)  # (B, T, N)
        return predicted, state  # (B, k, N)

    def _projected_next(
        self, window: torch.Tensor, state: object | None, readout: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, object | None]:
        assert self.projection is not None
        with self._autocast():
            if readout is None:
                logits, state = self.model.next_logits(window, state)  # (B, N, V)
            else:
                logits, state = self.model.next_logits(window, state, readout=readout)
        return self.projection(logits), state  # (B, N): valid states of the grammar

    def _predict_next(
        self, window: torch.Tensor, state: object | None, readout: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, object | None]:
        with self._autocast():
            if readout is None:
                return self.model.predict_next(window, state)  # type: ignore[no-any-return]
            return self.model.predict_next(window, state, readout=readout)  # type: ignore[no-any-return]

    def predict(self, states: list[list[str]], k: int, truncate: bool = False) -> list[list[str]]:
        """Roll out k future states for each history; returns B lists of k states in the canonical spelling
        (tokens separated by single spaces, as the captioner writes them). A predictor with actions reads every
        action as unknown (`predict_under` takes the actions)."""
        return self.predict_under(states, k, truncate=truncate)[0]

    def predict_under(
        self,
        states: list[list[str]],
        k: int,
        actions: list[list[str | None]] | None = None,
        truncate: bool = False,
    ) -> tuple[list[list[str]], list[list[str | None]]]:
        """Roll out k future states for each history under actions; returns the states and the actions used.

        actions[b][i] is the action taken after state i of history b followed by its forecast: the history's
        states first (unknown ones None), then one per forecast step; at most len(history) + k - 1 of them (the
        action after the last forecast state steers nothing). A forecast step without one reads it as unknown.
        The actions used are B lists of k - 1: the action after each forecast state but the last (None where
        none was given). A predictor without actions takes none and returns [] for each history.
        """
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise ValueError(f"k must be a positive integer, got {k!r}")
        forced = self._forecast_actions(states, k, actions)  # (B, k) or None
        if self.has_memory:
            # The whole history goes through the memory (O(length)); histories are aligned at their ends and the
            # front padding writes nothing, so each row gets the state its own history gives.
            longest = (
                max((len(h) for h in states if isinstance(h, list)), default=0)
                if isinstance(states, list)
                else 0
            )
            history = self.encode_histories(
                states, truncate=truncate, keep=max(self.T, longest), actions=actions
            ).to(self.device)
            state = self.model.stream_memory(history)
            ids, _ = self.predict_ids(history[:, -self.T :], k, state, forced)
        else:
            window = self.encode_histories(states, truncate=truncate, actions=actions)
            ids, _ = self.predict_ids(window, k, actions=forced)
        rows = range(ids.shape[0])
        spelled = [[self.tokenizer.spell(ids[b, j]) for j in range(k)] for b in rows]
        if self.action_slot is None:
            return spelled, [[] for _ in rows]
        used = [[self.tokenizer.action_word(int(ids[b, j, -1])) for j in range(k - 1)] for b in rows]
        return spelled, used

    def _forecast_actions(
        self, states: list[list[str]], k: int, actions: list[list[str | None]] | None
    ) -> torch.Tensor | None:
        """The forecast part of `actions` as ids (B, k), PAD_ID where none is given; None without actions."""
        if actions is None:
            return None
        if self.action_slot is None:
            raise ValueError("actions: this predictor forecasts from states alone (its data had no actions)")
        if not isinstance(actions, list) or len(actions) != len(states):
            raise ValueError(f"actions: expected one list per history ({len(states)}), got {actions!r}")
        forced = torch.full((len(states), k), PAD_ID, dtype=torch.long)
        for b, (history, acts) in enumerate(zip(states, actions, strict=True)):
            if not isinstance(acts, list):
                raise ValueError(f"actions[{b}]: expected a list of action words, got {acts!r}")
            if len(acts) > len(history) + k - 1:
                raise ValueError(f"actions[{b}]: {len(acts)} actions for {len(history)} states and {k} forecast "
                                 f"steps; at most {len(history) + k - 1} (one after each state but the last)")  # fmt: skip
            ahead = acts[len(history) :]
            try:  # None -> PAD_ID: unknown
                forced[b, : len(ahead)] = torch.tensor(self.tokenizer.action_ids(ahead), dtype=torch.long)
            except ValueError as err:
                raise ValueError(f"actions[{b}]: {err}") from None
        return forced


def _clone_state(state: object | None) -> object | None:
    """A copy of a recurrent state: None, a tensor, or a tuple of tensors such as MemoryState (h, c)."""
    if isinstance(state, torch.Tensor):
        return state.clone()
    if isinstance(state, tuple):
        items = [_clone_state(x) for x in state]
        if hasattr(state, "_fields"):  # a NamedTuple: rebuilt field by field
            return type(state)(*items)  # type: ignore[arg-type]
        return tuple(items)
    return state
