"""data=hf (and gsm8k, jsonl): anything `datasets.load_dataset` reads at data.path: a hub id, a `save_to_disk`
directory, a folder of data files, or a .json/.jsonl/.csv/.parquet file. Before launch a local file or saved
dataset is scanned without `datasets` (json, csv and pyarrow only): unreadable or empty files with file and line,
its columns and rows (data/columns_and_rows.py checks them); hub datasets and folders of data files are read in the
worker.
"""

import csv
import json
from pathlib import Path

from omegaconf import DictConfig

from grpo_exp import Problem, is_local_path

# Local files by suffix -> the `datasets` builder that reads them (training/data.py loads them).
FILE_FORMATS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}
MAX_REPORTED_ERRORS = 3
READS_PATH = True  # data.path names what it reads


def load(data: DictConfig, seed: int):
    """Whatever `datasets` reads at data.path: a file, a save_to_disk directory, a hub id."""
    from datasets import DatasetDict, load_dataset, load_from_disk

    local = Path(data.path).expanduser()
    if local.is_file():
        return load_dataset(FILE_FORMATS[local.suffix], data_files=str(local), split="train")
    if is_saved_dataset(local):
        saved = load_from_disk(str(local))
        return saved[data.split] if isinstance(saved, DatasetDict) else saved
    return load_dataset(data.path, data.subset, split=data.split)  # a hub id, or a folder of data files


def scan(data: DictConfig) -> tuple[set[str] | None, int | None, str] | list[Problem]:
    """(columns, rows, where) of data.path as far as it can be read here (None: not read here: a hub id or a folder
    of data files), or the problems that make it unreadable."""
    if data.path is None:
        return [
            Problem(
                "data.path",
                "is required to read data from files or the hub",
                "set data.path=<a .jsonl/.csv/.parquet file, a save_to_disk directory or a hub dataset id>",
            )
        ]
    local = Path(data.path).expanduser()
    if local.suffix in FILE_FORMATS and not local.is_file():
        why, fix = f"file {local} does not exist", f"point data.path at an existing {local.suffix} file"
        return [Problem("data.path", why, fix)]
    if is_local_path(data.path) and not local.exists():
        return [
            Problem(
                "data.path",
                f"{local} does not exist",
                "point data.path at an existing file or save_to_disk directory, or give a hub dataset id",
            )
        ]
    if local.is_file() and local.suffix not in FILE_FORMATS:
        return [
            Problem(
                "data.path",
                f"{local} is not a format grpo_exp reads ({local.suffix})",
                f"use one of: {', '.join(FILE_FORMATS)} or a save_to_disk directory",
            )
        ]
    try:
        found = _scan_local(local, data)
    except _Unreadable as unreadable:
        return unreadable.problems
    return (None, None, str(local)) if found is None else (*found, str(local))


def is_saved_dataset(path: Path) -> bool:
    """A directory written by Dataset.save_to_disk or DatasetDict.save_to_disk."""
    return (path / "dataset_dict.json").is_file() or (path / "state.json").is_file()


