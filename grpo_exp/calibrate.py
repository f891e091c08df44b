"""`python -m grpo_exp.calibrate`: the public command; its code is grpo_exp/planning/calibration.py."""

from grpo_exp.planning.calibration import main

if __name__ == "__main__":
    raise SystemExit(main())
