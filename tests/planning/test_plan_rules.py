"""Stage 2 of the checks (planning/plan_rules.py): the batch rules against the world size."""

from tests.helpers import problem_keys, problems


def test_batch_rule_is_reported_beside_other_problems():
    found = problem_keys(problems("trainer.num_generations=3", "trainer.temperature=0"))
    assert found == ["trainer.temperature", "trainer.num_generations"]


def test_batch_rule_skipped_when_its_inputs_are_invalid():
    assert problem_keys(problems("trainer.per_device_train_batch_size=0", "trainer.num_generations=3")) == [
        "trainer.per_device_train_batch_size"
    ]


def test_a_calibration_file_that_cannot_be_read_is_named(tmp_path):
    (tmp_path / "bad.json").write_text('{"no": "factors"}')
    for path in (tmp_path / "missing.json", tmp_path / "bad.json"):
        found = problems(f"preflight.calibration={path}")
        assert problem_keys(found) == ["preflight.calibration"] and "cannot be read" in found[0].why
