"""launcher=local: this node's share of the plan started here (launcher.py). It has no options of its own."""
