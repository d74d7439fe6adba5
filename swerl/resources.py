"""Where swerl's bundled configs and task suites are, in a checkout and in an installed wheel.

In a checkout (or an editable install) they are the top-level ``configs/`` and ``envs/``
beside the package. A built wheel has no such directories: ``setup.py`` copies them into
the package as ``swerl/_data/configs`` and ``swerl/_data/envs``, read here through
``importlib.resources``. Everything that looks for a bundled config or suite asks this module.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from swerl.errors import ConfigError

PACKAGE_DATA = "_data"
"""The package-data directory a wheel carries (``swerl/_data``), built by ``setup.py``."""
CONFIGS, SUITES = "configs", "envs"


def checkout_root() -> Path | None:
    """The source checkout swerl is imported from, or None for an installed wheel.

    A checkout has ``pyproject.toml`` and ``configs/`` beside the package; site-packages never does.
    """
    root = Path(__file__).resolve().parent.parent
    return root if (root / "pyproject.toml").is_file() and (root / CONFIGS).is_dir() else None


def data_dir(kind: str) -> Path:
    """The bundled ``configs`` or ``envs`` directory: the checkout's, else the wheel's package data."""
    root = checkout_root()
    if root is not None:
        return root / kind
    data = files("swerl") / PACKAGE_DATA / kind
    if not isinstance(data, Path):  # a zipped install; pip always unpacks wheels
        raise ConfigError(
            f"swerl's bundled {kind} are not on the file system ({data}): install swerl unzipped"
        )
    return data


def configs_dir() -> Path:
    """The bundled configs (``default``, ``large``, ...)."""
    return data_dir(CONFIGS)


def suites_dir() -> Path:
    """The directory of bundled task suites (``swerl-mini``), one subdirectory each."""
    return data_dir(SUITES)


def config_dirs(cwd: Path | None = None) -> list[Path]:
    """Where a bare config name is looked for, in order: ``./configs``, then the bundled ones.

    So a second checkout's ``configs/default.yaml`` wins over the installed swerl's, and an
    installed wheel still finds ``default`` anywhere.
    """
    return list(dict.fromkeys([(cwd or Path.cwd()) / CONFIGS, configs_dir()]))


def config_candidates(name: str | Path, cwd: Path | None = None) -> list[Path]:
    """The files ``name`` may mean, in order: the path as given, then ``NAME[.yaml]`` in ``config_dirs``.

    An absolute path means only that path; a relative one with a directory in it
    (``clusters/kuberay``) is also looked for under each of ``config_dirs``.
    """
    p = Path(name)
    if p.is_absolute():
        return [p]
    names = (
        [p]
        if p.suffix in (".yaml", ".yml")
        else [p.with_name(f"{p.name}.yaml"), p.with_name(f"{p.name}.yml")]
    )
    return list(dict.fromkeys([p, *(d / n for d in config_dirs(cwd) for n in names)]))


def find_config(name: str | Path, cwd: Path | None = None) -> Path:
    """The config file ``name`` means (see ``config_candidates``), or a ConfigError saying where it looked."""
    candidates = config_candidates(name, cwd)
    for c in candidates:
        if c.is_file():
            return c
    if len(candidates) == 1:
        raise ConfigError(f"config file {name} does not exist")
    dirs = config_dirs(cwd)
    known = sorted({f.stem for d in dirs for f in d.glob("*.y*ml")})
    raise ConfigError(
        f"config {name} does not exist: not a file, nor in {' or '.join(map(str, dirs))} "
        f"(known names: {', '.join(known) or 'none'})"
    )