class _Unreadable(Exception):
    """A local data source that cannot be read; carries the Problems to report."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems


def _scan_local(path: Path, cfg: DictConfig) -> tuple[set[str], int] | None:
    """The column names and row count of a local data source; raises _Unreadable with what is wrong."""
    if path.is_file():
        reader = {".json": _scan_json, ".jsonl": _scan_json, ".csv": _scan_csv, ".parquet": _scan_parquet}[path.suffix]
        return reader(path, cfg.prompt_column)
    if path.is_dir() and is_saved_dataset(path):
        return _scan_saved_dataset(path, cfg.split)
    return None


def _empty(path: Path) -> _Unreadable:
    return _Unreadable(
        [Problem("data.path", f"{path} holds no rows", "point data.path at a file with at least one row")]
    )


def _scan_json(path: Path, prompt_column: str) -> tuple[set[str], int]:
    text = path.read_text(errors="replace")
    if not text.strip():
        raise _empty(path)
    numbered = _json_rows(path, text)
    if not numbered:
        raise _empty(path)
    not_objects = [n for n, row in numbered if not isinstance(row, dict)]
    if not_objects:
        raise _Unreadable(
            [
                Problem(
                    "data.path",
                    f"{path} line {not_objects[0]} is not a JSON object ({len(not_objects)} such rows)",
                    'give every row as an object: {"prompt": ..., "answer": ...}',
                )
            ]
        )
    objects = [(n, row) for n, row in numbered if isinstance(row, dict)]  # every row, now typed as one
    columns = {key for _, row in objects for key in row}
    lacking = [n for n, row in objects if prompt_column not in row]
    if prompt_column in columns and lacking:
        raise _Unreadable(
            [
                Problem(
                    "data.prompt_column",
                    f"'{prompt_column}' is missing from {len(lacking)} row(s) of {path}, first at line {lacking[0]}",
                    "give every row a prompt, or remove those rows",
                )
            ]
        )
    return columns, len(numbered)


def _json_rows(path: Path, text: str) -> list[tuple[int, object]]:
    """(line, row) of a JSON array of rows or of JSON lines; a line that does not parse is a Problem with its number."""
    if text.lstrip().startswith("["):  # one JSON array of rows
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as exc:
            raise _Unreadable(
                [
                    Problem(
                        "data.path",
                        f"{path} line {exc.lineno} is not valid JSON ({exc.msg})",
                        "fix the file: it must be a JSON array of objects, or one object per line",
                    )
                ]
            ) from None
        return list(enumerate(rows, start=1))
    else:  # JSON lines
        numbered, errors = [], []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                numbered.append((number, json.loads(line)))
            except json.JSONDecodeError as exc:
                errors.append(
                    Problem(
                        "data.path",
                        f"{path} line {number} is not valid JSON ({exc.msg}, column {exc.colno})",
                        f"fix or remove line {number}",
                    )
                )
        if errors:
            raise _Unreadable(errors[:MAX_REPORTED_ERRORS])
    return numbered


def _scan_csv(path: Path, prompt_column: str) -> tuple[set[str], int]:
    with open(path, newline="", errors="replace") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if not header:
            raise _empty(path)
        rows = 0
        for row in reader:
            if not row:
                continue
            rows += 1
            if len(row) != len(header):
                raise _Unreadable(
                    [
                        Problem(
                            "data.path",
                            f"{path} line {reader.line_num} has {len(row)} fields; the header has {len(header)}",
                            f"fix line {reader.line_num} (quote fields that contain commas)",
                        )
                    ]
                )
    if rows == 0:
        raise _empty(path)
    return set(header), rows


def _scan_parquet(path: Path, prompt_column: str) -> tuple[set[str], int]:
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises ArrowInvalid / OSError for a damaged file
        raise _Unreadable(
            [
                Problem(
                    "data.path",
                    f"{path} is not a readable parquet file ({exc})",
                    "rewrite the file, e.g. Dataset.to_parquet",
                )
            ]
        ) from None
    if parquet.metadata.num_rows == 0:
        raise _empty(path)
    return set(parquet.schema_arrow.names), parquet.metadata.num_rows


def _scan_saved_dataset(path: Path, split: str) -> tuple[set[str], int]:
    if (path / "dataset_dict.json").is_file():
        splits = json.loads((path / "dataset_dict.json").read_text()).get("splits", [])
        if split not in splits:
            raise _Unreadable(
                [
                    Problem(
                        "data.split",
                        f"'{split}' is not a split of {path} (splits: {', '.join(splits)})",
                        f"set data.split to one of: {', '.join(splits)}",
                    )
                ]
            )
        path = path / split
    info = json.loads((path / "dataset_info.json").read_text())
    rows = _saved_rows(path)
    if rows == 0:
        raise _empty(path)
    return set((info.get("features") or {}).keys()), rows


def _saved_rows(path: Path) -> int:
    """Rows of a save_to_disk dataset: its arrow files' record batches (memory-mapped)."""
    import pyarrow as pa

    rows = 0
    for arrow in sorted(path.glob("*.arrow")):
        with pa.memory_map(str(arrow)) as source:
            rows += sum(batch.num_rows for batch in pa.ipc.open_stream(source))
    return rows


def column_values(cfg: DictConfig, column: str) -> set | None:
    """The distinct values of one column of a local data source (env.factories' `environment`); None where
    the data is not read here (toy_math, hub ids, folders of files) or lacks the column. Read after preflight
    found the source readable."""
    path = Path(cfg.path).expanduser() if cfg.path else None
    if path is None or not path.exists():
        return None
    if path.suffix in (".json", ".jsonl"):
        text = path.read_text(errors="replace")
        rows = (
            json.loads(text)
            if text.lstrip().startswith("[")
            else [json.loads(ln) for ln in text.splitlines() if ln.strip()]
        )
        found = [row[column] for row in rows if column in row]
        return set(map(str, found)) if found else None
    if path.suffix == ".csv":
        with open(path, newline="", errors="replace") as f:
            reader = csv.DictReader(f)
            return {row[column] for row in reader} if column in (reader.fieldnames or []) else None
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        schema = pq.ParquetFile(path).schema_arrow
        return (
            set(map(str, pq.read_table(path, columns=[column]).column(0).to_pylist()))
            if column in schema.names
            else None
        )
    if path.is_dir() and is_saved_dataset(path):
        import pyarrow as pa

        split = path / cfg.split if (path / "dataset_dict.json").is_file() else path
        values: set = set()
        for arrow in sorted(split.glob("*.arrow")):
            with pa.memory_map(str(arrow)) as source:
                for batch in pa.ipc.open_stream(source):
                    if column not in batch.schema.names:
                        return None
                    values |= set(map(str, batch.column(column).to_pylist()))
        return values or None
    return None
