"""The command line (spec 10): ``python -m app [serve|...]``, one module per command."""
