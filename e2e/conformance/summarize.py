#!/usr/bin/env python3
"""The conformance suite's results as a table: for each scenario the suite ran, PASS when every
check passed (INFO, SKIPPED and WARNING count as passed, as the suite counts them), per run
directory given (`direct <revision>=dir`, `Capstan <revision>=dir`), in the order given. Reads
each scenario's `checks.json`.

With `--expected-failures FILE`: exits 1 when a scenario passes directly but not through
Capstan and FILE does not list it (`<revision> <scenario> <reason>`), or FILE lists one that
passes through Capstan (the list only shrinks). A listed scenario that failed directly in this
run is no reason to fail: the direct side is the reference server's, not Capstan's."""
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


def expected_failures(path: Path) -> dict:
    """(revision, scenario) → reason, from the lines of `path` (`#` starts a comment)."""
    listed = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split(None, 2)
        if len(parts) < 3:
            sys.exit(f"{path}:{number}: expected `<revision> <scenario> <reason>`, got {line!r}")
        listed[(parts[0], parts[1])] = parts[2]
    return listed


def problems(tables: dict, listed: dict) -> list:
    """What the expected failures do not explain, and what they list that no longer fails."""
    found = []
    revisions = sorted({name.split(" ", 1)[1] for name in tables})
    for revision in revisions:
        direct = tables.get(f"direct {revision}", {})
        capstan = tables.get(f"Capstan {revision}", {})
        for scenario, outcome in sorted(direct.items()):
            through = capstan.get(scenario, "not run")
            known = (revision, scenario) in listed
            if outcome == "PASS" and through != "PASS" and not known:
                found.append(f"{revision} {scenario}: passes directly, through Capstan {through}; "
                             "fix it, or list it in expected-failures.txt with the reason")
    for (revision, scenario), reason in sorted(listed.items()):
        through = tables.get(f"Capstan {revision}", {}).get(scenario)
        if through == "PASS":
            found.append(f"{revision} {scenario} is listed ({reason}) but passes through "
                         "Capstan: remove the line")
    return found


def main() -> None:
    args = sys.argv[1:]
    listed = None
    if args[:1] == ["--expected-failures"]:
        listed = expected_failures(Path(args[1]))
        args = args[2:]
    runs = [arg.split("=", 1) for arg in args]
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
    if listed is not None:
        found = problems(tables, listed)
        for problem in found:
            print(f"conformance: {problem}", file=sys.stderr)
        if found:
            sys.exit(1)


if __name__ == "__main__":
    main()
