"""The run's reward functions before launch: each `data.rewards.<name>._target_` imports, takes TRL's keyword
arguments, and names the dataset columns it needs (reward_columns: what the data's checks look for)."""

import inspect

from omegaconf import DictConfig

from grpo_exp import Problem, import_failure, locate
from grpo_exp.config import env


def active_rewards(data: DictConfig) -> dict:
    """data.rewards without the entries set to null: `data.rewards.<name>=null` removes a reward an
    option ships (an imported recipe replaces data=hf's rewards this way)."""
    return {name: node for name, node in data.rewards.items() if node is not None}


def check_rewards(cfg: DictConfig) -> list[Problem]:
    problems = []
    rewards = active_rewards(cfg.data)
    if not rewards and not env.owns_reward(cfg):  # an environment with get_reward is TRL's other reward source
        problems.append(
            Problem(
                "data.rewards",
                "no reward function is configured",
                "add one: +data.rewards.correctness._target_=grpo_exp.training.rewards.correctness, or give the set "
                "whole: 'data.rewards={correctness: {_target_: grpo_exp.training.rewards.correctness}}', or an "
                "environment with get_reward() (env.factory='{_target_: pkg.MyEnv}')",
            )
        )
    for name, node in rewards.items():
        target = node.get("_target_") if isinstance(node, DictConfig) else None
        if not callable(locate(target)):
            problems.append(
                Problem(
                    f"data.rewards.{name}._target_",
                    f"'{target}' is not an importable function ({import_failure(str(target))})",
                    "name a function such as grpo_exp.training.rewards.correctness",
                )
            )
    weights = cfg.trainer.reward_weights
    if weights is not None and len(weights) != len(rewards):
        problems.append(
            Problem(
                "trainer.reward_weights",
                f"has {len(weights)} weights for {len(rewards)} reward functions ({', '.join(rewards)})",
                f"give one weight per data.rewards entry (trainer.reward_weights=[{', '.join(['1.0'] * len(rewards))}])"
                ", or trainer.reward_weights=null (an environment's get_reward() takes weight 1 after them)",
            )
        )
    return problems


# Arguments TRL itself passes to every reward function; any other required one is a dataset column.
TRL_REWARD_ARGUMENTS = {
    "prompts",
    "completions",
    "completion_ids",
    "trainer_state",
    "log_extra",
    "log_metric",
    "environments",
}


def reward_columns(cfg: DictConfig) -> dict[str, list[str]]:
    """Per reward name, the dataset columns it needs: its required parameters that TRL does not
    supply and the config does not bind (TRL passes every column as a keyword argument)."""
    needed = {}
    for name, node in active_rewards(cfg.data).items():
        func = locate(node._target_)
        if not callable(func):
            continue  # check_rewards reports it
        bound = set(node) - {"_target_"}
        params = inspect.signature(func).parameters.values()
        needed[name] = [
            p.name
            for p in params
            if p.default is inspect.Parameter.empty
            and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
            and p.name not in TRL_REWARD_ARGUMENTS
            and p.name not in bound
        ]
    return needed
