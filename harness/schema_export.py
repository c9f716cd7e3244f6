"""Write the report's JSON Schema into the repo: `python -m harness.schema_export`."""

from __future__ import annotations

import json
from pathlib import Path

from harness.schemas import report_json_schema

SCHEMA_PATH = Path(__file__).resolve().parent / "report.schema.json"


def main() -> None:
    SCHEMA_PATH.write_text(json.dumps(report_json_schema(), indent=2) + "\n")
    print(f"wrote {SCHEMA_PATH}")


if __name__ == "__main__":
    main()
