"""The verl backend (`ajet-trainer start --backend verl`): verl's trainer on Ray, fed by the store.

Kept out of `ajet_trainer`'s top-level imports: it loads verl's Ray trainer, which the embedded path
does not need.
"""

from ajet_trainer.verl_backend.config import compose_verl_config
from ajet_trainer.verl_backend.dataproto import pad_rows, real_rows, samples_to_dataproto
from ajet_trainer.verl_backend.session import VerlSession, build_trainer, open_verl_session
from ajet_trainer.verl_backend.trainer import StoreCursor, StoreFedTrainer

__all__ = [
    "StoreCursor",
    "StoreFedTrainer",
    "VerlSession",
    "build_trainer",
    "compose_verl_config",
    "open_verl_session",
    "pad_rows",
    "real_rows",
    "samples_to_dataproto",
]
