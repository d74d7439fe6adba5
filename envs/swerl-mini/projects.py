"""Source of the three small projects behind swerl-mini: commits as file snapshots.

Each project is a list of commits ``(message, {path: content})``; a later commit
overrides files of earlier ones. Bugs live in the code on purpose; the tasks in
``tasks.py`` describe and fix them.
"""

TEXTKIT_INIT = '''"""Small text utilities."""

from textkit.slug import slugify
from textkit.wrap import truncate, wrap

__all__ = ["slugify", "truncate", "wrap"]
'''

TEXTKIT_SLUG = '''"""URL slugs."""

import re
import unicodedata


def slugify(text, sep="-"):
    """Lowercase ASCII words of ``text`` joined by ``sep``."""
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    text = re.sub(r"[^a-z0-9]", sep, text.lower())
    return text.strip(sep)
'''

TEXTKIT_WRAP = '''"""Wrapping and truncation of plain text."""


def wrap(text, width=70):
    """Greedy word wrap: lines of at most ``width`` characters (long words stay whole)."""
    lines, line = [], ""
    for word in text.split():
        if not line:
            line = word
        elif len(line) + len(word) <= width:
            line += " " + word
        else:
            lines.append(line)
            line = word
    if line:
        lines.append(line)
    return lines


def truncate(text, length, suffix="..."):
    """``text`` cut to at most ``length`` characters, ending in ``suffix`` when cut."""
    if len(text) <= length:
        return text
    return text[:length] + suffix
'''

TEXTKIT_CASE = '''"""Title case with English small words."""

SMALL_WORDS = {"a", "an", "and", "as", "at", "but", "by", "for", "in", "of", "on", "or", "the", "to"}


def title_case(text):
    """Capitalize each word except small words, which stay lowercase unless first."""
    words = text.lower().split()
    out = []
    for word in words:
        out.append(word if word in SMALL_WORDS else word.capitalize())
    return " ".join(out)
'''

TEXTKIT_TEST_SLUG = """from textkit import slugify


def test_simple():
    assert slugify("Hello World") == "hello-world"


def test_accents():
    assert slugify("Crème brûlée") == "creme-brulee"


def test_custom_separator():
    assert slugify("a b", sep="_") == "a_b"


def test_strips_edges():
    assert slugify("  hi  ") == "hi"
"""

TEXTKIT_TEST_WRAP = """from textkit import truncate, wrap


def test_wrap_short():
    assert wrap("one two", 20) == ["one two"]


def test_wrap_long_word():
    assert wrap("abcdefghij xy", 5) == ["abcdefghij", "xy"]


def test_wrap_empty():
    assert wrap("", 10) == []


def test_truncate_short_text_unchanged():
    assert truncate("short", 10) == "short"
"""

TEXTKIT_TEST_CASE = """from textkit.case import title_case


def test_basic():
    assert title_case("war and peace") == "War and Peace"


def test_mixed_input():
    assert title_case("hELLO wORLD") == "Hello World"
"""

INTERVALS_INIT = '''"""Closed integer intervals and sets of them."""

from intervals.core import Interval
from intervals.ops import merge, total_length
from intervals.parse import format_ranges, parse_ranges

__all__ = ["Interval", "format_ranges", "merge", "parse_ranges", "total_length"]
'''

INTERVALS_CORE = '''"""The closed interval [lo, hi] of integers."""

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Interval:
    lo: int
    hi: int

    def contains(self, x):
        """Whether ``x`` lies in the interval (both ends included)."""
        return self.lo <= x < self.hi

    def overlaps(self, other):
        return self.lo <= other.hi and other.lo <= self.hi

    def __len__(self):
        return self.hi - self.lo + 1
'''

INTERVALS_OPS = '''"""Operations on collections of intervals."""

from intervals.core import Interval


def merge(intervals):
    """Sorted, disjoint intervals covering the same integers as ``intervals``."""
    out = []
    for iv in sorted(intervals):
        if out and iv.lo < out[-1].hi:
            out[-1] = Interval(out[-1].lo, max(out[-1].hi, iv.hi))
        else:
            out.append(iv)
    return out


def total_length(intervals):
    """How many integers the intervals cover together."""
    return sum(len(iv) for iv in merge(intervals))
'''

