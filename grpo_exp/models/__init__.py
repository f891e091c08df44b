"""A model's numbers: what the planner and the tiny-model builder know about an architecture, read from its
config.json without loading weights.

    model_info       architecture numbers from config.json (model=auto fills model.* before anything is checked)
    model_families   the families GRPO trains now (mixture of experts, sliding windows, linear attention layers)
    model_option     `grpo-exp model-info`: those numbers written as an option of the model group

The config (config/model_schema.py) says which numbers a run carries and their types; this package finds them.
"""
