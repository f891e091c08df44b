"""Tools and environments for the agentic tests: well-formed ones that misbehave at run time (the tiny
tools model calls `calculator`, so each is named so), and malformed ones the driver must refuse."""

import os
import time


class HangingCalculator:
    """An environment whose calculator never returns on rank 1: drives the stall watchdog through a tool."""

    def reset(self, **row) -> None:
        return None

    def calculator(self, expression: str) -> str:
        """Evaluate an arithmetic expression.

        Args:
            expression: The expression to evaluate, such as "17 + 25".
        """
        if int(os.environ.get("RANK", "0")) == 1:
            time.sleep(600)
        return "0"


class FailingCalculator:
    """An environment whose calculator always raises: every call is a failed call, the run goes on."""

    def reset(self, **row) -> None:
        return None

    def calculator(self, expression: str) -> str:
        """Evaluate an arithmetic expression.

        Args:
            expression: The expression to evaluate, such as "17 + 25".
        """
        raise RuntimeError(f"this calculator is broken ({expression})")


def undocumented(expression):
    return expression


class NoReset:
    def look(self, where: str) -> str:
        """Look somewhere.

        Args:
            where: Where to look.
        """
        return where


class Undescribed:
    def reset(self, **row) -> None:
        return None

    def poke(self, x) -> str:
        return "ouch"
