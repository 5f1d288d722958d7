"""``python -m app``: see :mod:`app.cli.main`."""

from app.cli.main import main

if __name__ == "__main__":
    main()
