from pipeline.timeline import changes, timeline


def test_changes_name_moves_appearances_and_the_lamp():
    a = "red ball top left , blue box bottom right , lamp on ."
    b = "red ball upper left , green triangle top right , screen , lamp off ."
    assert changes(a, b) == [
        "red ball moved from top left to upper left",
        "green triangle appeared at top right",
        "blue box vanished from bottom right",
        "screen appeared",
        "lamp switched off",
    ]
    assert changes(a, "Red ball top left, blue box bottom right, lamp on.") == []  # another spelling, same state
    assert changes("empty .", "lamp on .") == ["lamp appeared, on"]
    assert changes("a rabbit .", "a bird .") == ["changed (not a world state)"]
    assert timeline([a, a, b])[:2] == [[], []] and len(timeline([a, a, b])[2]) == 5
