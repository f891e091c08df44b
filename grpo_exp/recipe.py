"""`python -m grpo_exp.recipe`: the public command; its code is grpo_exp/config/recipe.py."""

from grpo_exp.config.recipe import main

if __name__ == "__main__":
    raise SystemExit(main())
