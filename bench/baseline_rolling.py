"""What the trainer does at BOOTING, run in a tree's own store code: register the stub engine, then ROLLING.

`python bench/baseline_rolling.py DB_URL STUB_URL` with the tree's packages on PYTHONPATH (a baseline's store is of
its own schema, so only its own code may write it). It speaks the words of this tree and of the trees before the
glossary of `docs/design.md` (`tests/test_vocabulary.py` skips this file for that reason alone).
"""

import sys

import ajet.types as wire
import ajet_store.types as rows
from ajet_store import Store

store = Store(sys.argv[1])
engine_row = getattr(rows, "RegisteredEngine", None) or rows.Deployment
engine = engine_row("stub-0", sys.argv[2] + "/v1", "stub-model", 0)
(getattr(store, "register_engines", None) or store.register_deployments)([engine])
state = getattr(wire, "ExperimentState", None) or wire.EngineState
store.transition(state.ROLLING, allowed_from=[state.BOOTING, state.ROLLING])
