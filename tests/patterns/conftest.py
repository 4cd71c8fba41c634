"""Helpers for pattern tests: template configs pointed at the session's demo index, snapshot comparison."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from modular_rag import template_path

SNAPSHOTS = Path(__file__).parent / "snapshots"


def template(pattern: str, demo_dir: Path | None = None, **overrides: Any) -> dict[str, Any]:
    """A pattern's template as a dict, on the demo index (or in memory), with top-level overrides merged one level
    deep (``operators={"judge": ...}`` replaces only that slot)."""
    config = yaml.safe_load(template_path(pattern).read_text())
    config["providers"]["vectorstore"] = (
        {"name": "chroma", "path": str(demo_dir), "collection": "demo"}
        if demo_dir
        else {"name": "chroma", "in_memory": True}
    )
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    return config


def snapshot(name: str, mermaid: str) -> str:
    """The stored snapshot. A missing one fails, unless UPDATE_SNAPSHOTS=1 writes it (then review it in the diff)."""
    file = SNAPSHOTS / f"{name}.mmd"
    if os.environ.get("UPDATE_SNAPSHOTS") == "1":
        file.write_text(mermaid)
    if not file.exists():
        raise AssertionError(f"no snapshot {file.name}; run with UPDATE_SNAPSHOTS=1 and review the drawing")
    return file.read_text()