INTERVALS_PARSE = '''"""Text form of interval lists: ``"1-3,5,7-9"``."""

from intervals.core import Interval


def parse_ranges(text):
    """Parse ``"1-3,5"`` into intervals; a bare number is a one-point interval."""
    out = []
    for piece in text.split(","):
        if not piece:
            continue
        if "-" in piece:
            lo, hi = piece.split("-")
            out.append(Interval(int(lo), int(hi)))
        else:
            out.append(Interval(int(piece), int(piece)))
    return out


def format_ranges(intervals):
    return ",".join(str(iv.lo) if iv.lo == iv.hi else f"{iv.lo}-{iv.hi}" for iv in intervals)
'''

INTERVALS_TEST_CORE = """from intervals import Interval


def test_overlaps():
    assert Interval(1, 3).overlaps(Interval(3, 4))
    assert not Interval(1, 2).overlaps(Interval(3, 4))


def test_len():
    assert len(Interval(2, 2)) == 1
    assert len(Interval(1, 10)) == 10


def test_contains_inside():
    assert Interval(1, 5).contains(3)
    assert not Interval(1, 5).contains(0)
"""

INTERVALS_TEST_OPS = """from intervals import Interval, merge, total_length


def test_merge_overlapping():
    assert merge([Interval(1, 4), Interval(2, 6)]) == [Interval(1, 6)]


def test_merge_keeps_gaps():
    assert merge([Interval(1, 2), Interval(4, 5)]) == [Interval(1, 2), Interval(4, 5)]


def test_merge_adjacent_integers_stay_apart():
    assert merge([Interval(1, 2), Interval(3, 4)]) == [Interval(1, 2), Interval(3, 4)]


def test_total_length():
    assert total_length([Interval(1, 3), Interval(10, 10)]) == 4
"""

INTERVALS_TEST_PARSE = """from intervals import Interval, format_ranges, parse_ranges


def test_parse():
    assert parse_ranges("1-3,5") == [Interval(1, 3), Interval(5, 5)]


def test_format_roundtrip():
    text = "1-3,5,7-9"
    assert format_ranges(parse_ranges(text)) == text


def test_empty():
    assert parse_ranges("") == []
"""

TINYCONF_INIT = '''"""A tiny INI-style configuration reader."""

from tinyconf.parser import parse
from tinyconf.values import coerce, coerce_bool, coerce_list

__all__ = ["coerce", "coerce_bool", "coerce_list", "parse"]
'''

TINYCONF_PARSER = '''"""``[section]`` headers, ``key = value`` lines, ``#`` comments."""

from tinyconf.values import coerce


class ParseError(ValueError):
    pass


def parse(text, typed=False):
    """Sections of ``text`` as ``{section: {key: value}}``; keys before any header go in ``""``."""
    data = {"": {}}
    section = ""
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
            data.setdefault(section, {})
            continue
        if "=" not in line:
            raise ParseError(f"line {lineno}: expected key = value, got {raw!r}")
        key, value = line.split("=")[:2]
        value = value.strip()
        data[section][key.strip()] = coerce(value) if typed else value
    return data
'''

TINYCONF_VALUES = '''"""Turning config strings into Python values."""

TRUE = ("true", "yes", "on", "1")
FALSE = ("false", "no", "off", "0")


def coerce_bool(value):
    if value in TRUE:
        return True
    if value in FALSE:
        return False
    raise ValueError(f"not a boolean: {value!r}")


def coerce_list(value):
    """Comma-separated items, stripped."""
    return [item.strip() for item in value.split(",")]


def coerce(value):
    """int, then bool, then list (if it has a comma), else the string itself."""
    try:
        return int(value)
    except ValueError:
        pass
    try:
        return coerce_bool(value)
    except ValueError:
        pass
    if "," in value:
        return coerce_list(value)
    return value
'''

