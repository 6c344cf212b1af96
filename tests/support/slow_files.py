"""Sum a pytest run's `--durations=0` report per file, slowest first: what `tests/slow_files.txt` lists.

python -m tests.support.slow_files pytest-output.txt [--top 20]
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

LINE = re.compile(r"^\s*([\d.]+)s\s+(?:setup|call|teardown)\s+([^:\s]+)::")


def per_file(report: str) -> Counter[str]:
    """Seconds per test file (setup, call and teardown of its tests summed) in a `--durations` report."""
    seconds: Counter[str] = Counter()
    for line in report.splitlines():
        m = LINE.match(line)
        if m:
            seconds[m.group(2)] += float(m.group(1))
    return seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("report", type=Path)
    p.add_argument("--top", type=int, default=20)
    args = p.parse_args()
    for path, s in per_file(args.report.read_text()).most_common(args.top):
        print(f"{path}  # {s:.0f} s")


if __name__ == "__main__":
    main()
