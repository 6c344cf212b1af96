#!/usr/bin/env bash
# The system packages `make test`'s tests need, installed when missing (make setup-system, run by make test):
#   - Debian's chromium: the explorer's browser tests (Playwright drives /usr/bin/chromium; no browser is downloaded)
#   - postgresql: the server binaries (initdb, postgres) for the store's PostgreSQL tests (a throwaway server on
#     loopback, tests/support/postgres.py)
#   - valgrind: bench/callgrind.py's instruction counts (tests/bench/test_callgrind.py)
# As root with apt-get, they are installed; otherwise this stops before the tests with the one command to run.
set -euo pipefail

missing=()
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || missing+=(postgresql)
test -x "${AJET_CHROMIUM:-/usr/bin/chromium}" || missing+=(chromium)  # AJET_CHROMIUM: tests point it away
command -v valgrind >/dev/null 2>&1 || missing+=(valgrind)

if [ ${#missing[@]} -eq 0 ]; then
  echo "system packages ok (chromium, postgresql, valgrind)"
  exit 0
fi
command_line="apt-get update && apt-get install -y ${missing[*]}"
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "make test needs ${missing[*]}: run \`sudo sh -c '$command_line'\`, then make test again" >&2
  exit 1
fi
echo "== setup-system: installing ${missing[*]} (Debian's packages)"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "system packages ok (installed ${missing[*]})"
