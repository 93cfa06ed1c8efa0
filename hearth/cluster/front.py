"""The front end's side of a cluster: the ServedModel the API's routes use (tokenizer and chat
template read from the GGUF here, no weights; limits from the replicas) and the cluster's own
Prometheus series (replica up, requests routed, restarts), per `replica` label."""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from pydantic import BaseModel

from hearth.api.errors import APIError

from hearth.api.chat_template import ChatTemplate
from hearth.api.served import ServedModel, gguf_facts
from hearth.cluster.remote_engine import ClusterEngine
from hearth.cluster.scaling import Scaler
from hearth.errors import HearthError
from hearth.loader.gguf_loader import GGUFFile
from hearth.loader.resolve import resolve_model
from hearth.loader.tokenizer import Tokenizer
from hearth.config import DEFAULT_POOLING
from hearth.models.transformer import POOLING_TYPES


def served_model(model: str, names: list[str] | None, engine: ClusterEngine, template: str | None = None,
                 template_kwargs: dict | None = None) -> ServedModel:
    """names: None -> as `hearth serve` names it (catalog name or file stem, with aliases); template: one
    in place of the file's (--chat-template), as the replicas were given; template_kwargs: --chat-template-kwargs."""
    from hearth.commands.models_file import ModelEntry
    from hearth.commands.serve_models import file_names, model_names

    path = resolve_model(model)
    g = GGUFFile(path)
    tok = Tokenizer.from_gguf(g)
    template = ChatTemplate(template or tok.chat_template, tok.bos_token, tok.eos_token, g.arch, template_kwargs)
    names = names or model_names(ModelEntry(model), path)
    pooling = POOLING_TYPES.get(g.arch_get("pooling_type"), DEFAULT_POOLING)  # as config_from_gguf reads it
    return ServedModel(names, tok, template, engine, engine.max_model_len, engine.vocab_size,
                       model_context=engine.model_context, max_logprobs=engine.max_logprobs,
                       file_names=file_names(ModelEntry(model), path, names), path=str(path),
                       pooling=pooling, embedding_size=int(g.arch_get("embedding_length")),
                       **gguf_facts(g))  # Ollama's /api/tags and /api/show details, as `hearth serve` gives them


class ClusterCollector:
    """Registered into the app's metrics registry next to the engine collector."""

    def __init__(self, engine: ClusterEngine, model_name: str):
        self.engine, self.model_name = engine, model_name

    def collect(self):
        labels = ["model_name", "replica"]
        up = GaugeMetricFamily("hearth:replica_up", "1 while the replica serves, 0 while Ray restarts it.", labels=labels)
        flight = GaugeMetricFamily("hearth:replica_requests_in_flight", "Requests the front end has on the replica.",
                                   labels=labels)
        routed = CounterMetricFamily("hearth:replica_requests_routed", "Requests routed to the replica.", labels=labels)
        restarts = CounterMetricFamily("hearth:replica_restarts", "Times the replica came back after failing.",
                                       labels=labels)
        for s in self.engine.slots:
            values = [self.model_name, s.name]
            up.add_metric(values, int(s.up))
            flight.add_metric(values, s.in_flight)
            routed.add_metric(values, s.routed)
            restarts.add_metric(values, s.restarts)
        yield from (up, flight, routed, restarts)


def install_metrics(app, engine: ClusterEngine, model_name: str) -> None:
    app.state.metrics.registry.register(ClusterCollector(engine, model_name))


class ScaleRequest(BaseModel):
    replicas: int


def install_scaling(app, engine: ClusterEngine, scaler: Scaler) -> None:
    """GET /cluster/replicas lists them; POST {"replicas": N} scales and answers once done
    (behind the API key like every route); /props' total_slots, read from the engine, then counts the
    replicas there are."""

    def listing() -> dict:
        return {"replicas": [{"name": s.name, "up": s.up, "draining": s.draining, "in_flight": s.in_flight,
                              "pid": s.info.pid, "host": s.info.host} for s in engine.slots]}

    async def get_replicas():
        return listing()

    async def set_replicas(body: ScaleRequest):
        if body.replicas < 1:
            raise APIError(400, f"replicas must be at least 1, not {body.replicas}", param="replicas")
        try:
            await scaler.scale_to(body.replicas)
        except HearthError as e:
            raise APIError(400, str(e), param="replicas") from None
        return listing()

    app.add_api_route("/cluster/replicas", get_replicas, methods=["GET"])
    app.add_api_route("/cluster/replicas", set_replicas, methods=["POST"])
