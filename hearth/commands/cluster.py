"""`hearth cluster serve MODEL`: N engine replicas as Ray actors behind one HTTP front end with the
routes, streaming, auth, limits and /metrics of `hearth serve` (hearth/cluster)."""

from __future__ import annotations

import argparse
import signal
import sys
import time

from hearth.commands import serve
from hearth.commands.logs import configure_logging
from hearth.commands.template_flags import chat_template, chat_template_kwargs
from hearth.config import DEFAULT_MODEL

ROUTINGS = ("prefix", "round-robin", "least-loaded")


def add_arguments(p: argparse.ArgumentParser) -> None:
    serve.add_arguments(p)
    c = p.add_argument_group("cluster")
    c.add_argument("--replicas", type=int, default=2, help="engine replicas, each a Ray actor (default: %(default)s)")
    c.add_argument("--threads-per-replica", type=int, default=1,
                   help="CPU threads of each replica, and the CPUs Ray reserves for it (default: %(default)s)")
    c.add_argument("--address", default=None, metavar="RAY_ADDRESS",
                   help="join the Ray cluster at HOST:PORT (or 'auto'); default: start one on this machine")
    c.add_argument("--routing", default="prefix", choices=ROUTINGS,
                   help="prefix: replicas likely to hold the prompt's prefix in cache, bounded by load; "
                        "round-robin; least-loaded (default: %(default)s)")
    c.add_argument("--load-factor", type=float, default=1.5,
                   help="prefix routing passes over a replica with more than this times the mean load (default: %(default)s)")
    c.add_argument("--prefix-blocks", type=int, default=8,
                   help="prefix routing keys on the prompt's first N full KV blocks (default: %(default)s)")
    c.add_argument("--startup-timeout", type=float, default=600,
                   help="seconds for all replicas to be placed and load (default: %(default)s)")


def main(args: argparse.Namespace) -> int:
    from hearth.cluster.launch import ClusterError, ClusterSpec, check_machine_fits, connect, import_ray

    from hearth.commands.serve_models import model_args
    from hearth.loader.resolve import resolve_model

    configure_logging(args.log_level)
    if args.threads:
        raise ClusterError("use --threads-per-replica, not --threads, with hearth cluster serve")
    if getattr(args, "lora_adapters", None):  # the front end holds no adapter table: /lora-adapters, names
        raise ClusterError("hearth cluster serve takes no LoRA adapters yet (--lora, --lora-scaled, --lora-modules): "
                           "serve them with hearth serve")
    if args.mmproj:  # the front end prepares no images and its replicas' engines refuse them
        raise ClusterError("hearth cluster serve takes no images yet (--mmproj): serve a vision model with hearth serve")
    if args.pooling is not None:  # the replicas build their models from the engine flags alone
        raise ClusterError("hearth cluster serve takes no --pooling yet: serve an embedding model with hearth serve")
    if args.keep_alive is not None:  # replicas are actors that load once; scale with /cluster/replicas instead
        raise ClusterError("hearth cluster serve keeps its replicas loaded (no --keep-alive): scale them down with "
                           "POST /cluster/replicas")
    models = model_args(args)
    if len(models) > 1 or args.models:
        raise ClusterError("hearth cluster serve runs replicas of one model: give one MODEL, no --models")
    args.model = models[0] if models else DEFAULT_MODEL
    # before anything loads: without Ray, one line naming the extra
    ray = import_ray(local=not args.address, address=args.address)
    spec = ClusterSpec(args.model, args.replicas, args.threads_per_replica, serve.engine_args(args),
                       args.max_queued, args.routing, args.load_factor, args.prefix_blocks, args.startup_timeout)
    resolve_model(args.model)  # a bad name fails here, before Ray starts
    serve.check_port(args.host, args.port)  # so does a port in use, not after the replicas load
    if not args.address and not ray.is_initialized():  # the local instance gets this machine's CPUs
        check_machine_fits(spec)
    started = connect(args.address)
    stop = signal.signal(signal.SIGTERM, _terminated)  # in place of Ray's (exit 15, no cleanup of ours)
    try:
        return _serve(args, spec, ray, started)
    except Terminated:  # the replicas and the local Ray are gone by now: die of the signal, as `hearth serve`
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.raise_signal(signal.SIGTERM)
        return 1  # reached only if SIGTERM is blocked
    finally:
        signal.signal(signal.SIGTERM, stop)


class Terminated(BaseException):
    """SIGTERM (docker stop, kill): unwinds like Ctrl-C, so the local Ray instance is shut down first."""


def _terminated(signum, frame):
    raise Terminated


def _serve(args: argparse.Namespace, spec, ray, started: bool) -> int:
    """Place the replicas, serve until interrupted; a Ray instance we started is shut down on any exit."""
    from hearth.cluster.launch import scaler_for, start_replicas

    try:
        print(f"hearth: starting {args.replicas} replicas of {args.model} ...", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        engine = start_replicas(spec)
        print(f"hearth: {args.replicas} replicas loaded in {time.perf_counter() - t0:.1f}s "
              f"(context {engine.max_model_len} tokens, routing {args.routing})", file=sys.stderr, flush=True)
        config = serve.server_config(args, listen=True)
        app = build_app(args.model, args.served_model_name, engine, config, scaler_for(spec, engine),
                        template=chat_template(args), template_kwargs=chat_template_kwargs(args))
        return serve.run_server(app, args, app.state.models.ids_text())
    finally:
        if started:
            ray.shutdown()


def build_app(model: str, names, engine, config, scaler=None, template: str | None = None,
              template_kwargs: dict | None = None):
    """`hearth serve`'s app around the cluster's engine, its metrics, and POST /cluster/replicas
    when given a scaler."""
    from hearth.api.app import create_app
    from hearth.cluster.front import install_metrics, install_scaling, served_model

    served = served_model(model, names, engine, template, template_kwargs)
    app = create_app(served, config)
    install_metrics(app, engine, served.name)
    if scaler is not None:
        install_scaling(app, engine, scaler)
    return app
