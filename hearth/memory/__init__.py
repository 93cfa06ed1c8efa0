"""The memory and roofline planner behind `hearth plan`: exact weight bytes, KV bytes per token for
every KV format, runtime and activation overhead, what fits, and the decode / prefill ceilings.

Pure arithmetic over plain records; torch is imported only by `bandwidth` (the measurement of this
machine), never by the planner itself."""

from hearth.errors import PlanError  # noqa: F401  (defined with the other user errors; formats raises it too)
