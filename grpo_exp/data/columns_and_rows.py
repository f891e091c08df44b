"""The data a run reads, checked before launch whatever its loader (data/__init__.py): its columns (a prompt column,
the columns the reward functions take), its rows (fewer than one generation batch takes would end the run at step 0
as if it had completed); the worker asks row_problems again of the dataset it built (hub data, filtering).
"""

from omegaconf import DictConfig

from grpo_exp import Problem
from grpo_exp import data as loaders


def check(
    data: DictConfig,
    reward_columns: dict[str, list[str]],
    prompts_per_batch: int | None = None,
    environment_prompts: bool = False,
) -> list[Problem]:
    """Problems with the data the run would read, found before launch: what its loader's scan finds (unreadable
    files, a user's loader that fails or returns no dataset), a missing prompt column, columns the reward functions
    need, fewer rows than one generation batch takes (`prompts_per_batch` distinct prompts, when the batch is
    known). `environment_prompts`: an environment's reset() gives the prompt of a row that has none (TRL)."""
    found = loaders.scan(data)
    if isinstance(found, list):
        return found
    columns, rows, where = found
    if columns is None:  # a hub id or a folder of data files: read in the worker (data.num_samples bounds it)
        return row_problems(data, None, where, prompts_per_batch)
    if environment_prompts and data.prompt_column not in columns:
        columns = columns | {data.prompt_column}  # TRL's multi-environment rows: reset() gives the prompt
    return _column_problems(data, columns, where, reward_columns) + row_problems(data, rows, where, prompts_per_batch)


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
    source = "data.path" if loaders.reads_path(cfg) else "data.loader"  # a file's rows, or the loader's own
    return [
        Problem(
            source,
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
