"""Export rewarded episodes (messages, exact token ids, rewards) for SFT or offline analysis.

Episodes are read from the store page by page and written as they come, so a big store is never
loaded into memory: JSONL line by line, Parquet one row group per page. A call's images are named in its messages as
the call log names them (`ajet-image:<sha256>`) and listed with their grids (`images`); `images_dir` writes each file
once as `<sha256>.<png|jpg|webp>` beside the export, so a reader resolves a reference without the store.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator, Optional

from ajet.types import EpisodeStatus
from ajet_proxy.stats import answer_text, request_messages
from ajet_store import Store
from ajet_store.types import CallRecord, EpisodeRow

PAGE = 256


def episode_record(row: EpisodeRow, calls: list[CallRecord]) -> dict[str, Any]:
    """One exported episode: its reward and every call with messages and token ids."""
    return {
        "episode_uuid": row.uuid,
        "task_id": row.task_id,
        "reward": row.reward,
        "client_id": row.client_id,
        "episode_type": row.episode_type,
        "policy_version_start": row.policy_version_start,
        "consumed_step": row.consumed_step,
        "untrainable": row.untrainable,
        "calls": [
            {
                "seq": c.seq,
                "messages": request_messages(c.request),
                "response": answer_text(c.response),
                "prompt_ids": c.prompt_ids,
                "completion_ids": c.completion_ids,
                "logprobs": c.logprobs,
                "finish_reason": c.finish_reason,
                "policy_version": c.policy_version,
                "images": [{"sha256": i.sha256, "grid": list(i.grid) if i.grid else None} for i in c.images or ()],
            }
            for c in calls
        ],
    }


EXTENSIONS = {"image/png": "png", "image/jpeg": "jpg", "image/webp": "webp"}
"""The file name extension of each stored image type."""


def write_images(store: Store, record: dict[str, Any], folder: Path, written: set[str]) -> None:
    """Write the files of a record's images not yet `written` into `folder`, as `<sha256>.<ext>`."""
    wanted = {i["sha256"] for c in record["calls"] for i in c["images"]} - written
    for sha, image in store.images(wanted).items():
        (folder / f"{sha}.{EXTENSIONS[image.mime]}").write_bytes(image.data)
        written.add(sha)


def iter_records(store: Store, since_step: Optional[int] = None) -> Iterator[dict[str, Any]]:
    """Rewarded (ended) episodes as export records, oldest first."""
    for row in store.iter_episodes(status=EpisodeStatus.ENDED, since_step=since_step, page=PAGE):
        yield episode_record(row, store.calls(row.uuid))


def export_jsonl(store: Store, out: Path, since_step: Optional[int] = None, images_dir: Optional[Path] = None) -> int:
    """Write one JSON object per line (and the images' files into `images_dir`); returns the number of episodes."""
    n, written = 0, set[str]()
    with out.open("w") as fh:
        for rec in iter_records(store, since_step):
            fh.write(json.dumps(rec) + "\n")
            if images_dir is not None:
                write_images(store, rec, images_dir, written)
            n += 1
    return n


def export_parquet(store: Store, out: Path, since_step: Optional[int] = None, images_dir: Optional[Path] = None) -> int:
    """Write Parquet, one row group per page (calls as a list of structs; the images' files into `images_dir`);
    returns the number of episodes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    writer: Optional[pq.ParquetWriter] = None
    n, buf, written = 0, [], set[str]()
    try:
        for rec in iter_records(store, since_step):
            if images_dir is not None:
                write_images(store, rec, images_dir, written)
            rec = {**rec, "calls": [{**c, "messages": json.dumps(c["messages"])} for c in rec["calls"]]}
            buf.append(rec)
            if len(buf) >= PAGE:
                writer = _write(pa, pq, writer, out, buf)
                n, buf = n + len(buf), []
        if buf or writer is None:
            writer = _write(pa, pq, writer, out, buf)
            n += len(buf)
    finally:
        if writer is not None:
            writer.close()
    return n


def _schema(pa: Any) -> Any:
    call = pa.struct(
        [
            ("seq", pa.int64()),
            ("messages", pa.string()),
            ("response", pa.string()),
            ("prompt_ids", pa.list_(pa.int32())),
            ("completion_ids", pa.list_(pa.int32())),
            ("logprobs", pa.list_(pa.float64())),
            ("finish_reason", pa.string()),
            ("policy_version", pa.int64()),
            ("images", pa.list_(pa.struct([("sha256", pa.string()), ("grid", pa.list_(pa.int64()))]))),
        ]
    )
    return pa.schema(
        [
            ("episode_uuid", pa.string()),
            ("task_id", pa.string()),
            ("reward", pa.float64()),
            ("client_id", pa.string()),
            ("episode_type", pa.string()),
            ("policy_version_start", pa.int64()),
            ("consumed_step", pa.int64()),
            ("untrainable", pa.bool_()),
            ("calls", pa.list_(call)),
        ]
    )


def _write(pa: Any, pq: Any, writer: Any, out: Path, rows: list[dict[str, Any]]) -> Any:
    schema = _schema(pa)
    if writer is None:
        writer = pq.ParquetWriter(str(out), schema)
    writer.write_table(pa.Table.from_pylist(rows, schema=schema))
    return writer
