"""schemathesis over the proxy's OpenAPI description: control API and data plane, with and without a
swarm token. Every check runs (no 5xx but the documented 503 "not now"; every status, content type,
header and body as documented; malformed input refused), except `positive_data_acceptance`: a job
that fits the schema may still be refused by design (a tracker that is not installed, say)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from ajet import AgentJetJob, SwarmClient
from ajet_store import Store, sqlite_url
from tests.support.procs import start_proxy
from tests.support.rolling import ensure_rolling

CONFIG = Path(__file__).with_name("schemathesis.toml")
TOKEN = "schemathesis-token"


@pytest.mark.slow
@pytest.mark.parametrize("token", [None, TOKEN], ids=["open", "token"])
def test_schemathesis_finds_nothing(tmp_path, stub, token):
    url = sqlite_url(tmp_path / "st.db")
    px = start_proxy(tmp_path, url, *(["--swarm-token", token] if token else []))
    st = Store(url)
    headers = {"X-Swarm-Token": token} if token else {}
    client = SwarmClient(px.url, swarm_token=token or "")
    try:
        ensure_rolling(client, st, stub.url, job=AgentJetJob(batch_size=64, num_repeat=2))
        _uuid, creds = client.begin_episode(discard_episode_timeout=3600)
        base = [
            str(Path(sys.executable).with_name("schemathesis")),
            "--no-color",
            "--config-file",
            str(CONFIG),
            "run",
            px.url + "/openapi.json",
            "--checks",
            "all",
            "--exclude-checks",
            "positive_data_acceptance",
            "--max-examples",
            "40",
            "--seed",
            "7",
            "-H",
            f"Authorization: Bearer {creds.api_key}",
            *[a for k, v in headers.items() for a in ("-H", f"{k}: {v}")],
        ]
        # the data plane first, while the episode is open; then the control API (which may stop the engine)
        runs = [
            subprocess.run(base + [flag, "^/v1/"], capture_output=True, text=True, timeout=900, cwd=tmp_path)
            for flag in ("--include-path-regex", "--exclude-path-regex")
        ]
        client.get_engine_status()  # a control call: the proxy has written every answered call
        calls = st.totals()["calls"]
    finally:
        client.close()
        px.close()
        st.close()
    for plane, res in zip(("data plane", "control"), runs):
        out = res.stdout + res.stderr
        (tmp_path / f"schemathesis-{plane.replace(' ', '-')}.txt").write_text(out)  # the whole report, kept
        counts = re.search(r"(\d+) generated, (\d+) passed", out)
        print(f"schemathesis {plane} ({'token' if token else 'open'}): {counts.group(0) if counts else out[-2000:]}")
        assert res.returncode == 0 and counts and counts.group(1) == counts.group(2), out[-6000:]
        assert int(counts.group(1)) >= 100 and "Authentication failed" not in out  # it ran, past the auth
    print(f"{calls} chat calls answered and logged")
    assert calls >= 20  # the data plane answered schema-valid bodies with 200
