"""CPU cost of one `genlm-control generate` on the embedded model, and where it goes.

    python benchmarks/startup.py [--runs 3] [-- extra generate arguments]

Runs the command line in a fresh subprocess `--runs` times and reports each run's
CPU time (user + sys, of the process and its threads, from `os.wait4`), then one run
under `python -X importtime` and the packages whose import costs the most (cumulative
microseconds of the top-level import statement that first loaded them). The target of
issue 26 is ≤ 4 s of CPU for

    genlm-control generate --prompt "The value is" --regex " [a-z]+\\."

Also times one bad-input error (an unbalanced regex), which must stay under 1 s.
Runs use bytecode caches, as an installed package does (one untimed run writes them
where `PYTHONDONTWRITEBYTECODE` had kept them from being written).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

DEFAULT = ["--prompt", "The value is", "--regex", " [a-z]+\\."]
BAD = ["--prompt", "x", "--regex", "(ab"]


def cpu_of(argv: list[str], env: dict | None = None) -> tuple[float, float, int, str]:
    """(user, sys, exit status, stderr) of one run of `argv`."""
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        text = err.read().decode("utf-8", "replace")
    return usage.ru_utime, usage.ru_stime, proc.returncode, text


def import_breakdown(stderr: str, top: int = 12) -> list[tuple[str, float]]:
    """The costliest imports made at nesting depth 0 (seconds, cumulative)."""
    rows = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = line.split("|")
        if name.startswith(" ") and not name.startswith("  ") and cumulative.strip().isdigit():
            rows.append((name.strip(), int(cumulative) / 1e6))
    return sorted(rows, key=lambda r: -r[1])[:top]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("extra", nargs="*", help="generate arguments (default: the issue's command)")
    args = parser.parse_args()
    cli = [sys.executable, "-m", "genlm.control.cli", "generate"]
    gen = cli + (args.extra or DEFAULT)
    # As an installed package runs: with bytecode caches (one untimed run writes them).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    print("command: genlm-control", " ".join(gen[3:]))
    cpu_of(gen, env)
    totals = []
    for i in range(args.runs):
        user, system, rc, err = cpu_of(gen, env)
        if rc != 0:
            sys.exit(f"run failed ({rc}): {err.strip()[-500:]}")
        totals.append(user + system)
        print(f"run {i + 1}: {user:.2f} user + {system:.2f} sys = {user + system:.2f} s CPU")
    print(f"min {min(totals):.2f} s, median {sorted(totals)[len(totals) // 2]:.2f} s CPU (target ≤ 4 s)")
    user, system, rc, err = cpu_of(cli + BAD, env)
    print(f"bad regex error: {user + system:.2f} s CPU, exit {rc} (target < 1 s)")
    _, _, _, err = cpu_of([sys.executable, "-X", "importtime", *gen[1:]], env)
    print("costliest top-level imports (cumulative wall s under -X importtime):")
    for name, seconds in import_breakdown(err):
        print(f"  {seconds:6.3f}  {name}")


if __name__ == "__main__":
    main()
