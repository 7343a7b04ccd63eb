"""Rolling a trained predictor forward: k future states from a history of states, by sliding the window.

Each new window is the last T states, embedded again at positions 0..T-1 (section 2.3); the recurrent state
that `predict_next` returns (None today, a tensor memory later) is handed to the next window's call. With a
projection (pipeline/projection.py) each predicted state is first made a valid state of the weights' grammar, and
that state is what the next window reads.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, cast

import torch

from pipeline.projection import GrammarProjection, projection_for
from pipeline.tokenizer import PAD_ID, StateTokenizer
from pipeline.utils import UserError, resolve_device

logger = logging.getLogger(__name__)


class Predictor:
    """A predictor model plus its tokenizer: text histories in, predicted text states out.

    Notation: B histories, T states per window, N token slots per state.

    projection: None (the model's own argmax decoding, `predict_next`) or a GrammarProjection that turns each
    predicted state's logits (`next_logits`) into a valid state; the rollout feeds the projected state back.
    """

    def __init__(self, model: Any, tokenizer: StateTokenizer, device: torch.device | str = "cpu",
                 projection: GrammarProjection | None = None) -> None:
        if model.config.vocab_size != tokenizer.vocab_size:
            raise ValueError(
                f"model vocab_size {model.config.vocab_size} != tokenizer vocab_size {tokenizer.vocab_size}"
            )
        if projection is not None and not hasattr(model, "next_logits"):
            raise ValueError(f"projection: {type(model).__name__} has no next_logits to project")
        self.device = torch.device(device)
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        self.projection = projection

    @classmethod
    def from_pretrained(cls, directory: str | Path, device: torch.device | str | None = None,
                        grammar: str | None = None, project: bool = True) -> Predictor:
        """Load weights (either model kind) and tokenizer.json from a training output directory.

        grammar: the grammar the weights were trained on (model_index.json's "grammar"; None: none). With one
        and `project` (the default), predicted states are projected onto its valid states (pipeline/projection.py).
        """
        from models.hub import load_predictor

        dev = resolve_device(device)
        try:
            model = load_predictor(directory, map_location=dev)
            tokenizer = StateTokenizer.from_file(directory)
        except (FileNotFoundError, ValueError) as err:  # the user's folder: one line, like the other stages
            raise UserError(f"predictor weights {err}") from None
        n_slots = int(cast(Any, model).config.N)  # nn.Module's typing does not see the config
        projection = projection_for(grammar, tokenizer, n_slots, tokenizer.end_ids) if project else None
        return cls(model, tokenizer, dev, projection)

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

    def encode_histories(self, states: list[list[str]], truncate: bool = False, keep: int | None = None
                         ) -> torch.Tensor:
        """Histories -> the first window (B, T, N): the last T states (keep: the last `keep` states instead,
        (B, keep, N)), front-padded with empty states."""
        if not isinstance(states, list) or not states:
            raise ValueError(
                "states: expected a non-empty list of histories (each a non-empty list of strings)"
            )
        T, N = keep or self.T, self.N
        window = torch.full((len(states), T, N), PAD_ID, dtype=torch.long)  # (B, T, N)
        for b, history in enumerate(states):
            if isinstance(history, str) or not isinstance(history, list) or not history:
                raise ValueError(f"states[{b}]: expected a non-empty list of state strings, got {history!r}")
            if not all(isinstance(s, str) for s in history):
                raise ValueError(f"states[{b}]: every state must be a string")
            recent = history[-T:]
            enc = self.tokenizer.encode_states(recent, N)
            if enc.truncated:
                long = [(i, n) for i, n in enumerate(enc.lengths) if n > N]
                where = ", ".join(f"state {len(history) - len(recent) + i} has {n} tokens" for i, n in long)
                if not truncate:
                    raise ValueError(
                        f"states[{b}]: {where}; the model reads at most N={N} tokens per state "
                        "(pass truncate=True to cut them)"
                    )
                logger.warning("states[%d]: %s; truncated to N=%d", b, where, N)
            window[b, T - len(recent) :] = enc.ids  # shorter histories: empty states in front
        return window

    @torch.no_grad()
    def predict_ids(
        self, window: torch.Tensor, k: int, state: object | None = None
    ) -> tuple[torch.Tensor, object | None]:
        """window (B, T, N) -> k >= 1 predicted states (B, k, N), and the recurrent state after the last window."""
        window = window.to(self.device)
        predicted = []
        for _ in range(k):
            if self.projection is None:
                next_ids, state = self.model.predict_next(window, state)  # (B, N)
            else:
                logits, state = self.model.next_logits(window, state)  # (B, N, V)
                next_ids = self.projection(logits)  # (B, N): valid states of the grammar
            predicted.append(next_ids)
            # Slide: drop the oldest state, append the prediction; the model re-embeds slots 0..T-1.
            window = torch.cat([window[:, 1:], next_ids[:, None, :].to(window.dtype)], dim=1)  # (B, T, N)
        return torch.stack(predicted, dim=1), state  # (B, k, N)

    def predict(self, states: list[list[str]], k: int, truncate: bool = False) -> list[list[str]]:
        """Roll out k future states for each history; returns B lists of k states in the canonical spelling
        (tokens separated by single spaces, as the captioner writes them)."""
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise ValueError(f"k must be a positive integer, got {k!r}")
        if self.has_memory:
            # The whole history goes through the memory (O(length)); histories are aligned at their ends and the
            # front padding writes nothing, so each row gets the state its own history gives.
            longest = max((len(h) for h in states if isinstance(h, list)), default=0) if isinstance(states, list) else 0
            history = self.encode_histories(states, truncate=truncate, keep=max(self.T, longest)).to(self.device)
            state = self.model.stream_memory(history)
            ids, _ = self.predict_ids(history[:, -self.T :], k, state)
        else:
            window = self.encode_histories(states, truncate=truncate)
            ids, _ = self.predict_ids(window, k)
        return [[self.tokenizer.spell(ids[b, j]) for j in range(k)] for b in range(ids.shape[0])]
