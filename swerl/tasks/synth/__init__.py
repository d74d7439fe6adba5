"""Tasks synthesized from a repository with tests: history mining and bug injection, validated in sandboxes.

``synthesize(["pypi:toolz"], "suites/toolz")`` writes a suite swerl runs directly
(``tasks.jsonl`` of SWE-bench records, ``repos/*.bundle``, images built locally);
``swerl tasks synth REPO... --out SUITE`` is the same from the command line.
"""

from swerl.tasks.synth.pipeline import SynthReport, check_one, synthesize
from swerl.tasks.synth.statement import ModelWriter, TemplateWriter

__all__ = ["ModelWriter", "SynthReport", "TemplateWriter", "check_one", "synthesize"]
