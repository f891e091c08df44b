"""`python -m grpo_exp.compare`: the public command; its code is grpo_exp/results/compare.py."""

from grpo_exp.results.compare import main

if __name__ == "__main__":
    raise SystemExit(main())
