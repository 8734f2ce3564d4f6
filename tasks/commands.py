"""Task subcommands of the ``zoo`` command (``train``, ...), registered by the task runners."""

from __future__ import annotations

import argparse


def add_task_commands(sub: argparse._SubParsersAction) -> None:
    """Add the task runners' subcommands to the parser (none yet)."""
