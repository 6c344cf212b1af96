"""The agent's Python tool: run a snippet in a subprocess with a time limit and no network.

The child is an isolated interpreter (`-I`: no user site, no environment hooks) whose `socket` module is
replaced before the snippet runs, so it cannot open connections; it gets a time limit, a memory limit
(where the OS allows) and an empty temporary working folder. Its stdout (or the error) is what the
agent sees as the tool's answer.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import textwrap

TIME_LIMIT_S = 5.0
MAX_OUTPUT = 2000
_PRELUDE = textwrap.dedent("""
    import socket as _s, sys as _sys
    def _no_network(*a, **k):
        raise OSError("network access is disabled in this sandbox")
    for _name in ("socket", "create_connection", "create_server", "getaddrinfo", "socketpair"):
        setattr(_s, _name, _no_network)
    try:
        import resource as _r
        _r.setrlimit(_r.RLIMIT_AS, (512 * 2**20, 512 * 2**20))
    except Exception:
        pass
    del _s, _sys, _name, _no_network
""")

TOOL_SPEC = {
    "type": "function",
    "function": {
        "name": "run_python",
        "description": "Run Python code and return what it prints.",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "Python source"}},
            "required": ["code"],
        },
    },
}


def run_python(code: str, time_limit: float = TIME_LIMIT_S) -> str:
    """Run `code`; returns its output, or the error, trimmed to MAX_OUTPUT characters."""
    with tempfile.TemporaryDirectory() as cwd:
        try:
            res = subprocess.run(
                [sys.executable, "-I", "-c", _PRELUDE + "\n" + code],
                capture_output=True,
                text=True,
                timeout=time_limit,
                cwd=cwd,
                env={"PATH": "/usr/bin:/bin"},
            )
        except subprocess.TimeoutExpired:
            return f"error: timed out after {time_limit:g}s"
    out = res.stdout
    if res.returncode != 0:
        err = res.stderr.strip().splitlines()
        out += err[-1] if err else f"error: exit code {res.returncode}"
    return (out or "(no output)")[:MAX_OUTPUT]
