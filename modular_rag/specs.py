"""The pieces of a config that name an operator: :class:`OperatorSpec` (a slot's operator with its step controls)
and :class:`Condition` (a ``skip_when`` test), with :class:`StrictModel`, the base of every config model (unknown
keys are refused). They sit below :mod:`modular_rag.config` and :mod:`modular_rag.resolve`, which both use them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

__all__ = ["StrictModel", "ConditionOp", "Condition", "OperatorSpec"]


class StrictModel(BaseModel):
    """Base of the config models: unknown keys are refused, so a typo names the key it did not expect."""

    model_config = ConfigDict(extra="forbid", frozen=False)


ConditionOp = Literal["empty", "nonempty", "eq", "ne", "gt", "ge", "lt", "le", "in", "contains"]


class Condition(StrictModel):
    """A test on one state key, for ``skip_when``: ``{key: route, op: eq, value: exact}``.

    ``key`` may be dotted (``answer.refused``); a ``len:`` prefix tests the length (``len:candidates``).
    """

    key: str = Field(..., min_length=1)
    op: ConditionOp
    value: Any = None

    @model_validator(mode="after")
    def _value_needed(self) -> Condition:
        if self.op not in ("empty", "nonempty") and self.value is None:
            raise ValueError(f"op {self.op!r} needs a value")
        return self


class OperatorSpec(StrictModel):
    """One operator in a slot, with its step controls."""

    name: str = Field(..., min_length=1, description="registered operator name, or 'none' to disable the slot")
    params: dict[str, Any] = Field(default_factory=dict)
    enabled: bool = Field(True, description="false disables the slot without deleting its settings")
    skip_when: Condition | None = Field(None, description="skip this step when the condition holds")
    timeout_s: float | None = Field(None, gt=0, le=3600, description="per-step timeout, seconds")
    on_error: Literal["fail", "skip"] = Field("fail", description="'skip' records the error and goes on")

    _object: Any = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value

    @classmethod
    def from_object(cls, obj: Any) -> OperatorSpec:
        """A spec wrapping a Python object used in a slot (a LangChain retriever, or an ``op(state)`` callable)."""
        spec = cls(name=f"<{getattr(obj, '__name__', type(obj).__name__)}>")
        spec._object = obj
        return spec

    @property
    def object(self) -> Any:
        """The Python object this spec wraps, or ``None`` for a named operator."""
        return self._object

    @property
    def active(self) -> bool:
        """Whether the slot runs at all (enabled and not ``none``)."""
        return self.enabled and self.name != "none"
