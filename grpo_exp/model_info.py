"""`python -m grpo_exp.model_info`: the public command; its code is grpo_exp/config/model_info.py."""

from grpo_exp.config.model_info import main

if __name__ == "__main__":
    raise SystemExit(main())
