"""The measured GRPOTrainer: every method it overrides is one the installed trl has."""

import pytest

pytestmark = pytest.mark.slow  # importing trl: ~4 s of make test-fast's budget


@pytest.fixture(scope="module")
def measured_trainer():
    """Imported by the tests, not at collection: it imports trl (~5 s), in every xdist worker otherwise."""
    from grpo_exp.training import measured_trainer

    return measured_trainer


def test_the_installed_trl_has_every_method_the_measured_trainer_overrides(measured_trainer):
    """An upgrade that renames one of GRPOTrainer's private methods fails here, naming it, not inside every worker."""
    from trl import GRPOTrainer

    assert measured_trainer.missing_hooks(GRPOTrainer) == []

    kept = {name: staticmethod(lambda: None) for name in measured_trainer.PHASE_HOOKS if name != "_tool_call_loop"}
    renamed = type("Renamed", (), kept)  # what a renamed method looks like to the check
    assert measured_trainer.missing_hooks(renamed) == ["_tool_call_loop"]


def test_the_measured_trainer_overrides_every_hooked_method_and_patches_nothing(measured_trainer):
    """Each PHASE_HOOKS method is overridden in the subclass (and calls TRL's own through super()); nothing
    is set on a trainer instance."""
    import inspect

    from trl import GRPOTrainer

    cls = measured_trainer.MeasuredGRPOTrainer
    assert issubclass(cls, GRPOTrainer)
    for name in measured_trainer.PHASE_HOOKS:
        assert name in cls.__dict__, f"{name} is not overridden"
        assert f"super().{name}(" in inspect.getsource(cls.__dict__[name])
    assert "setattr" not in inspect.getsource(measured_trainer)
