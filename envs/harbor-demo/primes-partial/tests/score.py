import json
import sys
from pathlib import Path

expected = ["2", "3", "5"]
path = Path(sys.argv[1])
lines = path.read_text().split() if path.exists() else []
right = sum(1 for want, got in zip(expected, lines, strict=False) if want == got)
print(json.dumps({"reward": round(right / len(expected), 4), "lines_right": right}))
