"""A served model's card, as /v1/models lists it and /v1/models/{id} answers (hearth.api.model_pool's
ModelPool.cards lists one a name)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hearth.api.model_pool import _Slot


def card(slot: _Slot, name: str) -> dict:
    served, spec = slot.served, slot.spec
    adapter = spec.adapters.get(name)
    return {"id": name, "object": "model", "created": slot.created, "owned_by": "hearth",
            "root": spec.name if adapter is None else adapter, "parent": None if adapter is None else spec.name,
            "max_model_len": served.max_model_len if served else spec.max_model_len,
            "hearth": {"loaded": served is not None, "loading": slot.loading is not None and served is None,
                       "pinned": spec.pinned, "memory_bytes": spec.footprint, **_vision(served or spec.facts)}}


def _vision(served) -> dict:
    """A card's `vision` (a model served with an mmproj: before its load, its file's facts hold it), its projector
    type and file, as /api/show's projector_info and /props' modalities say it reads images; {} otherwise."""
    vision = getattr(served, "vision", None)
    if vision is None:
        return {}
    return {"vision": {"projector": vision.cfg.projector, "mmproj": vision.path or None}}
