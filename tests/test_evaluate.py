"""Predictions files: every mistake is a ConfigError naming file, line and field, before any grading."""

from __future__ import annotations

import json

import pytest

from swerl.errors import ConfigError
from swerl.evaluate import load_predictions
from swerl.tasks.instance import load_instances

INSTANCES = load_instances("swerl-mini")
IDS = [i.instance_id for i in INSTANCES]


def pred(iid: str = IDS[0], **kw) -> dict:
    return {"instance_id": iid, "model_name_or_path": "m", "model_patch": "", **kw}


def test_json_list_jsonl_and_id_map_all_load(tmp_path):
    records = [pred(IDS[0]), pred(IDS[1], model_patch=None)]
    (tmp_path / "p.json").write_text(json.dumps(records, indent=2))
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (tmp_path / "map.json").write_text(json.dumps({r["instance_id"]: r for r in records}))
    for name in ("p.json", "p.jsonl", "map.json"):
        got = load_predictions(tmp_path / name, INSTANCES)
        assert [p.instance_id for p in got] == IDS[:2]
    assert load_predictions(tmp_path / "p.json", INSTANCES)[1].where.endswith(
        "p.json:7"
    )  # the line its "{" is on


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("p.jsonl", json.dumps(pred()) + "\n{oops\n", r"p\.jsonl:2: bad JSON"),
        ("p.json", "[\n" + json.dumps(pred()) + ",\n", r"p\.json:3: bad JSON"),
        (
            "p.jsonl",
            json.dumps({"instance_id": IDS[0], "model_patch": ""}),
            r":1: missing field 'model_name_or_path'",
        ),
        (
            "p.jsonl",
            "\n\n" + json.dumps(pred("nope__x-1")),
            r"p\.jsonl:3: field 'instance_id': unknown instance 'nope__x-1'",
        ),
        (
            "p.json",
            json.dumps([pred(), pred(model_patch=3)], indent=1),
            r"p\.json:7: field 'model_patch' must be a string or null",
        ),
        (
            "p.jsonl",
            json.dumps(pred()) + "\n" + json.dumps(pred()),
            r":2: field 'instance_id': .* predicted twice \(first at .*:1\)",
        ),
        ("p.jsonl", '"just a string"\n', r":1: a prediction must be an object"),
        ("p.json", '{"a": 1}', r"must be an object"),
        ("p.jsonl", "\n", r"no predictions"),
    ],
)
def test_bad_predictions_name_file_line_and_field(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as err:
        load_predictions(path, INSTANCES)
    assert str(path) in str(err.value)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="no such predictions file"):
        load_predictions(tmp_path / "none.jsonl", INSTANCES)
