"""The environments grpo_exp ships (conf/env/): what an agentic GRPO run's policy can call, offline.

    env=calculator    a tool: `calculator(expression)` evaluates the arithmetic the math prompts ask about
    env=number_game   an environment: reset() picks a secret number and tells the model so, `guess(number)`
                      answers higher, lower or correct, and get_reward() scores the episode from the game's state

TRL reads a tool's name, type hints and Google-style docstring to describe it to the model, calls it with the
arguments the model wrote, and feeds its result back as a tool message. Every public method of an environment
but reset and get_reward is a tool of that environment (trl GRPOTrainer(environment_factory=...)). These run
inside the training processes, with the user's rights.
"""

import ast
import operator

_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression of whole numbers with +, - and *.

    Args:
        expression: The expression to evaluate, such as "17 + 25".
    """
    return str(_evaluate(ast.parse(expression.strip(), mode="eval").body))


def _evaluate(node) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if max(abs(left), abs(right)) > 10**6:
            raise ValueError("numbers above a million are not computed here")
        return _OPERATORS[type(node.op)](left, right)
    raise ValueError(f"not whole-number arithmetic with +, - and *: {ast.unparse(node)}")


class NumberGame:
    """Find a secret whole number from `low` to `high`: each guess is answered higher, lower or correct."""

    def __init__(self, low: int = 0, high: int = 99):
        self.low, self.high = low, high
        self.secret, self.found = low, False
        self.last: int | None = None

    def reset(self, answer=None, **row) -> str:
        """A new game per episode; the secret comes from the row's answer (the same game for every completion
        of one prompt, so a group is compared on the same game). Returns what is appended to the prompt."""
        try:
            number = int(float(answer))
        except (TypeError, ValueError):
            number = sum(map(ord, str(row.get("prompt", ""))))
        self.secret = self.low + number % (self.high - self.low + 1)
        self.last, self.found = None, False
        return f"\nI picked a number from {self.low} to {self.high}: find it with guess."

    def guess(self, number: int) -> str:
        """Guess the secret number.

        Args:
            number: The guess, a whole number in the game's range.
        """
        self.last = int(number)
        if self.last == self.secret:
            self.found = True
            return "correct"
        return "higher" if self.secret > self.last else "lower"

    def get_reward(self) -> float:
        """1.0 when the number was found; otherwise up to 0.5 for how close the last guess came, 0 without one."""
        if self.found:
            return 1.0
        if self.last is None:
            return 0.0
        return 0.5 * (1 - abs(self.last - self.secret) / (self.high - self.low + 1))
