"""`python -m grpo_exp.dashboard`: the public command; its code is grpo_exp/results/dashboard.py."""

from grpo_exp.results.dashboard import main

if __name__ == "__main__":
    raise SystemExit(main())
