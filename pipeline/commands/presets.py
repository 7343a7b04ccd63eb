"""`semworld presets`: placeholder registration; filled in by the work that owns this command."""

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Add this group's parsers to the CLI (nothing yet)."""
