"""Stage 1, the config: the schema every run is checked against (TRL's GRPOConfig generated verbatim),
the checks that turn bad input into one Problem per key, model=auto, and resume's allowed overrides."""
