"""A built wheel, installed non-editable outside the checkout, carries and finds its configs and suite.

The wheel is built for real, as ``python -m build`` does: an sdist from a copy of what the repo
tracks for a build, then ``pip wheel`` of that sdist; it is installed with ``--no-deps`` into a fresh venv that sees this machine's dependencies
(``--system-site-packages``), and run from a directory with no ``configs/`` or ``envs/``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import swerl

ROOT = Path(swerl.__file__).resolve().parents[1]
BUILD_INPUTS = ("swerl", "configs", "envs", "pyproject.toml", "setup.py", "MANIFEST.in", "README.md")

pytestmark = pytest.mark.slow


def _run(argv: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    r = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{argv} exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, Path]:
    """A wheel built from the checkout and a venv it is installed in (not editable)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "_data")
    for name in BUILD_INPUTS:
        p = ROOT / name
        (shutil.copytree(p, src / name, ignore=ignore) if p.is_dir() else shutil.copy2(p, src / name))
    code = f"from setuptools.build_meta import build_sdist as b; print(b({str(tmp / 'sdist')!r}))"
    sdist = tmp / "sdist" / _run([sys.executable, "-c", code], cwd=src).stdout.split()[-1]
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(tmp / "dist"),
          str(sdist)], cwd=tmp)  # fmt: skip
    (wheel,) = (tmp / "dist").glob("swerl-*.whl")
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], cwd=tmp)
    # --ignore-installed: the machine's own (editable) swerl must not stand in for the wheel
    _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--ignore-installed",
          "--disable-pip-version-check", str(wheel)], cwd=tmp)  # fmt: skip
    outside = tmp / "elsewhere"
    outside.mkdir()
    return {"wheel": wheel, "sdist": sdist, "venv": venv, "cwd": outside, "src": src}


def test_wheel_carries_the_configs_and_the_bundled_suite(installed):
    names = set(zipfile.ZipFile(installed["wheel"]).namelist())
    for cfg in (ROOT / "configs").glob("*.yaml"):
        assert f"swerl/_data/configs/{cfg.name}" in names
    mini = "swerl/_data/envs/swerl-mini/"
    for f in ("tasks.jsonl", "wrong_patches.jsonl", "adversarial_patches.jsonl", "predictions.sample.jsonl"):
        assert mini + f in names
    bundles = {p.name for p in (ROOT / "envs" / "swerl-mini" / "repos").glob("*.bundle")}
    assert bundles and {n.rsplit("/", 1)[-1] for n in names if n.startswith(mini + "repos/")} == bundles
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_installed_swerl_is_the_wheel_and_finds_its_data(installed):
    py, cwd = str(installed["venv"] / "bin" / "python"), installed["cwd"]
    code = ("import json, swerl, swerl.resources as r, swerl.config as c;"
            "print(json.dumps([swerl.__file__, str(r.checkout_root()), str(r.configs_dir()), str(r.suites_dir()),"
            " str(c.resolve_path('default'))]))")  # fmt: skip
    where, root, configs, suites, default = json.loads(_run([py, "-c", code], cwd=cwd).stdout)
    site = installed["venv"] / "lib"
    assert Path(where).is_relative_to(site) and root == "None"
    assert Path(configs).is_relative_to(site) and Path(default) == Path(configs) / "default.yaml"
    assert Path(suites).is_relative_to(site)


def test_an_install_registers_with_gymnasium_alone_and_uninstall_removes_the_hook(installed):
    """``gymnasium.make("swerl/SWE-v0")`` in a fresh interpreter that never imports swerl itself: the
    wheel's ``.pth`` (in site-packages) puts the hook in place; pip's RECORD lists it for uninstall.
    The sdist carries only the hook's source in ``swerl/`` (the build makes the top-level files), and
    an editable wheel (the quick start installs editable) carries them too."""
    with tarfile.open(installed["sdist"]) as sdist:
        top = {Path(*Path(n).parts[1:2]).as_posix() for n in sdist.getnames() if len(Path(n).parts) > 1}
        assert any(n.endswith("/swerl/_gymnasium_hook.py") for n in sdist.getnames())
    assert not {"swerl-gymnasium.pth", "_swerl_gymnasium.py"} & top, top
    py, cwd = str(installed["venv"] / "bin" / "python"), installed["cwd"]
    code = ("import sys, gymnasium, _swerl_gymnasium as h; assert 'swerl' not in sys.modules;"
            "env = gymnasium.make('swerl/SWE-v0', tasks='swerl-mini');"
            "print(h.__file__, type(env.unwrapped).__name__)")  # fmt: skip
    hook, cls = _run([py, "-c", code], cwd=cwd).stdout.split()
    assert Path(hook).is_relative_to(installed["venv"] / "lib") and cls == "SWEEnv"
    (record,) = (installed["venv"] / "lib").glob("python3*/site-packages/swerl-*.dist-info/RECORD")
    listed = {line.split(",")[0] for line in record.read_text().splitlines()}
    assert {"swerl-gymnasium.pth", "_swerl_gymnasium.py"} <= listed
    code = (
        f"from setuptools.build_meta import build_editable as b; print(b({str(installed['src'] / 'ed')!r}))"
    )
    name = _run([sys.executable, "-c", code], cwd=installed["src"]).stdout.split()[-1]
    names = zipfile.ZipFile(installed["src"] / "ed" / name).namelist()
    assert {"swerl-gymnasium.pth", "_swerl_gymnasium.py"} <= set(names)
    assert any(n.startswith("__editable__") for n in names)


def test_installed_swerl_command_lists_the_bundled_suite(installed):
    swerl_cmd = str(installed["venv"] / "bin" / "swerl")
    out = _run([swerl_cmd, "tasks", "list", "swerl-mini", "--json"], cwd=installed["cwd"]).stdout
    ids = [t["instance_id"] for t in json.loads(out)]
    expected = [json.loads(line)["instance_id"] for line in (ROOT / "envs/swerl-mini/tasks.jsonl").open()]
    assert ids == expected


def test_installed_swerl_runs_the_default_config_outside_the_checkout(installed, task_images):
    cwd = installed["cwd"]
    r = _run([str(installed["venv"] / "bin" / "swerl"), "rollout", "default", "task_ids=[swerl__textkit-1]",
              "rollout.num_actors=1", "output_dir=run"], cwd=cwd, timeout=600)  # fmt: skip
    assert f"config: {installed['venv'] / 'lib'}" in r.stdout.splitlines()[0]
    summary = json.loads((cwd / "run" / "summary.json").read_text())
    assert summary["statuses"] == {"resolved": 1}


def test_bootstrap_runs_from_an_installed_swerl_outside_the_checkout(installed, task_images):
    """`pip install .` then `python3 -m swerl.bootstrap run` elsewhere: no `pip install -e` of site-packages."""
    py, cwd = str(installed["venv"] / "bin" / "python"), installed["cwd"]
    r = _run([py, "-m", "swerl.bootstrap", "run", "default", "task_ids=[swerl__tinyconf-1]", "rollout.num_actors=1",
              "output_dir=boot"], cwd=cwd, timeout=600)  # fmt: skip
    assert "not a checkout: nothing to pip install" in r.stdout and " -e " not in r.stdout
    assert json.loads((cwd / "boot" / "summary.json").read_text())["statuses"] == {"resolved": 1}
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    t = subprocess.run([py, "-m", "swerl.bootstrap", "test"], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=120)  # fmt: skip
    assert (
        t.returncode == 1 and "inside a clone of the repository" in t.stderr and "Traceback" not in t.stderr
    )
