"""The word-level tokenizer of semantic states: built from a corpus, saved as tokenizer.json beside the weights.

Words and every punctuation mark are separate tokens, text is lowercased, [PAD] has id 0 and [UNK] id 1.

A predictor that forecasts under actions has one more kind of token: an action word, stored as "do:<word>" so
that it can never be read out of a state's text. Such a tokenizer encodes each state into N-1 slots and puts the
action taken after the state into the last slot (the action slot); PAD there means the action is unknown.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer, normalizers, pre_tokenizers
from tokenizers.models import WordLevel

from pipeline.utils import UserError, atomic_write_text

logger = logging.getLogger(__name__)

PAD_TOKEN, UNK_TOKEN = "[PAD]", "[UNK]"
PAD_ID, UNK_ID = 0, 1
END_TOKENS = (".", "!", "?")  # a state (one sentence) ends at its first one of these
TOKENIZER_FILE = "tokenizer.json"
ACTION_PREFIX = "do:"  # an action word's token: "do:up"

# Detokenizing: no space before closing punctuation, none after an opening bracket.
_SPACE_BEFORE = re.compile(r" ([.,!?;:)\]}])")
_SPACE_AFTER = re.compile(r"([(\[{]) ")
_APOSTROPHE = re.compile(r"(\w) ' (\w)")  # "tom ' s" -> "tom's"


@dataclass(frozen=True)
class EncodedStates:
    """States encoded into a fixed width: `ids` is (S, N), `lengths` the untruncated token counts (S,)."""

    ids: torch.Tensor  # (S, N) int64, padded with PAD_ID
    lengths: list[int]  # tokens each state had before truncation
    truncated: int  # how many states were longer than N and were cut


def _base_tokenizer(vocab: dict[str, int]) -> Tokenizer:
    tok = Tokenizer(WordLevel(vocab, unk_token=UNK_TOKEN))
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation(behavior="isolated")]
    )
    return tok


class StateTokenizer:
    """A `tokenizers.Tokenizer` (WordLevel) plus fixed-width encoding of states into (S, N) id tensors."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        vocab = tokenizer.get_vocab()
        if vocab.get(PAD_TOKEN) != PAD_ID or vocab.get(UNK_TOKEN) != UNK_ID:
            raise ValueError(
                f"tokenizer must map {PAD_TOKEN}->0 and {UNK_TOKEN}->1, got {PAD_TOKEN}->"
                f"{vocab.get(PAD_TOKEN)} and {UNK_TOKEN}->{vocab.get(UNK_TOKEN)}"
            )
        self.backend = tokenizer
        self._id_to_token = {i: t for t, i in vocab.items()}
        # action word -> id, in id order (a tokenizer of states alone has none)
        self._action_id = {t[len(ACTION_PREFIX) :]: i for i, t in sorted(self._id_to_token.items())
                           if t.startswith(ACTION_PREFIX)}  # fmt: skip

    # ---- construction -------------------------------------------------------------------------------
    @classmethod
    def build(
        cls, sentences: Iterable[str], min_frequency: int = 1, actions: Sequence[str] = ()
    ) -> StateTokenizer:
        """Count words over `sentences` and keep those seen at least `min_frequency` times.

        Ids are assigned by descending frequency, ties broken alphabetically, so the result does not depend
        on corpus order. The end marks '.', '!', '?' are always in the vocabulary. `actions`: the action words of
        a predictor that forecasts under actions, appended as "do:<word>" tokens in the order given.
        """
        if min_frequency < 1:
            raise ValueError(f"min_frequency must be >= 1, got {min_frequency}")
        probe = _base_tokenizer({PAD_TOKEN: PAD_ID, UNK_TOKEN: UNK_ID})
        counts: Counter[str] = Counter()
        for sentence in sentences:
            normalized = probe.normalizer.normalize_str(sentence)
            counts.update(word for word, _ in probe.pre_tokenizer.pre_tokenize_str(normalized))
        kept = sorted((w for w, c in counts.items() if c >= min_frequency), key=lambda w: (-counts[w], w))
        kept += [e for e in END_TOKENS if e not in kept]
        vocab = {PAD_TOKEN: PAD_ID, UNK_TOKEN: UNK_ID}
        for word in [*kept, *(ACTION_PREFIX + a for a in actions)]:
            if word not in vocab:
                vocab[word] = len(vocab)
        logger.info(
            "tokenizer: %d words seen, %d kept (min frequency %d), vocabulary %d",
            len(counts),
            len(kept),
            min_frequency,
            len(vocab),
        )
        return cls(_base_tokenizer(vocab))

    @classmethod
    def from_file(cls, path: str | Path) -> StateTokenizer:
        path = Path(path)
        if path.is_dir():
            path = path / TOKENIZER_FILE
        if not path.is_file():
            raise FileNotFoundError(
                f"{path}: no tokenizer file (expected {TOKENIZER_FILE} beside the weights)"
            )
        return cls(Tokenizer.from_file(str(path)))

    from_pretrained = from_file

    def save(self, directory: str | Path) -> Path:
        """Write `tokenizer.json` into `directory` (created if needed) and return its path."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / TOKENIZER_FILE
        atomic_write_text(path, self.backend.to_str(pretty=True))
        return path

    def to_transformers(self):  # -> transformers.PreTrainedTokenizerFast
        """The same tokenizer as a transformers `PreTrainedTokenizerFast` (pad and unk tokens set)."""
        from transformers import PreTrainedTokenizerFast

        return PreTrainedTokenizerFast(
            tokenizer_object=self.backend, pad_token=PAD_TOKEN, unk_token=UNK_TOKEN
        )

    # ---- vocabulary ---------------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size()

    @property
    def end_ids(self) -> tuple[int, ...]:
        """Ids of the sentence-final marks present in the vocabulary (the models' `end_ids`)."""
        vocab = self.backend.get_vocab()
        return tuple(vocab[e] for e in END_TOKENS if e in vocab)

    @property
    def actions(self) -> tuple[str, ...]:
        """The action words, in id order; () for a tokenizer of states alone."""
        return tuple(self._action_id)

    def action_ids(self, actions: Sequence[str | None]) -> list[int]:
        """Action words -> ids (None: unknown, PAD_ID); a word the tokenizer lacks is a ValueError naming it."""
        out = []
        for i, a in enumerate(actions):
            if a is None:
                out.append(PAD_ID)
            elif isinstance(a, str) and a.strip().lower() in self._action_id:
                out.append(self._action_id[a.strip().lower()])
            else:
                known = ", ".join(self.actions) or "none"
                raise ValueError(f"action {i} is {a!r}, not an action of this predictor ({known})")
        return out

    def action_word(self, token_id: int) -> str | None:
        """The action word of an id, None when it is not an action's."""
        token = self._id_to_token.get(int(token_id), "")
        return token[len(ACTION_PREFIX) :] if token.startswith(ACTION_PREFIX) else None

    def tokens(self, sentence: str) -> list[str]:
        return self.backend.encode(sentence, add_special_tokens=False).tokens

    # ---- encoding -----------------------------------------------------------------------------------
    def encode(self, sentence: str) -> list[int]:
        """All ids of one sentence, no padding, no truncation."""
        return self.backend.encode(sentence, add_special_tokens=False).ids

    def encode_states(
        self, states: Sequence[str], N: int, actions: Sequence[str | None] | None = None
    ) -> EncodedStates:
        """Encode each state into N ids: cut after N tokens, pad with 0. Returns ids (S, N) and counts.

        A tokenizer with actions writes each state into the first N-1 slots and the action after it (actions[s],
        None or missing: unknown) into the last one."""
        if N < 1 + bool(self.actions):
            raise ValueError(f"N must be >= {1 + bool(self.actions)}, got {N}")
        acts = self.action_ids(list(actions or [])[: len(states)]) if self.actions else []
        ids = torch.full((len(states), N), PAD_ID, dtype=torch.long)  # (S, N)
        if acts:
            ids[: len(acts), -1] = torch.tensor(acts, dtype=torch.long)
        N -= bool(self.actions)  # the state's own slots
        lengths: list[int] = []
        encodings = self.backend.encode_batch(list(states), add_special_tokens=False) if states else []
        for s, enc in enumerate(encodings):
            row = enc.ids
            lengths.append(len(row))
            if row:
                ids[s, : min(len(row), N)] = torch.tensor(row[:N], dtype=torch.long)
        truncated = sum(n > N for n in lengths)
        return EncodedStates(ids=ids, lengths=lengths, truncated=truncated)

    # ---- decoding -----------------------------------------------------------------------------------
    def decode(self, ids: Sequence[int] | torch.Tensor) -> str:
        """Ids back to text, stopping at the first padding id; words joined the way they are written."""
        text = self.spell(ids)
        text = _APOSTROPHE.sub(r"\1'\2", text)
        return _SPACE_AFTER.sub(r"\1", _SPACE_BEFORE.sub(r"\1", text))

    def spell(self, ids: Sequence[int] | torch.Tensor) -> str:
        """Ids back to a state in its canonical spelling, stopping at the first padding id: every token (word or
        punctuation mark) separated by one space, "red ball top left , lamp on .", the spelling the shapes domain
        captions and the captioner use, so that predicted and observed states compare as plain strings."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        words: list[str] = []
        for i in ids:
            token = self._id_to_token.get(int(i), UNK_TOKEN)
            # the state ends at padding; an action (its last slot) is not part of it
            if int(i) == PAD_ID or token.startswith(ACTION_PREFIX):
                break
            words.append(token)
        return " ".join(words)


def load_tokenizer(directory: str | Path) -> StateTokenizer:
    """The tokenizer saved beside weights in `directory` (a UserError naming the path if it is missing)."""
    try:
        return StateTokenizer.from_file(directory)
    except FileNotFoundError as err:
        raise UserError(str(err)) from None
