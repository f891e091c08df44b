"""The data a run reads, checked by the driver before launch without `datasets`: unreadable or
empty local files (with file and line), a missing prompt column, a column a reward function needs,
fewer rows than one generation batch takes. Hub datasets and folders of data files are not read
here; the worker checks the dataset it built (`row_problems` again). json, csv and pyarrow only.
"""

import csv
import json
from pathlib import Path

from omegaconf import DictConfig

from grpo_exp import Problem, is_local_path
from grpo_exp.core import toy_math

# Local files by suffix -> the `datasets` builder that reads them (training/data.py loads them).
FILE_FORMATS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}
MAX_REPORTED_ERRORS = 3


def is_saved_dataset(path: Path) -> bool:
    """A directory written by Dataset.save_to_disk or DatasetDict.save_to_disk."""
    return (path / "dataset_dict.json").is_file() or (path / "state.json").is_file()


class _Unreadable(Exception):
    """A local data source that cannot be read; carries the Problems to report."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems


def preflight(
    cfg: DictConfig,
    reward_columns: dict[str, list[str]],
    prompts_per_batch: int | None = None,
    environment_prompts: bool = False,
) -> list[Problem]:
    """Problems with the data the run would read, found without `datasets`: unreadable or empty
    local files, a missing prompt column, columns the reward functions need, fewer rows than one
    generation batch takes (`prompts_per_batch` distinct prompts, when the batch is known). Hub
    datasets and folders of data files are not read here (the worker reports those).
    `environment_prompts`: an environment's reset() gives the prompt of a row that has none (TRL)."""
    if cfg.loader == "none":  # TRL's placeholder rows: one empty prompt each, as many as a generation batch takes
        return _column_problems(cfg, {"prompt"}, "data=none (TRL's rows hold only the prompt)", reward_columns)
    if cfg.loader == "toy_math":
        # it generates data.num_samples rows
        columns, rows = (
            {"prompt", "answer"},
            None if cfg.num_samples else toy_math.ROWS,
        )
        where = "toy_math"
    elif cfg.path is None:
        return [
            Problem(
                "data.path",
                f"is required for data.loader={cfg.loader}",
                "set data.path=<a .jsonl/.csv/.parquet file, a save_to_disk directory or a hub dataset id>",
            )
        ]
    else:
        local = Path(cfg.path).expanduser()
        where = str(local)
        if local.suffix in FILE_FORMATS and not local.is_file():
            return [
                Problem(
                    "data.path", f"file {local} does not exist", f"point data.path at an existing {local.suffix} file"
                )
            ]
        if is_local_path(cfg.path) and not local.exists():
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
            found = _scan_local(local, cfg)
        except _Unreadable as unreadable:
            return unreadable.problems
        if found is None:  # a hub id or a folder of data files: read in the worker (data.num_samples bounds it)
            return row_problems(cfg, None, where, prompts_per_batch)
        columns, rows = found
    if environment_prompts and cfg.prompt_column not in columns:
        columns = columns | {cfg.prompt_column}  # TRL's multi-environment rows: reset() gives the prompt
    return _column_problems(cfg, columns, where, reward_columns) + row_problems(cfg, rows, where, prompts_per_batch)


def row_problems(cfg: DictConfig, rows: int | None, where: str, prompts_per_batch: int | None) -> list[Problem]:
    """TRL's sampler drops a generation batch it cannot fill with distinct prompts, so fewer rows
    than one batch takes would end the run at step 0 as if it had completed. The driver asks with
    the rows of a local file; the worker again with the dataset it built (hub data, filtering)."""
    if prompts_per_batch is None:
        return []
    capped = cfg.num_samples is not None and (rows is None or cfg.num_samples < rows)
    usable = cfg.num_samples if capped else rows
    if usable is None or usable >= prompts_per_batch:
        return []
    why = f"one generation batch takes {prompts_per_batch} distinct prompts; the run would train 0 steps"
    if capped:
        return [
            Problem(
                "data.num_samples",
                f"{usable} prompts are too few: {why}",
                f"data.num_samples={prompts_per_batch} or more, or a smaller "
                "per_device_train_batch_size/steps_per_generation",
            )
        ]
    return [
        Problem(
            "data.path",
            f"{where} holds {usable} prompts, too few: {why}",
            "give more rows, or a smaller per_device_train_batch_size/steps_per_generation",
        )
    ]


def _column_problems(
    cfg: DictConfig, columns: set[str], where: str, reward_columns: dict[str, list[str]]
) -> list[Problem]:
    listed = ", ".join(sorted(columns))
    problems = []
    if cfg.prompt_column not in columns:
        problems.append(
            Problem(
                "data.prompt_column",
                f"'{cfg.prompt_column}' is not a column of {where} (columns: {listed})",
                f"set data.prompt_column to the column holding prompts: one of {listed}",
            )
        )
    if cfg.answer_column != "answer" and cfg.answer_column in columns and "answer" in columns:
        problems.append(
            Problem(
                "data.answer_column",
                f"renaming '{cfg.answer_column}' to 'answer' would replace the existing 'answer' column of {where}",
                "rename one of the columns in the data",
            )
        )
    renamed = {"prompt": cfg.prompt_column, "answer": cfg.answer_column}
    available = {new for new, old in renamed.items() if old in columns} | (columns - set(renamed.values()))
    needed_by: dict[str, list[str]] = {}
    for reward, needed in reward_columns.items():
        for column in needed:
            needed_by.setdefault(column, []).append(f"data.rewards.{reward}")
    for column, rewards in needed_by.items():
        if column in available:
            continue
        if column == "answer":
            problems.append(
                Problem(
                    "data.answer_column",
                    f"'{cfg.answer_column}' is not a column of {where} (columns: {listed}), and {', '.join(rewards)} "
                    "need the reference answers",
                    f"set data.answer_column to the column holding them, or remove {', '.join(rewards)}",
                )
            )
        else:
            problems.append(
                Problem(
                    rewards[0],
                    f"takes an argument `{column}`, which no column of {where} provides (columns: {listed})",
                    f"add a column '{column}' to the data, or bind it in the config: {rewards[0]}.{column}=...",
                )
            )
    return problems


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
        numbered = list(enumerate(rows, start=1))
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
    columns = {key for _, row in numbered for key in row}
    lacking = [n for n, row in numbered if prompt_column not in row]
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
    path = Path(cfg.path).expanduser() if cfg.loader != "toy_math" and cfg.path else None
    if path is None or not path.exists():
        return None
    if path.suffix in (".json", ".jsonl"):
        text = path.read_text(errors="replace")
        rows = (
            json.loads(text)
            if text.lstrip().startswith("[")
            else [json.loads(ln) for ln in text.splitlines() if ln.strip()]
        )
        values = [row[column] for row in rows if column in row]
        return set(map(str, values)) if values else None
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
