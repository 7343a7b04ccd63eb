"""Seeded generators of the small synthetic data sets of the Attentime seed's experiments (run.py beside it).

Every example is a list of token ids with one target id, read at the last token ("the last meaningful token").
The seed names the tasks and sizes but not the data; the vocabularies, the lexical variation that makes more
than a handful of distinct sentences, and the train/test split by distinct sentence are our choices.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field

PAD = "[PAD]"


@dataclass
class Vocab:
    """Word <-> id; id 0 is padding."""

    words: list[str] = field(default_factory=lambda: [PAD])

    def id(self, word: str) -> int:
        if word not in self.words:
            self.words.append(word)
        return self.words.index(word)

    def encode(self, sentence: list[str]) -> list[int]:
        return [self.id(w) for w in sentence]

    def __len__(self) -> int:
        return len(self.words)


@dataclass
class Example:
    ids: list[int]
    target: int
    group: str  # structure / association name, for per-group accuracy


# ---- 1. associative recall ------------------------------------------------------------------------------------


def associative_recall(
    n: int, seed: int, length: int = 64, n_keys: int = 16, n_values: int = 10
) -> list[Example]:
    """(length - 2) / 2 key-value pairs (a key keeps one value within a sequence), then a query key present in
    the sequence; the target is its value. Chance is ln(n_values) nats."""
    rng = random.Random(seed)
    keys, values = list(range(1, n_keys + 1)), list(range(n_keys + 1, n_keys + n_values + 1))
    out = []
    for _ in range(n):
        binding = {k: rng.choice(values) for k in keys}
        seq: list[int] = []
        for _ in range((length - 2) // 2):
            k = rng.choice(keys)
            seq += [k, binding[k]]
        q = rng.choice(seq[0::2])
        out.append(Example(seq + [q], binding[q], "recall"))
    return out


RECALL_VOCAB = 1 + 16 + 10


# ---- 2 and 3. role resolution -----------------------------------------------------------------------------------

PARTIES = ("PLAINTIFF", "DEFENDANT")
ACTIVE_VERBS = (("GAVE", "GIVEN"), ("SENT", "SENT"), ("SHOWED", "SHOWN"), ("HANDED", "HANDED"))
OBJECTS = ("DOCS", "FILES", "LETTER", "REPORT")
REL_VERBS = ("IGNORED", "CALLED", "SUED", "PAID")
TAILS = ((), ("LEFT",), ("WON",), ("LOST",))
PRE = ((), ("YESTERDAY",), ("THEN",))
POST = ((), ("TODAY",), ("AGAIN",))


def role_sentences(structure: str, agent: str) -> list[list[str]]:
    """Every distinct sentence of one construction type (structure x agent), in a fixed order."""
    other = PARTIES[1 - PARTIES.index(agent)]
    out = []
    for pre, post in itertools.product(PRE, POST):
        if structure == "active":
            for (verb, _), obj in itertools.product(ACTIVE_VERBS, OBJECTS):
                out.append([*pre, agent, verb, obj, "TO", other, *post])
        elif structure == "passive":
            for (_, part), obj in itertools.product(ACTIVE_VERBS, OBJECTS):
                out.append([*pre, obj, "WAS", part, "BY", agent, "TO", other, *post])
        elif structure == "relative":  # "the <other> whom <agent> ignored (left)": agent is in the middle
            for verb, tail in itertools.product(REL_VERBS, TAILS):
                out.append([*pre, other, "WHOM", agent, verb, *tail, *post])
        else:
            raise ValueError(f"unknown structure {structure!r}")
    return out


def role_vocab() -> Vocab:
    v = Vocab()
    for s in ("active", "passive", "relative"):
        for a in PARTIES:
            for sent in role_sentences(s, a):
                v.encode(sent)
    return v


def basic_roles(n_train: int, n_test: int, seed: int, vocab: Vocab) -> tuple[list[Example], list[Example]]:
    """Experiment 2: the two active-voice types only (agent first), balanced, test sentences unseen in training."""
    return _split(("active",), n_train, n_test, seed, vocab)


def balanced_roles(n_train: int, n_test: int, seed: int, vocab: Vocab) -> tuple[list[Example], list[Example]]:
    """Experiment 3: six construction types (active / passive / relative x agent PLAINTIFF / DEFENDANT), equally
    many of each in train and in test; the test sentences never occur in training."""
    return _split(("active", "passive", "relative"), n_train, n_test, seed, vocab)


def _split(
    structures: tuple[str, ...], n_train: int, n_test: int, seed: int, vocab: Vocab
) -> tuple[list[Example], list[Example]]:
    rng = random.Random(seed)
    types = [(s, a) for s in structures for a in PARTIES]
    train, test = [], []
    for i, (s, a) in enumerate(types):
        pool = role_sentences(s, a)
        rng.shuffle(pool)
        k_tr = n_train // len(types) + (i < n_train % len(types))
        k_te = n_test // len(types) + (i < n_test % len(types))
        if k_tr + k_te > len(pool):
            raise ValueError(f"{s}/{a}: {len(pool)} distinct sentences, asked for {k_tr} + {k_te}")
        for sent, dest in [(x, test) for x in pool[:k_te]] + [(x, train) for x in pool[k_te : k_te + k_tr]]:
            dest.append(Example(vocab.encode(sent), vocab.id(a), s))
    rng.shuffle(train)
    return train, test


# ---- 4. continual learning --------------------------------------------------------------------------------------

FILLERS = ("THE", "A", "OLD", "BIG", "LITTLE")
ANIMAL_VOCAB_WORDS = ("CAT", "DOG", "BIRD", "SAYS", "MEOW", "WOOF", "CHIRP", "PURRS", *FILLERS)


def animal_vocab() -> Vocab:
    v = Vocab()
    for w in ANIMAL_VOCAB_WORDS:
        v.id(w)
    return v


def associations(pairs: list[tuple[str, str]], vocab: Vocab) -> list[Example]:
    """[fillers (0-2, every ordered choice)] subject SAYS -> sound, for each (subject, sound): all variants."""
    out = []
    for subject, sound in pairs:
        for k in range(3):
            for fill in itertools.product(FILLERS, repeat=k):
                out.append(
                    Example(vocab.encode([*fill, subject, "SAYS"]), vocab.id(sound), f"{subject}->{sound}")
                )
    return out
