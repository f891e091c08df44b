"""data=none: no dataset; the environment's reset() gives every prompt (TRL's environment_factory without a
train_dataset: it builds placeholder rows of an empty user message, as many as a generation batch takes)."""

PROMPTS_FROM_ENVIRONMENT = True
SPLITS = False


def load(data, seed: int) -> None:
    return None


def scan(data) -> tuple[set[str], None, str]:
    return {"prompt"}, None, "data=none (TRL's rows hold only the prompt)"
