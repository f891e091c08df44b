"""The ranges a number may take, as (test, what it must be) pairs: config/values.py's table and each launcher's
config.py (launching/launchers/<name>/config.py) are written with them. Imports nothing: a launcher's options read it
while the schema is being built."""


def at_least(low, high=2**53):
    return (lambda v: low <= v <= high), (f">= {low}" if high == 2**53 else f"in [{low}, {high}]")


def above(low):
    return (lambda v: low < v <= 2**53), f"> {low}"


def within(low, high, high_open=False):
    if high_open:
        return (lambda v: low <= v < high), f"in [{low}, {high})"
    return (lambda v: low <= v <= high), f"in [{low}, {high}]"