TINYCONF_TEST_PARSER = '''from tinyconf import parse

TEXT = """
# global
name = demo

[server]
port = 8080
"""


def test_sections():
    data = parse(TEXT)
    assert data[""] == {"name": "demo"}
    assert data["server"] == {"port": "8080"}


def test_typed():
    assert parse(TEXT, typed=True)["server"]["port"] == 8080


def test_bad_line():
    import pytest

    from tinyconf.parser import ParseError

    with pytest.raises(ParseError):
        parse("[a]\\nnonsense")
'''

TINYCONF_TEST_VALUES = """from tinyconf import coerce, coerce_bool, coerce_list


def test_bool_lowercase():
    assert coerce_bool("yes") is True
    assert coerce_bool("off") is False


def test_list():
    assert coerce_list("a, b ,c") == ["a", "b", "c"]


def test_coerce_int():
    assert coerce("42") == 42
"""

GITIGNORE = "__pycache__/\n*.pyc\n.pytest_cache/\n"

PROJECTS = {
    "swerl/textkit": [
        (
            "Initial import of textkit: slugs, wrap, truncate",
            {
                ".gitignore": GITIGNORE,
                "README.md": "# textkit\n\nSmall text utilities (stdlib only).\n",
                "textkit/__init__.py": TEXTKIT_INIT,
                "textkit/slug.py": TEXTKIT_SLUG,
                "textkit/wrap.py": TEXTKIT_WRAP,
                "tests/test_slug.py": TEXTKIT_TEST_SLUG,
                "tests/test_wrap.py": TEXTKIT_TEST_WRAP,
            },
        ),
        ("Add title_case", {"textkit/case.py": TEXTKIT_CASE, "tests/test_case.py": TEXTKIT_TEST_CASE}),
        (
            "Document the modules in the README",
            {"README.md": "# textkit\n\nSmall text utilities (stdlib only): `slug`, `wrap`, `case`.\n"},
        ),
    ],
    "swerl/intervals": [
        (
            "Initial import: Interval and merge",
            {
                ".gitignore": GITIGNORE,
                "README.md": "# intervals\n\nClosed integer intervals.\n",
                "intervals/__init__.py": INTERVALS_INIT.replace(
                    "from intervals.parse import format_ranges, parse_ranges\n", ""
                )
                .replace('"format_ranges", ', "")
                .replace('"parse_ranges", ', ""),
                "intervals/core.py": INTERVALS_CORE,
                "intervals/ops.py": INTERVALS_OPS,
                "tests/test_core.py": INTERVALS_TEST_CORE,
                "tests/test_ops.py": INTERVALS_TEST_OPS,
            },
        ),
        (
            "Add parse_ranges and format_ranges",
            {
                "intervals/__init__.py": INTERVALS_INIT,
                "intervals/parse.py": INTERVALS_PARSE,
                "tests/test_parse.py": INTERVALS_TEST_PARSE,
            },
        ),
        (
            "README: mention the text form",
            {"README.md": "# intervals\n\nClosed integer intervals; text form `1-3,5`.\n"},
        ),
    ],
    "swerl/tinyconf": [
        (
            "Initial import of tinyconf",
            {
                ".gitignore": GITIGNORE,
                "README.md": "# tinyconf\n\nA tiny INI-style config reader.\n",
                "tinyconf/__init__.py": TINYCONF_INIT,
                "tinyconf/parser.py": TINYCONF_PARSER,
                "tinyconf/values.py": TINYCONF_VALUES.replace('"on", ', "").replace('"off", ', ""),
                "tests/test_parser.py": TINYCONF_TEST_PARSER,
                "tests/test_values.py": TINYCONF_TEST_VALUES.replace(
                    'coerce_bool("off")', 'coerce_bool("no")'
                ),
            },
        ),
        (
            "Accept on/off as booleans",
            {"tinyconf/values.py": TINYCONF_VALUES, "tests/test_values.py": TINYCONF_TEST_VALUES},
        ),
        (
            "Explain typed parsing in the README",
            {"README.md": "# tinyconf\n\n`parse(text, typed=True)` coerces values.\n"},
        ),
    ],
}
