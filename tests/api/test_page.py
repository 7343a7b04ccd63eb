"""The web page's form reads as a sentence whatever the user left empty: each field's label with the field's
value, or its placeholder when it is empty (checked on the HTML here; in a browser by test_browser.py)."""

from __future__ import annotations

from html.parser import HTMLParser

from api.routes.pages import STATIC_DIR


class LabelReader(HTMLParser):
    """The text of every <label>, each <input> in it read as its value, or its placeholder when `empty`."""

    def __init__(self, empty: bool) -> None:
        super().__init__()
        self.empty, self.labels, self.inputs = empty, [], []
        self._text: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "label":
            self._text = []
        elif tag == "input" and self._text is not None and a.get("type") in ("number", "password"):
            shown = a.get("placeholder") if self.empty or not a.get("value") else a.get("value")
            self.inputs.append((a.get("id"), shown))
            self._text.append(f"[{shown or ''}]")

    def handle_data(self, data: str) -> None:
        if self._text is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "label" and self._text is not None:
            self.labels.append(" ".join("".join(self._text).split()))
            self._text = None


def read(empty: bool) -> LabelReader:
    reader = LabelReader(empty)
    reader.feed((STATIC_DIR / "index.html").read_text())
    return reader


def test_the_parameters_read_well_with_every_field_empty():
    reader = read(empty=True)
    assert all(shown for _, shown in reader.inputs), reader.inputs  # no field reads as a blank box
    params = [t for t in reader.labels if "[" in t]
    assert params == [
        "predict [8] states",
        "states per second [default]",
        "or frame stride [none]",
        "seed [0]",
        "denoising steps [default]",
        "API key [if required]",
    ]


def test_the_parameters_read_well_as_the_page_opens():
    params = [t for t in read(empty=False).labels if "[" in t]
    assert params[:3] == ["predict [8] states", "states per second [default]", "or frame stride [none]"]
