"""`colo-sim convert`: placeholder, replaced below."""

from __future__ import annotations


def convert_main(argv: list[str]) -> int:
    raise NotImplementedError
