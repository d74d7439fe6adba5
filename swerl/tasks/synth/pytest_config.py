"""A repository's own pytest configuration, read the way pytest finds it, and made safe to run under.

Synthesis runs a repository's tests with the base image's pytest and nothing else, and
grades them by parsing ``-rA`` summary lines (swebench's ``parse_log_pytest``). A config's
``addopts`` often assumes more: plugins (``--cov``, ``-n auto``, ``--timeout``) whose
options pytest then refuses as unrecognized, so no test runs at all; ``--color=yes``,
which colours the summary words so no line parses; ``-x`` or ``--maxfail``, which stop a
no-patch run before its PASS_TO_PASS tests. Every run (probe and eval script) therefore
replaces ``addopts`` (``-o addopts=...``) with the options of it that change which tests
run or how they import, and drops the rest. ``required_plugins`` is cleared the same way.
"""

from __future__ import annotations

import configparser
import fnmatch
import shlex
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import tomllib

DEFAULT_PYTHON_FILES = ("test_*.py", "*_test.py")
CONFIG_FILES = ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")
"""In pytest's order of precedence within one directory."""

KEEP_WITH_VALUE = {
    "--import-mode", "-p", "-m", "-k", "--deselect", "--ignore", "--ignore-glob", "-W",
    "--pythonwarnings", "--rootdir", "--confcutdir", "--assert", "--capture", "-o", "--override-ini",
}  # fmt: skip
"""Options of ``addopts`` kept (they decide which tests run, how modules import, what warnings do),
each with its value."""
KEEP_FLAGS = {"--runxfail", "--strict-markers", "--strict", "--noconftest", "-s"}
BUILTIN_PLUGINS = {"pytester", "doctest", "legacypath", "tmpdir", "monkeypatch", "capture", "logging",
                   "warnings", "faulthandler", "unittest", "skipping", "python_path", "debugging"}  # fmt: skip
"""``-p NAME`` kept only for plugins pytest itself ships (``-p no:NAME`` is always kept)."""
DROPPED_OVERRIDES = ("addopts", "required_plugins")
"""``-o`` keys an addopts ``-o`` must not set again (they are what is being replaced)."""


@dataclass
class PytestConfig:
    """The config file pytest would use for a repository's tests, and the options every run adds."""

    path: str | None = None
    """The config file, relative to the repository root (None: pytest's defaults)."""
    ini: dict[str, str | list[str]] = field(default_factory=dict)
    kept: list[str] = field(default_factory=list)
    """The options of ``addopts`` every run keeps."""
    dropped: list[str] = field(default_factory=list)
    """The options of ``addopts`` left out (plugins the image lacks, output format, stopping early)."""

    @property
    def python_files(self) -> tuple[str, ...]:
        value = self.ini.get("python_files")
        globs = value if isinstance(value, list) else (value or "").split()
        return tuple(globs) or DEFAULT_PYTHON_FILES

    def args(self) -> list[str]:
        """Options for every pytest run of this repository (after its config, so they win)."""
        out = []
        if self.dropped:  # addopts that would break a run: the rest of it instead
            out += ["-o", "addopts=" + shlex.join(self.kept)]
        if "required_plugins" in self.ini:
            out += ["-o", "required_plugins="]
        return out

    def is_test(self, path: str) -> bool:
        base = path.rsplit("/", 1)[-1]
        return base.endswith(".py") and any(fnmatch.fnmatch(base, g) for g in self.python_files)


def find(root: Path, start: str = "") -> PytestConfig:
    """The config pytest would read for tests under ``root/start``: the first directory from
    ``start`` up to ``root`` holding one of :data:`CONFIG_FILES` that configures pytest."""
    rel = PurePosixPath(start)
    dirs = [rel, *rel.parents] if str(rel) not in ("", ".") else [PurePosixPath(".")]
    for d in dirs:
        for name in CONFIG_FILES:
            path = root / d / name
            if path.is_file():
                ini = _load(path)
                if ini is not None:
                    cfg = PytestConfig(str(PurePosixPath(d) / name) if str(d) != "." else name, ini)
                    cfg.kept, cfg.dropped = split_addopts(_args(ini.get("addopts", "")))
                    return cfg
    return PytestConfig()


def _args(value: str | list[str]) -> list[str]:
    return list(value) if isinstance(value, list) else shlex.split(value)


def _load(path: Path) -> dict[str, str | list[str]] | None:
    """The pytest section of ``path`` (None: the file does not configure pytest). A file pytest
    cannot read either is said as pytest would fail on it, not skipped."""
    from swerl.errors import ConfigError

    name = path.name
    try:
        if name == "pyproject.toml":
            table = tomllib.loads(path.read_text(encoding="utf-8")).get("tool", {}).get("pytest", {})
            opts = table.get("ini_options")
            if opts is None:
                return None
            return {k: v if isinstance(v, list) else str(v) for k, v in opts.items()}
        parser = configparser.ConfigParser(interpolation=None, strict=False)
        parser.optionxform = str  # type: ignore[assignment,method-assign]
        parser.read_string(path.read_text(encoding="utf-8"), source=str(path))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, configparser.Error) as e:
        raise ConfigError(f"{path}: pytest's config file cannot be read: {e}") from None
    section = {"setup.cfg": "tool:pytest"}.get(name, "pytest")
    if parser.has_section(section):
        return dict(parser.items(section))
    return {} if name in ("pytest.ini", ".pytest.ini") else None  # pytest.ini counts even when empty


def split_addopts(tokens: list[str]) -> tuple[list[str], list[str]]:
    """``(kept, dropped)``: the options of ``addopts`` a run keeps, and those it leaves out.

    An option not kept loses the value after it too (a token not starting with ``-``): an
    unknown plugin's option is assumed to take one, so its value is never read as a path.
    """
    kept: list[str] = []
    dropped: list[str] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        name, eq, value = tok.partition("=") if tok.startswith("--") else (tok, "", "")
        short = tok[:2] if tok.startswith("-") and not tok.startswith("--") and len(tok) > 2 else None
        if name in KEEP_FLAGS:
            kept.append(tok)
            i += 1
            continue
        if name in KEEP_WITH_VALUE or (short in KEEP_WITH_VALUE and short != "-o"):
            if eq or short:
                val = value if eq else tok[2:]
                opt = name if eq else short
                nxt = 1
            else:
                opt, val, nxt = name, tokens[i + 1] if i + 1 < len(tokens) else "", 2
            if _keep(opt, val):  # type: ignore[arg-type]
                kept += [f"{opt}={val}"] if opt.startswith("--") else [opt, val]  # type: ignore[operator]
            else:
                dropped.append(f"{opt} {val}".strip())
            i += nxt
            continue
        if not tok.startswith("-"):  # a stray path in addopts: explicit test files are given instead
            dropped.append(tok)
            i += 1
            continue
        # anything else: dropped with its value, if the next token is one
        if not eq and i + 1 < len(tokens) and not tokens[i + 1].startswith("-"):
            dropped.append(f"{tok} {tokens[i + 1]}")
            i += 2
        else:
            dropped.append(tok)
            i += 1
    return kept, dropped


def _keep(opt: str, value: str) -> bool:
    if opt == "-p":
        return value.startswith("no:") or value in BUILTIN_PLUGINS
    if opt in ("-o", "--override-ini"):
        return value.split("=", 1)[0].strip() not in DROPPED_OVERRIDES
    return True
