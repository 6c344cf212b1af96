"""`ajet-swarm new-client NAME`: scaffold `tutorial/opencode_build_<NAME>/` from the shipped template."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

from ajet.errors import ConfigError

TEMPLATE_FILES = ["agent_run.py", "agent_roll.py", "readme.md", "data.jsonl"]
NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,48}$")


SKILL_DIR = "skills/write_swarm_client"


def skill_text() -> str:
    """The write-swarm-client skill (SKILL.md) shipped with the package."""
    return resources.files("ajet").joinpath(f"{SKILL_DIR}/SKILL.md").read_text()


def swarm_guide_text() -> str:
    """The skill's reference material: how the swarm works, for a client author."""
    return resources.files("ajet").joinpath(f"{SKILL_DIR}/reference/swarm_guide.md").read_text()


def new_client(name: str, root: Path = Path(".")) -> Path:
    """Write `<root>/tutorial/opencode_build_<name>/`; refuses to overwrite an existing folder."""
    if not NAME_RE.match(name):
        raise ConfigError(f"client name '{name}': use lowercase letters, digits and _ (a Python identifier)")
    dest = root / "tutorial" / f"opencode_build_{name}"
    if dest.exists():
        raise ConfigError(f"{dest} exists already")
    dest.mkdir(parents=True)
    for pkg in (root / "tutorial", dest):
        init = pkg / "__init__.py"
        if not init.exists():
            init.write_text("")
    templates = resources.files("ajet").joinpath("templates/swarm_client")
    for fname in TEMPLATE_FILES:
        text = templates.joinpath(fname + ".tmpl").read_text().format(name=name)
        (dest / fname).write_text(text)
    (dest / "SKILL.md").write_text(skill_text())
    (dest / "reference").mkdir()
    (dest / "reference" / "swarm_guide.md").write_text(swarm_guide_text())
    return dest


def main(argv: list[str] | None = None) -> int:
    """`python -m ajet.scaffold NAME` (the same as `ajet-swarm new-client NAME`)."""
    import argparse

    ap = argparse.ArgumentParser(prog="ajet-swarm new-client")
    ap.add_argument("name")
    ap.add_argument("--root", default=".")
    args = ap.parse_args(argv)
    print(f"wrote {new_client(args.name, Path(args.root))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
