"""Stage 2, the plan: which process runs where (placement) and what each GPU will hold (planner).
Pure Python: nothing here imports torch, transformers or trl, so planning a config takes under a second."""
