"""The JSON Schema of flow configs, with every registered operator's and pattern's parameters, so editors validate
YAML as it is typed (``modular-rag schema > modular-rag.schema.json``; templates point at that file with a
``yaml-language-server`` header).

:func:`load_config` stays the authority: the schema describes the same models, but cross-field rules (a slot's port,
a pattern's loop bounds against its operators) are only checked there.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel

from modular_rag.config import FlowConfig, OperatorSpec
from modular_rag.registry import catalogue, get_pattern, load_plugins, pattern_names

__all__ = ["config_schema", "SCHEMA_FILE"]

SCHEMA_FILE = "modular-rag.schema.json"
"""The file name templates expect the schema under, next to the YAML file."""


def _inline(model: type[BaseModel], defs: dict[str, Any]) -> dict[str, Any]:
    """A model's schema with its ``$defs`` moved into the shared ``defs`` (refs stay valid at the root)."""
    schema = copy.deepcopy(model.model_json_schema())
    defs.update(schema.pop("$defs", {}))
    return schema


def config_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a flow config file.

    Each operator entry is a name (``"none"`` disables the slot), or a mapping whose ``params`` are checked against
    the named operator's parameters; a list chains operators. ``params`` at the top level are checked against the
    named pattern's parameters.
    """
    load_plugins()
    schema = copy.deepcopy(FlowConfig.model_json_schema())
    defs: dict[str, Any] = schema.setdefault("$defs", {})
    step_fields = {k: v for k, v in _inline(OperatorSpec, defs)["properties"].items() if k not in ("name", "params")}
    variants: list[dict[str, Any]] = [{"type": "string", "description": "an operator name, or 'none'"}]
    seen: set[str] = set()
    for info in catalogue():
        params = _inline(info.params, defs)
        key = f"{info.name}:{info.port.value}"
        if key in seen:
            continue
        seen.add(key)
        variants.append(
            {
                "type": "object",
                "description": f"{info.name} ({info.port.value}): {info.summary}",
                "properties": {"name": {"const": info.name}, "params": params, **step_fields},
                "required": ["name"],
                "additionalProperties": False,
            }
        )
    variants.append({"type": "object", "properties": {"name": {"const": "none"}}, "required": ["name"]})
    operator = {"anyOf": variants}
    schema["properties"]["operators"] = {
        "type": "object",
        "description": "slot -> operator (or a list of operators, chained)",
        "additionalProperties": {"anyOf": [operator, {"type": "array", "items": operator}]},
    }
    schema["properties"]["pattern"] = {"enum": pattern_names(), "description": "the flow pattern"}
    schema["allOf"] = [
        {
            "if": {"properties": {"pattern": {"const": name}}, "required": ["pattern"]},
            "then": {"properties": {"params": _inline(get_pattern(name).params, defs)}},
        }
        for name in pattern_names()
    ]
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "modular-rag flow config"
    return schema
