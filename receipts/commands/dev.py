"""``receipts dev``: not built yet."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping


def configure(parser: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    print("receipts dev: not available in this version", file=sys.stderr)
    return 1
