"""Rollout configs: validation errors name the key and the file; overrides work."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from swerl.config import load_config
from swerl.errors import ConfigError


def test_default_config_loads_and_overrides_apply():
    cfg = load_config("default", ["rollout.attempts=3", "backend.sandbox.memory=2g", "name=x"])
    assert cfg.rollout.attempts == 3 and cfg.backend.sandbox.memory == "2g" and cfg.name == "x"
    assert str(cfg.out) == "runs/x"


@pytest.mark.parametrize(
    ("text", "overrides", "message"),
    [
        (
            "rollout: {num_actorz: 2}\n",
            [],
            r":1: rollout\.num_actorz: unknown key \(did you mean rollout\.num_actors\?\)",
        ),
        ("rollout: {attempts: many}\n", [], r"rollout\.attempts: .*integer"),
        ("backend: {name: podman}\n", [], r"backend\.name"),
        ("- a list\n", [], "top level must be a mapping"),
        ("env: {max_steps: 1\n", [], r":2: not valid YAML"),
        ("{}\n", ["rollout.attempts"], "key.sub=value"),
    ],
)
def test_bad_configs_name_the_key_and_the_file(tmp_path, text, overrides, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as err:
        load_config(path, overrides)
    assert str(path) in str(err.value) or "override" in str(err.value)


def test_typos_say_where_they_are_and_what_was_meant(tmp_path):
    path = tmp_path / "typo.yaml"
    path.write_text("name: t\nrollout:\n  num_actors: 1\n  atempts: 2\nenv:\n  max_steps: many\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    text = str(err.value)
    assert f"{path}:4: rollout.atempts: unknown key (did you mean rollout.attempts?)" in text
    assert f"{path}:6: env.max_steps: " in text
    # A command-line typo is blamed on the override, not on the (correct) file.
    with pytest.raises(ConfigError) as err:
        load_config("default", ["rollout.num_actorz=2", "envv.max_steps=3"])
    text = str(err.value)
    assert (
        "override rollout.num_actorz=2: rollout.num_actorz: unknown key (did you mean rollout.num_actors?)"
        in text
    )
    assert "override envv.max_steps=3: envv: unknown key (did you mean env?)" in text
    assert "default.yaml" not in text
    with pytest.raises(ConfigError, match=r"override rollout.attempts=zero: rollout.attempts: "):
        load_config("default", ["rollout.attempts=zero"])
    with pytest.raises(ConfigError, match=r"unknown key \(known keys of policy: name, placement, options\)"):
        load_config(None, ["policy.zzzzzz=1"])


def test_missing_config_file():
    with pytest.raises(ConfigError, match="does not exist"):
        load_config("/no/such/config.yaml")


def test_rollout_command_runs_and_resumes(task_images, tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "swerl.cli", "rollout", "default", f"output_dir={out}",
           "task_ids=[swerl__textkit-1, swerl__tinyconf-1]", "rollout.num_actors=1"]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "[2/2]" in r.stdout and "mean reward 1.000" in r.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["resolved"] == 2 and summary["statuses"] == {"resolved": 2}
    again = subprocess.run([*cmd, "--json"], capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and json.loads(again.stdout)["new_episodes"] == 0


def test_rollout_command_bad_config_exit_code(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "swerl.cli", "rollout", "default", "rollout.num_actors=zero"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 2 and "rollout.num_actors" in r.stderr


def _swerl_env() -> dict[str, str]:
    """The environment for a ``swerl`` subprocess run outside the checkout: this checkout's swerl."""
    import os
    from pathlib import Path

    import swerl

    root = str(Path(swerl.__file__).resolve().parents[1])
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}


def test_config_names_resolve_in_cwd_first_then_bundled(tmp_path, monkeypatch):
    from swerl.config import CONFIGS_DIR

    monkeypatch.chdir(tmp_path)
    cfg = load_config("default")
    assert cfg.source == (CONFIGS_DIR / "default.yaml").resolve()  # nothing here: the bundled one
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "default.yaml").write_text("name: second-clone\n")
    (tmp_path / "configs" / "mine.yml").write_text("name: mine\n")
    cfg = load_config("default")
    assert cfg.name == "second-clone" and cfg.source == tmp_path / "configs" / "default.yaml"
    assert cfg.describe_source() == f"config: {tmp_path / 'configs' / 'default.yaml'}"
    assert load_config("mine").name == "mine" and load_config("large").name != "second-clone"
    assert load_config(None).source is None and "built-in defaults" in load_config(None).describe_source()


def test_unknown_config_name_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        ConfigError, match=r"config nosuch does not exist: not a file.*configs.*known names: .*default"
    ) as err:
        load_config("nosuch")
    assert str(tmp_path / "configs") in str(err.value)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nosuch.yaml")  # an absolute path means only that path
    (tmp_path / "configs" / "sub").mkdir(parents=True)
    (tmp_path / "configs" / "sub" / "mine.yaml").write_text("name: nested\n")
    assert load_config("sub/mine").name == "nested"  # a relative path is also looked up under configs/


def test_rollout_in_a_second_clone_uses_its_config_and_prints_it(task_images, tmp_path):
    (tmp_path / "configs").mkdir()
    config = tmp_path / "configs" / "default.yaml"
    config.write_text(
        "name: second-clone\ntask_ids: [swerl__tinyconf-1]\noutput_dir: out/{name}\nrollout: {num_actors: 1}\n"
    )
    r = subprocess.run([sys.executable, "-m", "swerl.cli", "rollout", "default"], cwd=tmp_path,
                       env=_swerl_env(), capture_output=True, text=True, timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"config: {config}," in r.stdout.splitlines()[0]  # the first line names the file used
    summary = json.loads((tmp_path / "out" / "second-clone" / "summary.json").read_text())
    assert summary["statuses"] == {"resolved": 1}
