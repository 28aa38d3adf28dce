"""``python -m statemachine.cli``: the same as the ``trial-replay`` console script."""

from statemachine.cli.app import run

if __name__ == "__main__":
    run()
