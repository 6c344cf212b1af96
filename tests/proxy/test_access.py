"""Closed by default beyond loopback: which starts need a token, the token kept in a file only its owner can
read (reused, refused when others can read it), and the explorer served to loopback clients only without one."""

import os
import stat

import pytest
from starlette.testclient import TestClient

from ajet.errors import ConfigError
from ajet_proxy.access import access_lines, is_loopback, kept_token, resolve_access
from ajet_proxy.explore.serve import standalone_app
from ajet_store import Store, sqlite_url


def test_loopback_detection():
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1") and is_loopback("127.0.0.2")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3") and not is_loopback("trainbox")
    assert not is_loopback("::") and not is_loopback("testclient")


def test_only_a_start_beyond_loopback_without_token_or_open_makes_one(tmp_path):
    file = str(tmp_path / "t")
    assert resolve_access("127.0.0.1", None, False, file).token is None  # this machine only
    assert resolve_access("0.0.0.0", "given", False, file).token == "given"
    opened = resolve_access("0.0.0.0", None, True, file)
    assert opened.token is None and opened.open_beyond_loopback and "--open" in access_lines(opened, "u")[0]
    assert not (tmp_path / "t").exists()
    made = resolve_access("10.0.0.7", None, False, file)
    assert made.token and made.token_file == tmp_path / "t"
    assert any(f"AJET_SWARM_TOKEN={made.token}" in line for line in access_lines(made, "http://box:1"))


def test_the_kept_token_is_private_and_reused(tmp_path):
    path = tmp_path / "conf" / "agentjet" / "token"
    first = kept_token(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert kept_token(path) == first and len(first) >= 40  # the next start: clients keep working
    path.write_text("")
    assert kept_token(path) not in ("", first)  # an empty file gets a new token


def test_a_token_file_others_can_read_is_refused(tmp_path):
    path = tmp_path / "token"
    path.write_text("known\n")
    os.chmod(path, 0o644)
    with pytest.raises(ConfigError, match="readable by other users"):
        kept_token(path)
    os.chmod(path, 0o600)
    assert kept_token(path) == "known"


def test_without_a_token_the_explorer_is_for_loopback_clients_only(tmp_path):
    st = Store(sqlite_url(tmp_path / "s.db"))
    try:
        with TestClient(standalone_app(st), client=("10.1.2.3", 5000)) as remote:
            r = remote.get("/explore/")
            assert r.status_code == 403 and r.json()["error"] == "Forbidden" and "token" in r.json()["detail"]
            assert remote.get("/explore//live").status_code == 403  # the path as the router reads it
        with TestClient(standalone_app(st), client=("127.0.0.1", 5000)) as local:
            assert local.get("/explore/").status_code == 200
        with TestClient(standalone_app(st, token="s3cret"), client=("10.1.2.3", 5000)) as remote:
            r = remote.get("/explore/live", headers={"X-Swarm-Token": "s3cret"})
            assert r.status_code == 200  # with a token, anyone who holds it
    finally:
        st.close()
