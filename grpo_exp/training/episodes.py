"""An agentic run's episodes as grpo_exp reads them around TRL's tool loop (measured_trainer.py calls these):
which episodes lost a tool result for want of room, and environment resets timed as the tools phase. Plain
Python over TRL's message lists and factories: no trl import.
"""

import functools
import itertools


def dropped_results(episodes: list[list[dict]], max_iterations: int) -> int:
    """Episodes whose last tool calls got no result although rounds were left: TRL rolled the results back
    because they would not fit max_completion_length (or the model's positions) and ended the episode there."""

    def unanswered_last_call(messages: list[dict]) -> bool:
        return bool(messages) and messages[-1].get("role") == "assistant" and bool(messages[-1].get("tool_calls"))

    def answered_rounds(messages: list[dict]) -> int:
        return sum(1 for a, b in itertools.pairwise(messages) if a.get("tool_calls") and b.get("role") == "tool")

    return sum(
        1 for messages in episodes if unanswered_last_call(messages) and answered_rounds(messages) < max_iterations
    )


def measured_resets(environment_factory, phases):
    """environment_factory (one callable or {name: callable}) whose instances' reset() is the tools phase: the
    instance's own attribute shadows the class's method, so TRL (which calls instance.reset and lists tools on
    the class) sees the same environment."""

    def measured(factory):
        @functools.wraps(factory)
        def build():
            instance = factory()
            reset = instance.reset

            @functools.wraps(reset)
            def measured_reset(*args, **kwargs):
                with phases.phase("tools"):
                    return reset(*args, **kwargs)

            try:
                instance.reset = measured_reset
            except AttributeError:  # __slots__ or a frozen class: its resets stay in generate
                pass
            return instance

        return build

    if isinstance(environment_factory, dict):
        return {name: measured(f) for name, f in environment_factory.items()}
    return measured(environment_factory)
