"""The state grammar: vocabulary, token budget, canonical order, round trips and error messages."""

import itertools

import pytest

from world import (
    COLOURS,
    MAX_TOKENS,
    SCENARIOS,
    SHAPES,
    VOCAB,
    Scene,
    WorldConfig,
    WorldObject,
    caption,
    parse_state,
    sequences,
    tokenize,
)


def test_vocabulary_is_small_lowercase_words():
    words = [w for w in VOCAB if w not in (",", ".")]
    assert len(VOCAB) == len(set(VOCAB)) == 26
    assert all(w.isalpha() and w.islower() for w in words)


def test_tokenize_splits_punctuation():
    assert tokenize("red ball top left , lamp on .") == ["red", "ball", "top", "left", ",", "lamp", "on", "."]
    assert tokenize("red ball top left,lamp on.") == tokenize("red ball top left , lamp on .")


def test_most_crowded_scenes_fit_in_n_tokens():
    three = Scene(
        (
            WorldObject("red", "ball", 0, 0),
            WorldObject("green", "box", 1, 1),
            WorldObject("blue", "triangle", 4, 4),
        )
    )
    two_plus = Scene(
        (WorldObject("red", "ball", 0, 0), WorldObject("green", "box", 1, 1)), screen=True, lamp=True
    )
    for scene in (three, two_plus):
        text = caption(scene)
        assert len(tokenize(text)) <= MAX_TOKENS
        assert parse_state(text) == scene
    too_many = Scene(three.objects, lamp=False)
    with pytest.raises(ValueError, match="more than the limit N = 16"):
        caption(too_many)


def test_every_scenario_caption_fits_and_round_trips():
    for name in SCENARIOS:
        for rec in sequences(name, 40, seed=3):
            for state in rec["states"]:
                tokens = tokenize(state)
                assert len(tokens) <= MAX_TOKENS, state
                assert tokens[-1] == "." and tokens.count(".") == 1
                assert caption(parse_state(state)) == state


def test_every_preset_respects_the_token_budget():
    for s in SCENARIOS.values():
        assert s.config.max_tokens() <= MAX_TOKENS
    with pytest.raises(ValueError, match="17 tokens"):
        WorldConfig("bounce", 1, 3, screen=True)


def test_canonical_order_makes_equal_scenes_equal_strings():
    a = WorldObject("blue", "box", 2, 3)
    b = WorldObject("red", "diamond", 4, 0)
    assert caption(Scene((a, b), lamp=False)) == caption(Scene((b, a), lamp=False))
    assert caption(Scene((a, b))) == "red diamond bottom left , blue box middle midright ."


def test_round_trip_over_all_identities_and_cells():
    for (colour, shape), row, col in itertools.product(
        itertools.product(COLOURS, SHAPES), range(5), range(5)
    ):
        scene = Scene((WorldObject(colour, shape, row, col),), lamp=bool(row % 2) if col else None)
        assert parse_state(caption(scene)) == scene
    assert parse_state("empty .") == Scene()
    assert caption(Scene(screen=True)) == "screen ."


@pytest.mark.parametrize(
    ("text", "word"),
    [
        ("red bal top left .", "'bal'"),
        ("Red ball top left .", "'Red'"),
        ("red ball top left", "'left'"),
        ("red ball top left ! .", "'!'"),
        ("red ball . blue box top right .", "'.'"),
        ("red ball left top .", "'left'"),
        ("red ball top .", "'.'"),
        ("lamp on , red ball top left .", "'red'"),
        ("lamp red .", "'red'"),
        ("red ball top left , , lamp on .", "','"),
    ],
)
def test_invalid_states_name_the_offending_word(text, word):
    with pytest.raises(ValueError) as exc:
        parse_state(text)
    assert word in str(exc.value)


def test_invalid_scenes_are_rejected():
    with pytest.raises(ValueError, match="share a cell"):
        parse_state("red ball top left , blue box top left .")
    with pytest.raises(ValueError, match="canonical"):
        parse_state("blue box top left , red ball top right .")
    with pytest.raises(ValueError, match="hidden by the screen"):
        parse_state("red ball top center , screen .")
    with pytest.raises(ValueError, match="twice"):
        parse_state("red ball top left , red ball top right .")
    with pytest.raises(ValueError, match="empty state"):
        parse_state("  ")
