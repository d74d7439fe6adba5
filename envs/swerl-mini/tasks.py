"""The swerl-mini tasks: an issue, the gold fix and the new tests, as exact edits.

Each edit is ``(path, old, new)`` applied to the repo at the base commit; the
generator turns them into ``patch`` / ``test_patch`` with ``git diff``. ``wrong``
is a plausible but wrong fix kept for tests and the toy trainer.
"""

TASKS = [
    # ------------------------------------------------------------ textkit
    {
        "repo": "swerl/textkit",
        "base": 1,  # before the README commit: exercises history stripping
        "problem_statement": (
            "slugify leaves runs of separators\n\n"
            "`slugify(\"Hello,  World!\")` returns `'hello---world'`. I expected `'hello-world'`: "
            "punctuation and whitespace between words should become a single separator."
        ),
        "gold": [("textkit/slug.py", 'r"[^a-z0-9]"', 'r"[^a-z0-9]+"')],
        "tests": [
            (
                "tests/test_slug.py",
                'def test_strips_edges():\n    assert slugify("  hi  ") == "hi"\n',
                'def test_strips_edges():\n    assert slugify("  hi  ") == "hi"\n\n\n'
                'def test_collapses_runs():\n    assert slugify("Hello,  World!") == "hello-world"\n'
                '    assert slugify("a -- b", sep="_") == "a_b"\n',
            )
        ],
    },
    {
        "repo": "swerl/textkit",
        "problem_statement": (
            "truncate() returns strings longer than the requested length\n\n"
            '`truncate("hello world", 8)` gives `"hello wo..."` (11 characters). The docstring '
            "says the result has at most `length` characters, suffix included."
        ),
        "gold": [
            (
                "textkit/wrap.py",
                "    return text[:length] + suffix\n",
                "    return text[: max(length - len(suffix), 0)] + suffix\n",
            )
        ],
        "tests": [
            (
                "tests/test_wrap.py",
                'def test_truncate_short_text_unchanged():\n    assert truncate("short", 10) == "short"\n',
                'def test_truncate_short_text_unchanged():\n    assert truncate("short", 10) == "short"\n\n\n'
                'def test_truncate_counts_suffix():\n    assert truncate("hello world", 8) == "hello..."\n'
                '    assert truncate("hello world", 6, suffix="~") == "hello~"\n',
            )
        ],
    },
    {
        "repo": "swerl/textkit",
        "problem_statement": (
            "title_case lowercases a small word at the start\n\n"
            '`title_case("the lord of the rings")` returns `"the Lord of the Rings"`; '
            'the first word should always be capitalized: `"The Lord of the Rings"`.'
        ),
        "gold": [
            (
                "textkit/case.py",
                "    for word in words:\n        out.append(word if word in SMALL_WORDS else word.capitalize())\n",
                "    for i, word in enumerate(words):\n"
                "        out.append(word if i and word in SMALL_WORDS else word.capitalize())\n",
            )
        ],
        "tests": [
            (
                "tests/test_case.py",
                'def test_mixed_input():\n    assert title_case("hELLO wORLD") == "Hello World"\n',
                'def test_mixed_input():\n    assert title_case("hELLO wORLD") == "Hello World"\n\n\n'
                'def test_first_small_word():\n    assert title_case("the lord of the rings") == "The Lord of the Rings"\n',
            )
        ],
    },
    {
        "repo": "swerl/textkit",
        "problem_statement": (
            "wrap() produces lines one character too long\n\n"
            '`wrap("aaa bbb ccc", 6)` returns `["aaa bbb", "ccc"]`, but `"aaa bbb"` has 7 characters. '
            "The space between words does not seem to be counted."
        ),
        "gold": [("textkit/wrap.py", "len(line) + len(word) <= width", "len(line) + 1 + len(word) <= width")],
        "tests": [
            (
                "tests/test_wrap.py",
                'def test_wrap_empty():\n    assert wrap("", 10) == []\n',
                'def test_wrap_empty():\n    assert wrap("", 10) == []\n\n\n'
                'def test_wrap_counts_spaces():\n    assert wrap("aaa bbb ccc", 6) == ["aaa", "bbb", "ccc"]\n'
                '    assert all(len(line) <= 7 for line in wrap("aaa bbb ccc ddd", 7))\n',
            )
        ],
    },
    # ----------------------------------------------------------- intervals
    {
        "repo": "swerl/intervals",
        "problem_statement": (
            "merge() does not merge intervals that share an endpoint\n\n"
            "`merge([Interval(1, 3), Interval(3, 5)])` returns both intervals unchanged, although they "
            "overlap at 3 (intervals are closed). As a consequence `total_length` counts 3 twice."
        ),
        "gold": [("intervals/ops.py", "iv.lo < out[-1].hi", "iv.lo <= out[-1].hi")],
        "wrong": {
            "note": "also merges intervals that are merely adjacent (1-2 and 3-4): "
            "the new test passes but test_merge_adjacent_integers_stay_apart breaks",
            "edits": [("intervals/ops.py", "iv.lo < out[-1].hi", "iv.lo <= out[-1].hi + 1")],
        },
        "tests": [
            (
                "tests/test_ops.py",
                "def test_total_length():\n",
                "def test_merge_shared_endpoint():\n"
                "    assert merge([Interval(1, 3), Interval(3, 5)]) == [Interval(1, 5)]\n"
                "    assert total_length([Interval(1, 3), Interval(3, 5)]) == 5\n\n\n"
                "def test_total_length():\n",
            )
        ],
    },
    {
        "repo": "swerl/intervals",
        "problem_statement": (
            "parse_ranges cannot read negative numbers\n\n"
            '`parse_ranges("-3--1,2")` raises `ValueError: too many values to unpack`. '
            '`format_ranges` happily writes `"-3--1"`, so the text form does not round-trip.'
        ),
        "gold": [
            (
                "intervals/parse.py",
                '"""Text form of interval lists: ``"1-3,5,7-9"``."""\n\n',
                '"""Text form of interval lists: ``"1-3,5,7-9"``."""\n\nimport re\n\n',
            ),
            (
                "intervals/parse.py",
                "from intervals.core import Interval\n",
                'from intervals.core import Interval\n\nRANGE = re.compile(r"\\s*(-?\\d+)\\s*(?:-\\s*(-?\\d+)\\s*)?$")\n',
            ),
            (
                "intervals/parse.py",
                '        if "-" in piece:\n            lo, hi = piece.split("-")\n'
                "            out.append(Interval(int(lo), int(hi)))\n        else:\n"
                "            out.append(Interval(int(piece), int(piece)))\n",
                "        m = RANGE.match(piece)\n        if not m:\n"
                '            raise ValueError(f"bad range: {piece!r}")\n'
                "        lo = int(m.group(1))\n"
                "        out.append(Interval(lo, int(m.group(2)) if m.group(2) is not None else lo))\n",
            ),
        ],
        "tests": [
            (
                "tests/test_parse.py",
                'def test_empty():\n    assert parse_ranges("") == []\n',
                'def test_empty():\n    assert parse_ranges("") == []\n\n\n'
                "def test_negative():\n"
                '    assert parse_ranges("-3--1,2") == [Interval(-3, -1), Interval(2, 2)]\n'
                '    assert format_ranges(parse_ranges("-3--1,-7")) == "-3--1,-7"\n',
            )
        ],
    },
    {
        "repo": "swerl/intervals",
        "problem_statement": (
            "Interval.contains excludes the upper bound\n\n"
            "`Interval(1, 5).contains(5)` is False, but intervals are documented as closed and "
            "`len(Interval(1, 5))` is 5."
        ),
        "gold": [("intervals/core.py", "self.lo <= x < self.hi", "self.lo <= x <= self.hi")],
        "tests": [
            (
                "tests/test_core.py",
                "    assert not Interval(1, 5).contains(0)\n",
                "    assert not Interval(1, 5).contains(0)\n\n\n"
                "def test_contains_bounds():\n    assert Interval(1, 5).contains(5)\n"
                "    assert Interval(1, 5).contains(1)\n    assert not Interval(1, 5).contains(6)\n",
            )
        ],
    },
    {
        "repo": "swerl/intervals",
        "problem_statement": (
            "Reversed intervals are accepted silently\n\n"
            '`parse_ranges("5-1")` returns `[Interval(5, 1)]`, which has a negative length and '
            "confuses `merge`. `Interval(lo, hi)` with `lo > hi` should raise ValueError, and "
            "`parse_ranges` should raise a ValueError that names the offending piece (e.g. `'5-1'`)."
        ),
        "gold": [
            (
                "intervals/core.py",
                "    hi: int\n\n",
                "    hi: int\n\n    def __post_init__(self):\n        if self.lo > self.hi:\n"
                '            raise ValueError(f"empty interval: lo={self.lo} > hi={self.hi}")\n\n',
            ),
            (
                "intervals/parse.py",
                "            out.append(Interval(int(lo), int(hi)))\n",
                "            try:\n                out.append(Interval(int(lo), int(hi)))\n"
                "            except ValueError as e:\n"
                '                raise ValueError(f"bad range {piece!r}: {e}") from None\n',
            ),
        ],
        "tests": [
            (
                "tests/test_core.py",
                "def test_len():\n",
                "def test_reversed_raises():\n    import pytest\n\n    with pytest.raises(ValueError):\n"
                "        Interval(5, 1)\n\n\ndef test_len():\n",
            ),
            (
                "tests/test_parse.py",
                'def test_empty():\n    assert parse_ranges("") == []\n',
                'def test_empty():\n    assert parse_ranges("") == []\n\n\n'
                "def test_reversed_names_piece():\n    import pytest\n\n"
                '    with pytest.raises(ValueError, match="5-1"):\n        parse_ranges("1-2,5-1")\n',
            ),
        ],
    },
    # ------------------------------------------------------------ tinyconf
    {
        "repo": "swerl/tinyconf",
        "problem_statement": (
            "Comments starting with ';' are rejected\n\n"
            'Many INI files use `;` for comments, but `parse("; note\\n[a]\\nx = 1")` raises '
            "`ParseError: line 1: expected key = value`. Both `#` and `;` should start a comment."
        ),
        "gold": [("tinyconf/parser.py", 'line.startswith("#")', 'line.startswith(("#", ";"))')],
        "tests": [
            (
                "tests/test_parser.py",
                "def test_typed():\n",
                'def test_semicolon_comment():\n    assert parse("; note\\n[a]\\nx = 1")["a"] == {"x": "1"}\n\n\n'
                "def test_typed():\n",
            )
        ],
    },
    {
        "repo": "swerl/tinyconf",
        "problem_statement": (
            "Booleans are case-sensitive\n\n"
            '`coerce_bool("False")` raises `ValueError: not a boolean`, and so `parse(..., typed=True)` '
            'leaves `enabled = True` as the string "True". Booleans should be case-insensitive.'
        ),
        "gold": [
            (
                "tinyconf/values.py",
                "def coerce_bool(value):\n",
                "def coerce_bool(value):\n    value = value.strip().lower()\n",
            )
        ],
        "wrong": {
            "note": "special-cases the two spellings in the issue; the new test also tries YES",
            "edits": [("tinyconf/values.py", 'FALSE = ("false",', 'FALSE = ("False", "false",')],
        },
        "tests": [
            (
                "tests/test_values.py",
                "def test_list():\n",
                'def test_bool_any_case():\n    assert coerce_bool("False") is False\n'
                '    assert coerce_bool("YES") is True\n\n\ndef test_list():\n',
            )
        ],
    },
    {
        "repo": "swerl/tinyconf",
        "problem_statement": (
            "Values containing '=' are cut off\n\n"
            "`url = http://example.com/?a=b` is read as `http://example.com/?a`. Only the first `=` "
            "should separate the key from the value."
        ),
        "gold": [("tinyconf/parser.py", 'line.split("=")[:2]', 'line.split("=", 1)')],
        "wrong": {
            "note": "takes the text after the last '=' instead of the first",
            "edits": [
                (
                    "tinyconf/parser.py",
                    'key, value = line.split("=")[:2]',
                    'key, value = line.split("=")[0], line.split("=")[-1]',
                )
            ],
        },
        "tests": [
            (
                "tests/test_parser.py",
                "def test_typed():\n",
                "def test_value_with_equals():\n"
                '    assert parse("url = http://x/?a=b")[""]["url"] == "http://x/?a=b"\n\n\n'
                "def test_typed():\n",
            )
        ],
    },
    {
        "repo": "swerl/tinyconf",
        "problem_statement": (
            "coerce_list keeps empty items\n\n"
            '`coerce_list("a, b,")` returns `["a", "b", ""]`. A trailing comma (or `a,,b`) '
            "should not produce empty strings."
        ),
        "gold": [
            (
                "tinyconf/values.py",
                'return [item.strip() for item in value.split(",")]',
                'return [item.strip() for item in value.split(",") if item.strip()]',
            )
        ],
        "tests": [
            (
                "tests/test_values.py",
                "def test_coerce_int():\n",
                'def test_list_skips_empty():\n    assert coerce_list("a, b,") == ["a", "b"]\n'
                '    assert coerce_list("a,,b") == ["a", "b"]\n\n\ndef test_coerce_int():\n',
            )
        ],
    },
]
