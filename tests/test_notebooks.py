"""Every notebook runs end to end against real Docker and Ray; an error in any cell fails it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


@pytest.fixture(scope="session")
def kernel() -> str:
    """The python3 kernelspec, installed for this user if jupyter finds none."""
    from jupyter_client.kernelspec import KernelSpecManager

    if "python3" not in KernelSpecManager().find_kernel_specs():
        subprocess.run([sys.executable, "-m", "ipykernel", "install", "--user"], check=True)
    return "python3"


def test_notebooks_are_committed_without_outputs():
    assert len(NOTEBOOKS) >= 3
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert not cell.outputs and cell.execution_count is None, f"{path.name} has outputs"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, kernel, task_images, run_id, tmp_path, monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(path, as_version=4)
    nbclient.NotebookClient(
        nb, timeout=120, kernel_name=kernel, resources={"metadata": {"path": str(tmp_path)}}
    ).execute()  # raises CellExecutionError, naming the cell, on any error
    if path.stem.startswith("05_"):  # its output goes to a fresh run directory, never an old file
        assert [p.name for p in tmp_path.iterdir()] == ["runs"]
        assert len(list((tmp_path / "runs").glob("trl-*/episodes.jsonl"))) == 1
    # No wall-clock assert: speed is for the benches; a cell over nbclient's timeout still fails.
