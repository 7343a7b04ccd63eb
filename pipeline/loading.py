"""What a weights folder names and where each stage is found: `model_index.json`'s stage entries (a folder, a
[library, class] pair of semworld's own adapters, or a plug-in's [module, factory]), its state rate, and the
checks of states written by hand that need no model. The pipeline (`WorldModelPipeline.from_pretrained`), the
CLI and batch all read a weights folder through these."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from pipeline.confidence import check_written_states
from pipeline.domain import domain_of_index
from pipeline.utils import MODEL_INDEX, STAGES, UserError, read_model_index, read_user_json, stage_folder

BUILTIN_LIBRARIES = ("transformers", "diffusers", "semworld")  # stage entries semworld's own adapters load


def _stage_folder(weights_dir: Path, index: dict[str, Any], stage: str) -> Path:
    folder = stage_folder(weights_dir, index, stage)
    if folder is None:
        raise UserError(
            f"{weights_dir / MODEL_INDEX}: no '{stage}' entry (expected keys: {', '.join(STAGES)})"
        )
    if not folder.is_dir():
        raise UserError(f"{folder}: missing folder for the {stage} named in {MODEL_INDEX}")
    return folder


def index_state_rate(index: dict[str, Any], where: str | Path = MODEL_INDEX) -> float | None:
    """The states per second the predictor was trained on, as `model_index.json` records it (`"state_rate"`),
    or None when the index does not say (then a clip is read frame by frame unless the caller says otherwise)."""
    rate = index.get("state_rate")
    if rate is None:
        return None
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not rate > 0:
        raise UserError(f"{where}: state_rate must be a positive number of states per second, got {rate!r}")
    return float(rate)


def stage_folders(
    weights_dir: str | Path,
    overrides: dict[str, str | Path | None] | None = None,
    stages: Collection[str] = STAGES,
) -> tuple[dict[str, Path], dict[str, Any]]:
    """Each stage's folder: the one `weights_dir/model_index.json` names, unless `overrides` gives that stage its
    own folder (then the index's entry for it is not needed). Only `stages` are looked up. Returns (folders by
    stage, the index)."""
    weights_dir = Path(weights_dir)
    index = read_model_index(weights_dir)
    overrides = overrides or {}
    unknown = sorted((set(overrides) | set(stages)) - set(STAGES))
    if unknown:
        raise ValueError(f"stages: unknown {unknown} (expected some of {', '.join(STAGES)})")
    folders: dict[str, Path] = {}
    for stage in (s for s in STAGES if s in stages):
        own = overrides.get(stage)
        if own is None and is_plugin_stage(index, stage):
            folder = (
                weights_dir / stage
            )  # a plug-in stage may keep its files in a folder of its own, or need none
            if folder.is_dir():
                folders[stage] = folder
        elif own is None:
            folders[stage] = _stage_folder(weights_dir, index, stage)
        elif not Path(own).is_dir():
            raise UserError(f"--{stage} {own}: no such directory")
        else:
            folders[stage] = Path(own)
    return folders, index


def is_plugin_stage(index: Mapping[str, Any], stage: str) -> bool:
    """Whether `index` names `stage` as a plug-in (`[module, factory]` of a module other than transformers,
    diffusers or semworld) rather than one of semworld's own; nothing is imported to say so."""
    entry = index.get(stage)
    if not (isinstance(entry, list) and len(entry) == 2 and all(isinstance(x, str) for x in entry)):
        return False
    return entry[0] not in BUILTIN_LIBRARIES


def plugin_stage(index: Mapping[str, Any], stage: str) -> Callable[..., Any] | None:
    """The factory of a plug-in stage (its module imported), or None for one of semworld's own (a folder name, or
    a [library, class] pair of transformers, diffusers or semworld).

    A plug-in is named in `model_index.json` as `"captioner": ["my_package.stages", "make_captioner"]`: an
    installed module and a callable in it, called as `factory(folder, device=..., dtype=..., domain=...)` (folder:
    `weights_dir/<stage>` when it exists, else None) that returns an object with the stage's methods
    (pipeline.interfaces). Only installed modules are imported, never code from the weights folder."""
    if not is_plugin_stage(index, stage):
        return None
    module, name = index[stage]
    try:
        factory = getattr(importlib.import_module(module), name, None)
    except ImportError as err:
        raise UserError(f"{MODEL_INDEX}: the {stage} is {module}.{name}, but {module} cannot be imported ({err})"
                        ) from None  # fmt: skip
    if not callable(factory):
        raise UserError(f"{MODEL_INDEX}: the {stage} is {module}.{name}, which is not a callable in {module}")
    return factory  # type: ignore[no-any-return]


