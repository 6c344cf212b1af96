"""Every figure the README and the docs cite from a results file is in that file (figures stamped by the code).

A line of README.md or docs/*.md that names a file of `bench/results/` (`name.jsonl`, or a pattern such as
`proxy_overhead*.jsonl`) cites its figures from it: each number with a decimal point on that line must be a value
of one of the file's rows (a number anywhere in the row, a note's text included), as written or rounded to the
digits the line gives; a percentage may be a share (13.8% is 0.138). When the line names commits (7 hex digits),
only the rows that name one of them count (their own commit, or the runs a summary row was made from). A number on
such a line (or in the rows of a table just under it) that is not a measurement, or is worked out from rows in the
text, is listed in NOT_FROM_A_ROW with the words around it and why.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results"
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
NUMBER = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+|\d+)\.(\d+)(%?)(?![\w.])")
CITED = re.compile(r"([a-z_]+\*?)\.jsonl")
COMMIT = re.compile(r"\b[0-9a-f]{7}\b")
TABLE_REACH = 8
"""A table cites the results file (and commits) a line at most this many lines above its header names."""

NOT_FROM_A_ROW = {
    ("benchmarks.md", "sigma 0.5 0.80 (0.78, 0.77, 0.86)"): "the mean of the three seeds' rows beside it",
    ("benchmarks.md", "sigma 1 0.83 (0.89, 0.78, 0.81)"): "the mean of the three seeds' rows beside it",
    ("benchmarks.md", "sigma 1.5 0.96 (1.30, 0.90, 0.68)"): "the mean of the three seeds' rows beside it",
    ("benchmarks.md", "11/12 reach 0.8, median 89 steps"): "the target the simulated runs train to, not a figure",
    ("benchmarks.md", "11/12 reach 0.8, median 87 steps"): "the target the simulated runs train to, not a figure",
    ("training.md", "| design | reached 0.8 |"): "the table's header: the target the simulated runs train to",
}
"""(document, the words around the figure) -> why no row holds it."""


def numbers_in(value: Any) -> Iterator[float]:
    """Every number of a row: its numeric fields, nested ones, and those written in its text."""
    if isinstance(value, bool):
        return
    if isinstance(value, (int, float)):
        yield float(value)
    elif isinstance(value, str):
        for m in NUMBER.finditer(value):
            yield float(m.group(1).replace(",", "") + "." + m.group(2))
    elif isinstance(value, dict):
        for v in value.values():
            yield from numbers_in(v)
    elif isinstance(value, list):
        for v in value:
            yield from numbers_in(v)


def row_numbers(pattern: str, commits: set[str]) -> list[float]:
    """The numbers of the rows of the results files `pattern` names (only rows naming one of `commits`, if any)."""
    out: list[float] = []
    for path in RESULTS.glob(f"{pattern}.jsonl"):
        for line in path.read_text().splitlines():
            if line.strip() and (not commits or any(c in line for c in commits)):
                out.extend(numbers_in(json.loads(line)))
    return out


def written_as(value: float, whole: str, decimals: str, percent: str) -> bool:
    """Whether `value` is the figure written `whole.decimals` (rounded to its digits; a share for a percentage)."""
    cited, digits = float(whole.replace(",", "") + "." + decimals), len(decimals)
    candidates = (value, value * 100) if percent else (value,)
    return any(abs(c - cited) <= 0.5 * 10**-digits + 1e-9 for c in candidates)  # 2.695 may be written 2.70


def citations(lines: list[str]) -> Iterator[tuple[int, str, list[str], set[str]]]:
    """(line number, line, results files, commits) for each line that cites figures: a line naming a results
    file, and each row of a table whose header comes at most `TABLE_REACH` lines after such a line."""
    last: tuple[int, list[str], set[str]] = (-TABLE_REACH - 1, [], set())
    table: tuple[list[str], set[str]] | None = None
    for n, line in enumerate(lines, 1):
        cited = [p for p in CITED.findall(line) if any(RESULTS.glob(f"{p}.jsonl"))]
        commits = set(COMMIT.findall(line))
        if cited:
            last = (n, cited, commits)
        if not line.startswith("|"):
            table = None
        elif table is None:
            table = (last[1], last[2]) if n - last[0] <= TABLE_REACH else ([], set())
        if cited:
            yield n, line, cited, commits
        elif table is not None and table[0]:
            yield n, line, table[0], table[1]


def figures(doc: Path, line: str) -> list[re.Match[str]]:
    """The figures of a citing line, less those NOT_FROM_A_ROW lists for it."""
    listed = [words for (name, words) in NOT_FROM_A_ROW if name == doc.name and words in line]
    excused = {f"{a}.{b}" for words in listed for a, b, _ in NUMBER.findall(words)}
    return [m for m in NUMBER.finditer(line) if f"{m.group(1)}.{m.group(2)}" not in excused]


def unmatched() -> list[str]:
    """`file:line figure [results]` for each cited figure no row holds (and that is not listed as such)."""
    out = []
    for doc in DOCS:
        for n, line, cited, commits in citations(doc.read_text().splitlines()):
            values = [v for p in cited for v in row_numbers(p, commits)]
            for m in figures(doc, line):
                if not any(written_as(v, m.group(1), m.group(2), m.group(3)) for v in values):
                    out.append(f"{doc.name}:{n} {m.group(1)}.{m.group(2)} {cited}")
    return out


def test_every_cited_figure_is_in_a_row_of_its_results_file():
    assert unmatched() == []


def test_a_figure_no_row_holds_is_caught():
    assert written_as(0.7395833, "0", "740", "") and written_as(0.138, "13", "8", "%")
    assert not written_as(0.7395833, "0", "741", "") and not written_as(1.187, "1", "18", "")
    assert written_as(2.695, "2", "70", "") and written_as(2.695, "2", "69", "")
    assert 0.7395833333333334 in row_numbers("real_model", {"c5a6055"})


def stamped_row_numbers(pattern: str, commits: set[str]) -> list[float]:
    """`row_numbers`, of the rows the code stamped (they name their commit) only."""
    out: list[float] = []
    for path in RESULTS.glob(f"{pattern}.jsonl"):
        for line in path.read_text().splitlines():
            row = json.loads(line) if line.strip() else {}
            if "commit" in row and (not commits or any(c in line for c in commits)):
                out.extend(numbers_in(row))
    return out


def unmarked_legacy() -> list[str]:
    """`file:line [results]` for each line whose cited figures come only from rows the code did not stamp (no
    commit: written before `bench.results` stamped every row) and that does not say `legacy`."""
    out = []
    for doc in DOCS:
        for n, line, cited, commits in citations(doc.read_text().splitlines()):
            found = figures(doc, line)
            values = [v for p in cited for v in stamped_row_numbers(p, commits)]
            stamped = any(written_as(v, m.group(1), m.group(2), m.group(3)) for m in found for v in values)
            if found and not stamped and "legacy" not in line.lower():
                out.append(f"{doc.name}:{n} {cited}")
    return out


def test_a_figure_from_a_row_the_code_did_not_stamp_is_marked_legacy():
    assert unmarked_legacy() == []
