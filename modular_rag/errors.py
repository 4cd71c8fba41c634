"""The kit's exception hierarchy.

Every error the kit raises on purpose derives from :class:`ModularRagError`, so callers (and the CLI) can catch
one type. Messages name what was wrong and what is allowed; they never contain secrets.
"""

from __future__ import annotations

__all__ = [
    "ModularRagError",
    "ConfigError",
    "RegistryError",
    "ProviderError",
    "MissingDependencyError",
    "IndexingError",
    "SourceNotFoundError",
    "OperatorError",
    "OperatorTimeout",
    "JudgeError",
    "DatasetError",
]


class ModularRagError(Exception):
    """Base class of every error the kit raises on purpose. ``exit_code`` is the command line's status for it:
    2 for bad input (a config, a name, a path or a dataset the user gave), 1 for a failure while running."""

    exit_code = 1


class ConfigError(ModularRagError, ValueError):
    """A flow config (or a command-line option) is invalid.

    Args:
        path: Dotted path of the offending config entry (``operators.retrieve.params.k``); empty for the root.
        message: What is wrong and what is allowed.
    """

    exit_code = 2

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        self.message = message
        super().__init__(f"{path}: {message}" if path else message)


class RegistryError(ModularRagError, KeyError):
    """An operator, pattern or provider name is unknown, or registered twice."""

    exit_code = 2

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class ProviderError(ModularRagError, RuntimeError):
    """A model, index or server could not be built, started or reached."""


class MissingDependencyError(ModularRagError, ImportError):
    """An optional dependency is not installed; the message names the extra or command that installs it."""


class IndexingError(ModularRagError, RuntimeError):
    """The corpus could not be indexed (the reason names the file or setting)."""


class SourceNotFoundError(IndexingError, FileNotFoundError):
    """A file or folder given to index does not exist."""

    exit_code = 2


class OperatorError(ModularRagError, RuntimeError):
    """An operator failed while the flow ran; the message names the slot and the operator.

    Args:
        slot: The flow slot (graph node) the operator ran in.
        operator: The registered operator name.
        message: What went wrong.
    """

    def __init__(self, slot: str, operator: str, message: str) -> None:
        self.slot = slot
        self.operator = operator
        super().__init__(f"{slot} ({operator}): {message}")


class OperatorTimeout(OperatorError, TimeoutError):
    """An operator exceeded its configured per-step timeout."""


class JudgeError(ModularRagError, RuntimeError):
    """A judge cannot decide with what the model returned (for example no token log-probabilities)."""


class DatasetError(ModularRagError, ValueError):
    """An evaluation dataset folder is missing files or has malformed rows."""

    exit_code = 2