def check_written_states_for(
    states: Sequence[str], folders: dict[str, Path], index: dict[str, Any], label: str = "states"
) -> None:
    """Check states a user wrote against the weights before any model is loaded: under the grammar of the domain
    the index names (when it has one), and against the predictor's vocabulary (tokenizer.json) and its token
    slots per state (config.json's N), unless the predictor is a plug-in stage. A UserError names the state and
    the word."""
    domain = domain_of_index(index)
    if is_plugin_stage(index, "predictor"):
        check_written_states(states, domain=domain, label=label)
        return
    from pipeline.tokenizer import StateTokenizer  # tokenizers only: no model

    folder = folders["predictor"]
    try:
        tokenizer = StateTokenizer.from_file(folder)
    except (FileNotFoundError, ValueError) as err:
        raise UserError(f"predictor weights {err}") from None
    vocabulary = set(tokenizer.backend.get_vocab())
    config = read_user_json(folder, "config.json", "a saved semworld predictor", "predictor weights")
    n = config.get("N") if isinstance(config, dict) else None
    width = (
        n - bool(tokenizer.actions) if isinstance(n, int) else None
    )  # a predictor with actions: one slot theirs
    check_written_states(states, domain=domain, vocabulary=vocabulary, max_tokens=width, label=label)


class NotLoaded:
    """Stands in for a stage `from_pretrained` did not load: one it was told not to (using it is a bug of the
    caller), or one the weights do not have (e.g. a game's predictor alone: using it is the caller's input)."""

    def __init__(self, stage: str, missing: bool = False) -> None:
        self.stage = stage
        self.missing = missing

    def _fail(self, *args: Any, **kwargs: Any) -> Any:
        if self.missing:
            what = {"captioner": "read a clip (start from states in words)", "renderer": "draw states (ask for "
                    "states only: render off)"}.get(self.stage, "forecast")  # fmt: skip
            raise UserError(f"these weights have no {self.stage}: they cannot {what}")
        raise RuntimeError(f"the {self.stage} stage was not loaded (from_pretrained(stages=...))")

    caption = predict = render = _fail

    @property
    def default_steps(self) -> int:  # the Renderer protocol's property: reading it is a use, too
        return self._fail()


def predictor_vocabulary(predictor: object) -> tuple[set[str] | None, int | None]:
    """The words a loaded predictor can read and its token slots per state, when it says (the shipped adapter
    carries a StateTokenizer and N); (None, None) for a stand-in that does not."""
    from pipeline.tokenizer import ACTION_PREFIX, PAD_TOKEN, UNK_TOKEN, StateTokenizer

    if isinstance(predictor, NotLoaded):
        return None, None
    tokenizer = getattr(predictor, "tokenizer", None)
    vocabulary = None
    if isinstance(tokenizer, StateTokenizer):
        vocabulary = set(tokenizer.backend.get_vocab()) - {PAD_TOKEN, UNK_TOKEN}
        vocabulary -= {ACTION_PREFIX + a for a in tokenizer.actions}  # never a word of a state
    n = getattr(predictor, "N", None)
    if not isinstance(n, int) or isinstance(n, bool):
        return vocabulary, None
    width = n - bool(getattr(predictor, "actions", ()))  # a predictor with actions: its last slot is theirs
    return vocabulary, width


def named_stages(weights_dir: Path, overrides: Mapping[str, object]) -> tuple[str, ...]:
    """The stages `weights_dir/model_index.json` names or the caller gives a folder of its own, and always the
    predictor: weights without one are not a world model (stage_folders then says its entry is missing)."""
    named = read_model_index(weights_dir)
    return tuple(s for s in STAGES if s in named or overrides.get(s) is not None or s == "predictor")
