"""The trace reader's depth scan (``trace/jsontext._scan``, Note [The depth scan is vectorised])
against the obvious character-by-character reading of JSON's strings and brackets, on texts made
of strings with escapes, brackets and commas, cut anywhere, and scanned in chunks of a few bytes
so that chunk ends fall inside strings and runs of backslashes."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddpsim.trace import jsontext
from ddpsim.trace.jsontext import loads_limited
from ddpsim.trace.types import TraceFormatError


def reference(text: str) -> tuple[int, bool]:
    """(deepest nesting, ends inside a string or a bracket), one character at a time."""
    depth = deepest = 0
    inside = escaped = False
    for c in text:
        if inside:
            inside, escaped = (escaped or c != '"'), (not escaped and c == "\\")
        elif c == '"':
            inside = True
        elif c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth -= 1
    return deepest, inside or depth > 0


_STRING = st.lists(st.sampled_from(['\\"', "\\\\", "a", "[", "}", "é", "\\n"]), max_size=6).map(
    lambda parts: '"' + "".join(parts) + '"')
_TEXT = st.lists(st.one_of(_STRING, st.sampled_from(list("[]{},: 1"))), max_size=40).map("".join)


@settings(max_examples=400, deadline=None)
@given(_TEXT, st.integers(0, 200), st.sampled_from([1, 2, 3, 7, 1 << 22]))
def test_the_scan_reads_strings_and_brackets_as_a_character_loop_does(text, cut, chunk):
    text = text[:cut]
    old, jsontext._SCAN_CHUNK = jsontext._SCAN_CHUNK, chunk
    try:
        assert jsontext._scan(text) == reference(text)
    finally:
        jsontext._SCAN_CHUNK = old


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet='[]{}"\\a,: 1', max_size=3000))
def test_any_text_is_parsed_or_one_trace_format_error(text):
    """Backslashes outside strings too (not JSON): never a RecursionError or another exception."""
    try:
        loads_limited(text, "t.json")
    except TraceFormatError as e:
        assert "\n" not in str(e)


@pytest.mark.parametrize("text, verdict", [
    ("[" * 65 + "]" * 65, "nests JSON 65 levels deep"),
    ('["' + "[" * 100 + '"]', None),  # brackets inside a string do not nest
    ('\\"' + "[" * 3000, "nests JSON 3000 levels deep"),  # a stray backslash (not JSON) reads as an escape
    ('\\"' + "[" * 30, "not valid JSON"),
    ('{"a": "b\\\\", "c": ' + "[" * 70 + "]" * 70 + "}", "nests JSON 71 levels"),  # \\ is one backslash: the quote ends
])
def test_nesting_verdicts(text, verdict):
    if verdict is None:
        assert loads_limited(text, "t.json") == ["[" * 100]
    else:
        with pytest.raises(TraceFormatError, match=verdict):
            loads_limited(text, "t.json")
