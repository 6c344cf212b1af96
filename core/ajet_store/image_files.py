"""The image files calls used: each stored once, by the SHA-256 of its bytes, and read back byte for byte (the
trainer's processor then makes the same pixel values the engine's did). A file is written before the call that uses
it is sent to an engine, so every logged call's images are in the store. Files are kept as long as the store is:
deleting an experiment's store deletes them with it (docs/vision.md)."""

from __future__ import annotations

import functools
import time
from collections.abc import Collection, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from ajet_store import tables as t
from ajet_store.db import Database, retried
from ajet_store.types import StoredImage

_I = t.images.c


@functools.lru_cache(maxsize=None)
def _insert_new(dialect: str) -> Any:
    """`INSERT ... ON CONFLICT (sha256) DO NOTHING`: a file another call (or proxy) stored already stays as it is."""
    insert = postgresql.insert(t.images) if dialect == "postgresql" else sqlite.insert(t.images)
    return insert.on_conflict_do_nothing(index_elements=["sha256"])


class ImageOps(Database):
    """The image files of calls."""

    @retried
    def put_images(self, images: Sequence[StoredImage]) -> None:
        """Store each file unless the store has it (one transaction)."""
        if not images:
            return
        now = time.time()
        rows = [
            {"sha256": i.sha256, "mime": i.mime, "width": i.width, "height": i.height, "data": i.data,
             "created_at": now}
            for i in images
        ]  # fmt: skip
        with self._tx() as c:
            c.execute(_insert_new(c.dialect.name), rows)

    def images(self, hashes: Collection[str]) -> dict[str, StoredImage]:
        """The stored files among `hashes`, by hash (a hash the store does not have is absent)."""
        if not hashes:
            return {}
        q = sa.select(_I.sha256, _I.mime, _I.width, _I.height, _I.data).where(_I.sha256.in_(list(hashes)))
        with self._read() as c:
            return {row.sha256: StoredImage(row.sha256, row.mime, row.width, row.height, bytes(row.data))
                    for row in c.execute(q)}  # fmt: skip
