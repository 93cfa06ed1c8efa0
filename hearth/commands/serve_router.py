"""`hearth serve MAIN --router SMALL` and a models file's `router` / `router_threshold` /
`router_tool_floor`: which served model routes each model's tool calls (hearth.api.tool_router). A
router is a model of the same pool: --router adds it when no MODEL or entry names it; a name no
model has is one line."""

from __future__ import annotations

from hearth.errors import HearthError


def with_router(given: list, router: str | None) -> list:
    """The entries, plus --router's model when none of them is it."""
    from hearth.commands.models_file import ModelEntry

    if not router or any(router in (e.name, e.model, *e.aliases) for e in given):
        return given
    return given + [ModelEntry(router, where=f"--router {router!r}")]


def router_configs(given: list, names: list[list[str]], router: str | None, threshold: float,
                   tool_floor: float) -> list:
    """Per entry its RouterConfig (its own `router`, else --router) or None; a model never routes
    through itself (--router's model answers its own requests). An entry's own threshold and tool
    floor over the server's."""
    from hearth.tool_guard.routing import RouterConfig

    owner = {n: i for i, ns in enumerate(names) for n in ns}
    out = []
    for i, e in enumerate(given):
        name = e.router or router
        if not name:
            out.append(None)
            continue
        j = owner.get(name)
        if j is None:
            where = f"{e.where}: router" if e.router else "--router"
            raise HearthError(f"{where}: {name!r} is not a model this server serves "
                              f"({', '.join(repr(ns[0]) for ns in names)})")
        t = e.router_threshold if e.router_threshold is not None else threshold
        floor = e.router_tool_floor if e.router_tool_floor is not None else tool_floor
        out.append(None if j == i else RouterConfig(names[j][0], t, floor))
    return out
