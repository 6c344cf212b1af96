"""`ajet-swarm`: the composition root of AgentJet Swarm.

It is the one place that starts both the proxy and the trainer (as two child processes, so it
imports neither's heavy dependencies), and it serves the client-side commands (`overwatch`,
`new-client`) that must run on GPU-less machines with only the `proxy` extra installed. Nothing
imports this package.
"""

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """`ajet-swarm` (see `ajet_swarm.cli`)."""
    from ajet_swarm.cli import main as cli_main

    return cli_main(argv)
