#!/usr/bin/env python3
"""The conformance suite's results as tables, one per group (a revision, or `extension`), each
scenario direct and through Capstan. Reads each scenario's `checks.json` from the run
directories given as `direct <group>=dir` and `Capstan <group>=dir`.

A scenario passes directly when none of its checks failed (INFO, SKIPPED and WARNING count as
passed, as the suite counts them); the table says `PASS, nothing checked` when no check but the
suite's wire-schema one succeeded (every other one skipped: the direct pass guards nothing
then). Through Capstan it passes when none of its checks failed *and* every check that
succeeded directly succeeded through Capstan too: a check the sidecar turns into a warning, a
skip or an INFO (the suite's own verdict would still be a pass) is `lost` — that is how
`server-sse-polling`, which reports only an INFO ("not applicable") when a server answers its
POST with JSON instead of an SSE stream, is a real check through Capstan. With `--scenarios DIR`, a group's scenarios are those DIR's `scenarios-<group>.txt`
names (what `conformance list` printed; a run directory may hold more), and one that left no
`checks.json` is `not run`, a failure.

With `--expected-failures FILE`: exits 1 when a scenario passes directly but not through
Capstan and FILE does not list it (`<group> <scenario> <reason>`), or FILE lists one that
passes through Capstan (the list only shrinks) or did not run. A listed scenario that failed directly in this
run is no reason to fail: the direct side is the reference server's, not Capstan's."""
import json
import re
import sys
from pathlib import Path

PASSING = ("SUCCESS", "INFO", "SKIPPED", "WARNING")


def load(out: Path) -> dict:
    """scenario → its checks, for each `checks.json` under `out`."""
    found = {}
    for checks in sorted(out.glob("*/checks.json")):
        scenario = re.sub(r"^server-|-\d{4}-\d\d-\d\dT.*$", "", checks.parent.name)
        found[scenario] = json.loads(checks.read_text())
    return found


def succeeded(checks: list) -> set:
    """The ids of the checks that succeeded (a repeated id: some instance succeeded, none failed)."""
    failed = {c["id"] for c in checks if c.get("status") not in PASSING}
    return {c["id"] for c in checks if c.get("status") == "SUCCESS"} - failed


def outcome(checks, direct=None) -> str:
    """`PASS…` or `FAIL (…)` for one scenario's checks; `direct`: the same scenario's direct checks."""
    if checks is None:
        return "FAIL (not run)"
    bad = list(dict.fromkeys(c["id"] for c in checks if c.get("status") not in PASSING))
    if bad:
        return "FAIL (" + ", ".join(bad[:3]) + (", …" if len(bad) > 3 else "") + ")"
    if direct is not None:
        lost = sorted(succeeded(direct) - succeeded(checks))
        if lost:
            return "FAIL (lost: " + ", ".join(lost[:3]) + (", …" if len(lost) > 3 else "") + ")"
    if not any(not i.startswith("wire-schema") for i in succeeded(checks)):
        return "PASS, nothing checked"
    return "PASS"


def passed(cell: str) -> bool:
    return cell.startswith("PASS")


def expected_failures(path: Path) -> dict:
    """(group, scenario) → reason, from the lines of `path` (`#` starts a comment)."""
    listed = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split(None, 2)
        if len(parts) < 3:
            sys.exit(f"{path}:{number}: expected `<group> <scenario> <reason>`, got {line!r}")
        listed[(parts[0], parts[1])] = parts[2]
    return listed


def main() -> None:
    args = sys.argv[1:]
    listed, lists = None, None
    while args[:1] in (["--expected-failures"], ["--scenarios"]):
        if args[0] == "--expected-failures":
            listed = expected_failures(Path(args[1]))
        else:
            lists = Path(args[1])
        args = args[2:]
    runs = {}
    for arg in args:
        name, path = arg.split("=", 1)
        side, group = name.split(" ", 1)
        runs.setdefault(group, {})[side] = load(Path(path))
    problems, totals, ran = [], [], set()
    for group, sides in runs.items():
        direct, capstan = sides.get("direct", {}), sides.get("Capstan", {})
        names = set(direct) | set(capstan)
        if lists is not None and (lists / f"scenarios-{group}.txt").exists():
            names = set((lists / f"scenarios-{group}.txt").read_text().split())
        ran |= {(group, scenario) for scenario in names}
        print(f"\n### {group}\n\n| scenario | direct | through Capstan |\n|---|---|---|")
        count = {"direct": 0, "Capstan": 0}
        for scenario in sorted(names):
            there = direct.get(scenario)
            cells = {"direct": outcome(there),
                     "Capstan": outcome(capstan.get(scenario),
                                        there if there is not None and passed(outcome(there)) else None)}
            for side in count:
                count[side] += passed(cells[side])
            print(f"| {scenario} | {cells['direct']} | {cells['Capstan']} |")
            known = (group, scenario) in (listed or {})
            if passed(cells["direct"]) and not passed(cells["Capstan"]) and not known:
                problems.append(f"{group} {scenario}: passes directly, through Capstan "
                                f"{cells['Capstan']}; fix it, or list it in "
                                "expected-failures.txt with the reason")
            if known and passed(cells["Capstan"]):
                problems.append(f"{group} {scenario} is listed ({listed[(group, scenario)]}) but "
                                "passes through Capstan: remove the line")
        print(f"| **passed** | {count['direct']}/{len(names)} | {count['Capstan']}/{len(names)} |")
        totals.append(f"{group}: direct {count['direct']}/{len(names)}, "
                      f"through Capstan {count['Capstan']}/{len(names)}")
    print("\n" + "; ".join(totals))
    for (group, scenario), reason in sorted((listed or {}).items()):
        if (group, scenario) not in ran:
            problems.append(f"{group} {scenario} is listed ({reason}) but did not run")
    for problem in problems:
        print(f"conformance: {problem}", file=sys.stderr)
    if listed is not None and problems:
        sys.exit(1)


if __name__ == "__main__":
    main()
