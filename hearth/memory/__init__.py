"""The memory and roofline planner behind `hearth plan`: exact weight bytes, KV bytes per token for
every KV format, runtime and activation overhead, what fits, and the decode / prefill ceilings.

Pure arithmetic over plain records; torch is imported only by `bandwidth` (the measurement of this
machine), never by the planner itself."""

from hearth.errors import HearthError


class PlanError(HearthError):
    """A plan request that cannot be answered: unknown device, impossible numbers, bad description."""
