"""A throwaway PostgreSQL server on loopback for the store's PostgreSQL tests.

`AJET_TEST_PG_URL` names a server to use instead. Otherwise Debian's PostgreSQL binaries (`initdb`,
`pg_ctl`) start a cluster in a temporary folder on a free 127.0.0.1 port, as the `postgres` OS user when
run as root (initdb refuses root), and stop it afterwards. `.ci/run` installs the binaries where missing.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from typing import Iterator, Optional

from tests.support.procs import free_port


def _bin(name: str) -> Optional[str]:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return found[-1] if found else shutil.which(name)


def can_start() -> bool:
    """A server can be started here (PostgreSQL's binaries are installed)."""
    return _bin("initdb") is not None and _bin("pg_ctl") is not None


def available() -> bool:
    """A server is given, or one can be started here."""
    return bool(os.environ.get("AJET_TEST_PG_URL")) or (_bin("initdb") is not None and _bin("pg_ctl") is not None)


def _as_postgres(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


class PgServer:
    """A throwaway PostgreSQL cluster on a free 127.0.0.1 port, which a test may stop and start again (a restart,
    a failover) while its clients hold the URL."""

    def __init__(self, root: Optional[str] = None, settings: str = "") -> None:
        self.root = root or tempfile.mkdtemp(prefix="ajet-pg-")
        """Where its data and log live (`root`: a folder given, such as a small tmpfs the chaos soak fills)."""
        self.settings = settings
        """More server settings (`-c name=value ...`), such as a WAL bound for a small disk."""
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres")
        self.data, self.port = os.path.join(self.root, "data"), free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        subprocess.run(
            _as_postgres([_bin("initdb"), "-D", self.data, "-A", "trust", "-U", "postgres"]),
            check=True,
            capture_output=True,
            timeout=120,
        )
        self.start()

    def _ctl(self, *args: str) -> None:
        subprocess.run(_as_postgres([_bin("pg_ctl"), "-D", self.data, *args]), check=True, capture_output=True,
                       timeout=120)  # fmt: skip

    def start(self) -> None:
        """Start (again): the same port and data."""
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 {self.settings}".strip()
        self._ctl("-w", "-l", os.path.join(self.root, "log"), "-o", options, "start")

    def stop(self, mode: str = "fast") -> None:
        """Stop it (`fast`: what `pg_ctl restart -m fast` and a managed database's failover do to its clients)."""
        self._ctl("-m", mode, "stop")

    def close(self) -> None:
        subprocess.run(_as_postgres([_bin("pg_ctl"), "-D", self.data, "-m", "immediate", "stop"]),
                       capture_output=True, timeout=60)  # fmt: skip
        shutil.rmtree(self.root, ignore_errors=True)


@contextmanager
def postgres_url() -> Iterator[str]:
    """A `postgresql://` URL of a live server (plain scheme: the store picks psycopg 3)."""
    given = os.environ.get("AJET_TEST_PG_URL")
    if given:
        yield given
        return
    server = PgServer()
    try:
        yield server.url
    finally:
        server.close()


def fresh_database(url: str, name: str) -> str:
    """A database of its own named `name` on the server of `url` (dropped first if it exists): the URL of an empty
    store for one test."""
    import sqlalchemy as sa

    eng = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1), isolation_level="AUTOCOMMIT")
    with eng.connect() as c:
        c.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}"'))
        c.execute(sa.text(f'CREATE DATABASE "{name}"'))
    eng.dispose()
    return url.rsplit("/", 1)[0] + "/" + name
