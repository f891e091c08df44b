"""Read an offline W&B run (`run-<id>.wandb`) back, without the network and without wandb-core.

The file is wandb's transaction log: a 7-byte header (":W&B", magic 0xBEE1, version) and then
LevelDB-log framing (32 KiB blocks; each chunk has a 7-byte header: crc32, length, type) around
`wandb.proto.wandb_internal_pb2.Record` protobufs, which wandb's own classes decode here.
Used by tests (what a run sent to W&B) and by tools comparing offline runs.
"""

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

_FILE_HEADER = struct.Struct("<4sHB")
_CHUNK_HEADER = struct.Struct("<IHB")
_BLOCK = 32768
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def records(path: str | Path):
    """Yield every Record in the file, in order."""
    from wandb.proto import wandb_internal_pb2

    data = Path(path).read_bytes()
    ident, magic, _version = _FILE_HEADER.unpack_from(data)
    if ident != b":W&B" or magic != 0xBEE1:
        raise ValueError(f"{path} is not a W&B transaction log")
    pos, pending = _FILE_HEADER.size, b""
    while pos + _CHUNK_HEADER.size <= len(data):
        left_in_block = _BLOCK - pos % _BLOCK
        if left_in_block < _CHUNK_HEADER.size:  # block trailer padding
            pos += left_in_block
            continue
        _crc, length, kind = _CHUNK_HEADER.unpack_from(data, pos)
        chunk = data[pos + _CHUNK_HEADER.size : pos + _CHUNK_HEADER.size + length]
        pos += _CHUNK_HEADER.size + length
        if kind == 0:  # zero padding up to the next block
            pos += _BLOCK - pos % _BLOCK if pos % _BLOCK else 0
            continue
        pending = chunk if kind in (_FULL, _FIRST) else pending + chunk
        if kind in (_FULL, _LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            yield record


@dataclass
class OfflineRun:
    """What one offline run holds: config, summary, history rows, tags, group, exit code."""

    config: dict = field(default_factory=dict)
    summary: dict = field(default_factory=dict)
    history: list = field(default_factory=list)
    tags: list = field(default_factory=list)
    group: str = ""
    exit_code: int | None = None


def _key(item) -> str:
    return "/".join(item.nested_key) if item.nested_key else item.key


def read_run(path: str | Path) -> OfflineRun:
    run = OfflineRun()
    for record in records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run.tags, run.group = list(record.run.tags), record.run.run_group
            for item in record.run.config.update:
                run.config[_key(item)] = json.loads(item.value_json)
        elif kind == "config":
            for item in record.config.update:
                run.config[_key(item)] = json.loads(item.value_json)
        elif kind == "summary":
            for item in record.summary.update:
                run.summary[_key(item)] = json.loads(item.value_json)
        elif kind == "history":
            run.history.append({_key(i): json.loads(i.value_json) for i in record.history.item})
        elif kind == "exit":
            run.exit_code = record.exit.exit_code
    return run


def find_run_file(run_dir: str | Path) -> Path:
    """The .wandb file of the one offline W&B run in a grpo_exp run dir."""
    files = sorted(Path(run_dir).glob("wandb/offline-run-*/run-*.wandb"))
    if len(files) != 1:
        raise FileNotFoundError(f"expected one offline W&B run under {run_dir}/wandb, found {len(files)}")
    return files[0]
