"""Print ``name==X`` for every ``name>=X`` floor that pyproject.toml declares, one per line.

CI installs exactly these into a second virtual environment and runs the store and plugin tests
with them (``.ci/run``), so a floor is a version that was tested, not a guess; because the pins
are generated from pyproject.toml they cannot drift from it.

    python scripts/floor_pins.py [--extra test] [--skip triton] [--pyproject PATH]

Requirements whose environment marker does not hold for the running Python are left out. A
requirement without a ``>=`` floor is an error: every dependency must declare the lowest
version it works with.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

try:
    import tomllib
except ImportError:  # pragma: no cover - Python 3.10
    import tomli as tomllib

try:
    from packaging.markers import Marker
except ImportError:  # a bare venv: pip always vendors packaging
    from pip._vendor.packaging.markers import Marker

# name[extras] >= floor, then an optional upper bound (",<3.7") and an optional marker
_REQ = re.compile(
    r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*>=\s*([^,;\s]+)\s*(?:,\s*<[^,;]+)?\s*(?:;(.*))?$"
)


def floor_pins(pyproject: Path, extras: list[str], skip: set[str]) -> list[str]:
    """``["pytest==8.0.0", ...]`` for the base dependencies and the given extras."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    reqs = list(project.get("dependencies", []))
    for extra in extras:
        if extra not in project.get("optional-dependencies", {}):
            raise SystemExit(f"floor_pins: no extra {extra!r} in {pyproject}")
        reqs += project["optional-dependencies"][extra]
    pins: dict[str, str] = {}
    for req in reqs:
        m = _REQ.match(req)
        if not m:
            raise SystemExit(f"floor_pins: {req!r} in {pyproject} has no `>=` floor; declare one")
        name, _extra, version, marker = m.groups()
        if marker and not Marker(marker.strip()).evaluate():
            continue
        if name.lower() in skip:
            continue
        pins[name.lower()] = f"{name}=={version}"
    return list(pins.values())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = Path(__file__).resolve().parent.parent / "pyproject.toml"
    ap.add_argument("--pyproject", type=Path, default=default)
    ap.add_argument("--extra", action="append", default=[], help="also pin this extra's floors")
    ap.add_argument("--skip", action="append", default=[], help="leave this package out (pinned elsewhere)")
    args = ap.parse_args(argv)
    print("\n".join(floor_pins(args.pyproject, args.extra, {s.lower() for s in args.skip})))
    return 0


if __name__ == "__main__":
    sys.exit(main())
