"""The workbench: ``modular-rag ui``, a web page over the kit's own runs (Ask, Compare, Feedback, Evaluate).

:func:`create_app` is the ASGI app (Starlette, the ``ui`` extra); :class:`Workbench` is what it asks of the kit, in
Python; feedback is kept beside the index and exported as a labelled test set (:func:`export_feedback`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from modular_rag.ui.app import create_app
    from modular_rag.ui.feedback import FeedbackStore, export_feedback
    from modular_rag.ui.workbench import Workbench

__all__ = ["create_app", "Workbench", "FeedbackStore", "export_feedback"]

_LAZY = {
    "create_app": "modular_rag.ui.app",
    "Workbench": "modular_rag.ui.workbench",
    "FeedbackStore": "modular_rag.ui.feedback",
    "export_feedback": "modular_rag.ui.feedback",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
