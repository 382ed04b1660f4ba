"""The `shoal` command: one module per verb, `main.py` dispatches."""
