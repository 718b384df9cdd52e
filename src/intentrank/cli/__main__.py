"""``python -m intentrank.cli``."""

from intentrank.cli import app

if __name__ == "__main__":
    app()
