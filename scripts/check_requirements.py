"""Exits 0 when every pin of a requirements file is installed in this Python,
1 otherwise: scripts/install-deps.sh then skips pip (and the network)."""
from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, version


def pinned(line: str) -> tuple[str, str] | None:
    """('torch', '2.11.*') for 'torch==2.11.*  # why'; None for comments."""
    text = line.split("#", 1)[0].strip()
    if not text:
        return None
    name, sep, pin = text.partition("==")
    if not sep:
        raise SystemExit(f"{text!r}: requirements.txt pins with == only")
    return name.strip(), pin.strip()


def satisfied(name: str, pin: str) -> bool:
    try:
        have = version(name).split("+")[0]
    except PackageNotFoundError:
        return False
    prefix = pin[:-1] if pin.endswith("*") else pin
    return have.startswith(prefix) if pin.endswith("*") else have == pin


def main(path: str) -> int:
    with open(path) as f:
        pins = [p for p in map(pinned, f) if p]
    missing = [f"{n}=={p}" for n, p in pins if not satisfied(n, p)]
    for m in missing:
        print(f"check_requirements: {m} is not installed", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
