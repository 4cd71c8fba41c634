"""Pydantic validation errors as one-line :class:`~modular_rag.errors.ConfigError` naming the dotted config path
(``operators.retrieve.params.k: Input should be greater than 0``), and :func:`validate_params`, which every
check of a params mapping goes through."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from modular_rag.errors import ConfigError

if TYPE_CHECKING:
    from modular_rag.registry import Port

__all__ = ["format_validation_error", "moved_to_slot", "validate_params"]


def _data_path(loc: tuple[Any, ...], data: Any) -> list[str]:
    """The parts of a pydantic error location that exist in the input data; union tags and validator names that
    pydantic inserts (``OperatorSpec``, ``local``, ``function-wrap[...]``) are dropped."""
    parts: list[str] = []
    node = data
    for part in loc:
        if (isinstance(node, Mapping) and part in node) or (
            isinstance(node, list | tuple) and isinstance(part, int) and 0 <= part < len(node)
        ):
            node = node[part]
            parts.append(str(part))
        elif isinstance(node, Mapping | list | tuple) and isinstance(part, str) and not _is_inserted(part):
            parts.append(part)  # a missing field or an unknown key: name it, then stop descending
            node = None
        elif node is None and not _is_inserted(part):
            parts.append(str(part))
    return parts


def _is_inserted(part: Any) -> bool:
    text = str(part)
    return text.startswith(("function-", "list[", "dict[")) or text[:1].isupper() or text in _UNION_TAGS


_UNION_TAGS = frozenset({"local", "openai", "minilm", "sentence_transformers", "chroma", "milvus"})


def format_validation_error(error: ValidationError, prefix: str = "", data: Any = None) -> ConfigError:
    """Turn a pydantic error into a one-line :class:`ConfigError` naming the dotted path.

    Args:
        error: The pydantic error.
        prefix: Dotted path of the validated object inside the whole config (``operators.retrieve.params``).
        data: The validated input, used to tell real path elements from the union tags pydantic inserts.
    """
    errors = error.errors(include_url=False)
    # a union reports one error per branch; the branch whose type does not even match the input is noise
    mismatch = {"list_type", "dict_type", "model_type", "model_attributes_type", "union_tag_invalid"}
    first = min(errors, key=lambda e: (e["type"] in mismatch and len(errors) > 1, -len(e["loc"])))
    first = next((e for e in errors if e["type"] == "extra_forbidden"), first)
    parts = _data_path(tuple(first["loc"]), data) if data is not None else [str(p) for p in first["loc"]]
    path = ".".join(p for p in [prefix, *parts] if p)
    message = first["msg"]
    if first["type"] == "extra_forbidden":
        message = "unknown key (not allowed here)"
    elif "input" in first and first["type"] not in ("missing",) and not isinstance(first["input"], dict | list):
        message = f"{message} (got {first['input']!r})"
    if message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    more = len(errors) - 1
    if more:
        message += f" (+{more} more error{'s' if more > 1 else ''})"
    return ConfigError(path, message)


def validate_params(model: type[BaseModel], params: Mapping[str, Any], path: str) -> BaseModel:
    """Validate a params mapping against a model, raising :class:`ConfigError` with ``path`` on failure."""
    try:
        return model.model_validate(dict(params))
    except ValidationError as exc:
        raise format_validation_error(exc, path, dict(params)) from None


def moved_to_slot(keys: Sequence[str], slot: str, spec: str | Mapping[str, Any], port: Port) -> ValueError:
    """The error for pattern params that became a slot's operator (the kit was never released, so the old spelling
    is refused rather than translated): it names the keys, the config line that replaces them and the operators
    the slot takes (from the registry).

    Args:
        keys: The params keys that moved.
        slot: The slot that holds what they chose.
        spec: The operator (name, or ``{"name": ..., "params": ...}``) the old keys meant.
        port: The slot's port.

    Returns:
        A ``ValueError`` for the params model's validator to raise (the config path is added by validation).
    """
    import yaml

    from modular_rag.registry import operators_for

    line = "operators: " + yaml.safe_dump({slot: spec}, default_flow_style=True, sort_keys=False).strip()
    return ValueError(
        f"{', '.join(keys)}: no longer params of the pattern; the {slot} slot holds this choice now: "
        f"remove {'them' if len(keys) > 1 else 'it'} and write {line} ({port.value} operators: "
        f"{', '.join(operators_for(port))})"
    )
