"""The state grammar of the built-in world: vocabulary, scene dataclasses, `caption` and `parse_state`.

A state is one sentence over a closed vocabulary, tokenised word-level (punctuation marks are tokens):

    state  := item ( "," item )* "."   |   "empty" "."
    item   := COLOUR SHAPE ROW COLUMN  |  "screen"  |  "lamp" ( "on" | "off" )

Objects come first in identity order (colour, then shape), then the screen, then the lamp, so that equal scenes
give equal strings. Example: "red ball top left , blue box bottom right , lamp on ."
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Identity words; their order here is the canonical order of objects in a caption.
COLOURS: tuple[str, ...] = ("red", "orange", "green", "blue", "purple")
SHAPES: tuple[str, ...] = ("ball", "box", "triangle", "diamond")
# A 5 x 5 grid of coarse positions: row 0 is the top, column 0 the left.
ROWS: tuple[str, ...] = ("top", "upper", "middle", "lower", "bottom")
COLUMNS: tuple[str, ...] = ("left", "midleft", "center", "midright", "right")
OTHER_WORDS: tuple[str, ...] = ("screen", "lamp", "on", "off", "empty")
PUNCTUATION: tuple[str, ...] = (",", ".")

GRID = 5  # rows == columns == GRID
MAX_TOKENS = 16  # N: every state is at most this many tokens, the final "." included
SCREEN_COLUMN = 2  # the screen stands in front of the center column, top to bottom
# The world's laws are the same seen in a mirror (walls, screen and lamp stand symmetric, and the caption orders
# objects by identity, not place): swapping these words turns a valid history into another one.
MIRROR: dict[str, str] = dict(zip(COLUMNS, reversed(COLUMNS)))

VOCAB: tuple[str, ...] = COLOURS + SHAPES + ROWS + COLUMNS + OTHER_WORDS + PUNCTUATION
_KIND = (
    {w: "colour" for w in COLOURS}
    | {w: "shape" for w in SHAPES}
    | {w: "row" for w in ROWS}
    | {w: "column" for w in COLUMNS}
    | {w: w for w in OTHER_WORDS + PUNCTUATION}
)


@dataclass(frozen=True, order=True)
class WorldObject:
    """One visible object at a grid cell. Ordering is the canonical caption order (identity first)."""

    colour: str
    shape: str
    row: int
    col: int

    def __post_init__(self) -> None:
        if self.colour not in COLOURS:
            raise ValueError(f"colour {self.colour!r} is not one of {COLOURS}")
        if self.shape not in SHAPES:
            raise ValueError(f"shape {self.shape!r} is not one of {SHAPES}")
        if not (0 <= self.row < GRID and 0 <= self.col < GRID):
            raise ValueError(f"cell ({self.row}, {self.col}) is outside the {GRID}x{GRID} grid")

    @property
    def identity(self) -> tuple[str, str]:
        return (self.colour, self.shape)

    @property
    def sort_key(self) -> tuple[int, int]:
        return (COLOURS.index(self.colour), SHAPES.index(self.shape))


@dataclass(frozen=True)
class Scene:
    """Everything a state says: the visible objects, whether a screen stands, and the lamp (None: no lamp)."""

    objects: tuple[WorldObject, ...] = field(default_factory=tuple)
    screen: bool = False
    lamp: bool | None = None

    def __post_init__(self) -> None:
        ids = [o.identity for o in self.objects]
        if len(set(ids)) != len(ids):
            raise ValueError(f"an object identity appears twice in {ids}")
        cells = [(o.row, o.col) for o in self.objects]
        if len(set(cells)) != len(cells):
            raise ValueError(f"two objects share a cell in {cells}")
        if self.screen and any(o.col == SCREEN_COLUMN for o in self.objects):
            raise ValueError("an object in the center column is hidden by the screen and cannot be visible")
        # Canonical order regardless of how the caller listed them.
        object.__setattr__(self, "objects", tuple(sorted(self.objects, key=lambda o: o.sort_key)))


def tokenize(text: str) -> list[str]:
    """Word-level tokens: words split on whitespace, ',' and '.' are tokens of their own."""
    return text.replace(",", " , ").replace(".", " . ").split()


def caption(scene: Scene) -> str:
    """The canonical sentence of a scene (at most MAX_TOKENS tokens)."""
    items = [f"{o.colour} {o.shape} {ROWS[o.row]} {COLUMNS[o.col]}" for o in scene.objects]
    if scene.screen:
        items.append("screen")
    if scene.lamp is not None:
        items.append("lamp on" if scene.lamp else "lamp off")
    text = (" , ".join(items) if items else "empty") + " ."
    n = len(tokenize(text))
    if n > MAX_TOKENS:
        raise ValueError(f"scene needs {n} tokens, more than the limit N = {MAX_TOKENS}: {text!r}")
    return text


def parse_state(text: str) -> Scene:
    """Parse a state sentence; raise ValueError naming the offending word when it is not a valid state."""
    if not isinstance(text, str):
        raise ValueError(f"a state must be a string, got {type(text).__name__}")
    tokens = tokenize(text)
    if not tokens:
        raise ValueError("empty state: expected a sentence ending with '.'")
    for tok in tokens:
        if tok not in _KIND:
            raise ValueError(f"unknown word {tok!r} in state {text!r}")
    if len(tokens) > MAX_TOKENS:
        raise ValueError(f"state has {len(tokens)} tokens, more than N = {MAX_TOKENS}: {text!r}")
    if tokens[-1] != ".":
        raise ValueError(f"state must end with '.', got {tokens[-1]!r} at the end of {text!r}")
    if "." in tokens[:-1]:
        raise ValueError(f"unexpected word '.' inside state {text!r}: one sentence ends with exactly one '.'")
    body = tokens[:-1]
    if body == ["empty"]:
        return Scene()
    items: list[list[str]] = [[]]
    ends: list[str] = []  # the token that closes each item: ',' or the final '.'
    for tok in body:
        if tok == ",":
            items.append([])
            ends.append(",")
        else:
            items[-1].append(tok)
    ends.append(".")
    objects: list[WorldObject] = []
    screen = False
    lamp: bool | None = None
    stage = 0  # 0: objects, 1: after screen, 2: after lamp; enforces the canonical order
    for words, end in zip(items, ends):
        if not words:
            raise ValueError(f"unexpected word ',' (an empty item) in state {text!r}")
        head = words[0]
        kinds = [_KIND[w] for w in words]
        if kinds == ["colour", "shape", "row", "column"]:
            if stage > 0:
                raise ValueError(
                    f"unexpected word {head!r}: objects come before the screen and lamp in {text!r}"
                )
            objects.append(WorldObject(words[0], words[1], ROWS.index(words[2]), COLUMNS.index(words[3])))
        elif words == ["screen"]:
            if stage > 0:
                raise ValueError(f"unexpected word 'screen': it comes once, before the lamp, in {text!r}")
            screen, stage = True, 1
        elif head == "lamp" and len(words) == 2 and words[1] in ("on", "off"):
            if stage > 1:
                raise ValueError(f"unexpected word 'lamp': it comes once, last, in {text!r}")
            lamp, stage = words[1] == "on", 2
        else:
            bad = _first_misplaced(words, end)
            raise ValueError(f"unexpected word {bad!r} in item {' '.join(words)!r} of state {text!r}")
    keys = [o.sort_key for o in objects]
    if keys != sorted(keys):
        raise ValueError(f"objects are not in canonical colour/shape order in {text!r}")
    try:
        return Scene(tuple(objects), screen=screen, lamp=lamp)
    except ValueError as err:
        raise ValueError(f"invalid state {text!r}: {err}") from None


def _first_misplaced(words: list[str], end: str) -> str:
    """The first token that breaks an item's pattern; `end` (',' or '.') when the item stops too early."""
    if words[0] in ("lamp", "screen"):
        return words[1] if len(words) > 1 else end
    expected = ["colour", "shape", "row", "column"]
    for i, w in enumerate(words):
        if i >= len(expected) or _KIND[w] != expected[i]:
            return w
    return end
