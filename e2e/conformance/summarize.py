#!/usr/bin/env python3
"""The conformance suite's results as a table: for each scenario the suite ran, PASS when every
check passed (INFO, SKIPPED and WARNING count as passed, as the suite counts them), per run
directory given (`name=dir`), in the order given. Reads each scenario's `checks.json`."""
import json
import re
import sys
from pathlib import Path


def results(out: Path) -> dict:
    found = {}
    for checks in sorted(out.glob("*/checks.json")):
        scenario = re.sub(r"^server-|-\d{4}-\d\d-\d\dT.*$", "", checks.parent.name)
        bad = [c["id"] for c in json.loads(checks.read_text())
               if c.get("status") not in ("SUCCESS", "INFO", "SKIPPED", "WARNING")]
        found[scenario] = "PASS" if not bad else "FAIL (" + ", ".join(bad[:3]) + ")"
    return found


def main() -> None:
    runs = [arg.split("=", 1) for arg in sys.argv[1:]]
    tables = {name: results(Path(path)) for name, path in runs}
    scenarios = sorted({s for table in tables.values() for s in table})
    print("| scenario | " + " | ".join(name for name, _ in runs) + " |")
    print("|---|" + "---|" * len(runs))
    for scenario in scenarios:
        cells = [tables[name].get(scenario, "–") for name, _ in runs]
        print(f"| {scenario} | " + " | ".join(cells) + " |")
    totals = [f"{sum(v == 'PASS' for v in tables[name].values())}/{len(tables[name])}"
              for name, _ in runs]
    print("| **passed** | " + " | ".join(totals) + " |")


if __name__ == "__main__":
    main()
