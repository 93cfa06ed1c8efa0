"""Connect to Ray (or start a local instance), place N replica actors, wait until every one has
loaded its model: the front end starts whole or not at all. Every failure is one HearthError line."""

from __future__ import annotations

import ipaddress
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from hearth.cluster.probe import check_ray_address
from hearth.cluster.remote_engine import ClusterEngine, ReplicaSlot
from hearth.cluster.replica import LoadFailure, Replica, ReplicaInfo
from hearth.cluster.router import make_router
from hearth.cluster.scaling import Scaler
from hearth.errors import HearthError

LOCAL_OBJECT_STORE_BYTES = 200 * 2**20
"""Deltas are a few hundred bytes: the object store only needs room for Ray's own bookkeeping."""


class ClusterError(HearthError):
    """Ray is missing or unreachable, the replicas do not fit, or one could not load its model."""


@dataclass
class ClusterSpec:
    model: str
    replicas: int = 2
    threads_per_replica: int = 1
    engine_args: dict = field(default_factory=dict)
    """LLM keyword arguments for every replica (threads is set from threads_per_replica)."""
    max_queued: int = 256
    routing: str = "prefix"
    load_factor: float = 1.5
    prefix_blocks: int = 8
    startup_timeout_s: float = 600.0

    def __post_init__(self):
        """Bad settings fail here, before Ray starts or a model loads."""
        for flag, value in (("--replicas", self.replicas), ("--threads-per-replica", self.threads_per_replica),
                            ("--prefix-blocks", self.prefix_blocks)):
            if value < 1:
                raise ClusterError(f"{flag} must be at least 1, not {value}")
        if not self.startup_timeout_s > 0:  # 0 started Ray and a replica, then gave up at once
            raise ClusterError(f"--startup-timeout must be a positive number of seconds, "
                               f"not {self.startup_timeout_s:g}")
        make_router(self.routing, self.replicas, load_factor=self.load_factor)


LOOPBACK_ONLY = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
"""Set to 0 before Ray is imported, Ray takes 127.0.0.1 as this node's address (as on a laptop)
instead of the machine's network address: a local instance's processes then talk over loopback only,
and a driver given a loopback --address dials it as given (with it 1, Ray replaces a loopback host by
this machine's network address, where a head that listens on loopback only refuses the connection)."""


AUTH_MODE = "RAY_AUTH_MODE"
"""`token`: a driver joining a head sends the token `ray start` wrote to ~/.ray/auth_token (Ray's token
authentication is on by default since 2.5x; a head without it accepts the token too), and a local
instance is token-authenticated (Ray's default) without Ray's WARNING line saying so on every start.
A value of the user's wins (`disabled` included)."""


JOIN_GCS_TRIES = "RAY_gcs_server_port_wait_time_s"
"""ray.init's attempts at its GCS client when joining (1 s apart, each up to ~35 s in Ray's C++ client
when the GCS does not answer as Ray's; 20 unset: ~12 minutes). Read at each ray.init
(ray/_private/node.py::_init_gcs_client); a value of the user's wins."""


INSTALL_RAY = "pip install -c constraints.txt '.[cluster]' in hearth's checkout"
"""How Ray comes: the optional extra, pinned by the constraints file as the README installs hearth."""


def import_ray(local: bool | None = None, address: str | None = None):
    """local: Ray will start its own instance here (no --address), kept on loopback; False: this
    process joins the head at `address`, dialed as given when it is a loopback one; None: Ray is
    already set up. The loopback switch is read when Ray is imported."""
    if local or (local is False and is_loopback(address)):
        os.environ.setdefault(LOOPBACK_ONLY, "0")
    try:
        import ray
    except ImportError:
        raise ClusterError(f"hearth cluster needs Ray: {INSTALL_RAY}") from None
    return ray


def is_loopback(address: str | None) -> bool:
    host = (address or "").rpartition(":")[0].strip("[]")
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def use_token_auth() -> None:
    """Token authentication unless the user chose otherwise (AUTH_MODE). Ray reads the mode into its
    config when imported (the tests import it at collection), so setting the variable before ray.init
    is not enough: a local GCS would want a token this driver does not send. This is what ray.init does
    itself for a new local instance with the mode unset (authentication_token_setup.py's
    enable_token_auth_by_default), less the warning."""
    if os.environ.get(AUTH_MODE, "token").lower() == "token":
        from ray._private.authentication.authentication_token_setup import _enable_token_auth

        _enable_token_auth()  # sets RAY_AUTH_MODE=token and has Ray's config read it again


def ray_dials(address: str) -> str:
    """The HOST:PORT ray.init connects to for `address`: a loopback host becomes this machine's network
    address unless the loopback switch was 0 when Ray was imported (services.py's resolve_ip_for_localhost)."""
    if address == "auto" or address.startswith("ray://"):
        return address
    from ray._private.services import canonicalize_bootstrap_address

    try:
        return canonicalize_bootstrap_address(address) or address
    except ValueError:  # not HOST:PORT: the probe names it
        return address


def connect(address: str | None, num_cpus: int | None = None, log_to_driver: bool = True) -> bool:
    """Join the cluster at `address`, or start a local one (no dashboard, a small object store).
    Returns whether we started it (then the caller shuts it down)."""
    ray = import_ray(local=not address, address=address)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no usage reports leave the machine
    if ray.is_initialized():
        return False
    use_token_auth()
    if address:
        _join(ray, address, log_to_driver)
        return False
    # replicas run the same hearth as this process, wherever it was imported from: the raylet
    # started here passes this environment on to the workers it spawns
    root = str(Path(__file__).resolve().parents[2])
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [root, saved]))
    try:
        # "local": a new instance even where RAY_ADDRESS or a `ray start` head on this machine would
        # make a bare ray.init() join that one instead (off loopback, and refusing num_cpus)
        ray.init(address="local", num_cpus=num_cpus or machine_cpus(), include_dashboard=False,
                 log_to_driver=log_to_driver,
                 object_store_memory=LOCAL_OBJECT_STORE_BYTES, logging_level="warning")
    finally:
        if saved is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = saved
    return True


def _join(ray, address: str, log_to_driver: bool) -> None:
    # the probe asks where Ray will connect: Ray's own connect retries for minutes on a wrong address
    check_ray_address(address, dialed=ray_dials(address))
    tries = os.environ.get(JOIN_GCS_TRIES)
    os.environ.setdefault(JOIN_GCS_TRIES, "1")  # the probe saw the GCS answer: no 20 tries of ~35 s
    try:
        ray.init(address=address, log_to_driver=log_to_driver, logging_level="warning")
    except Exception as e:  # noqa: BLE001 - Ray raises ConnectionError, RuntimeError, ValueError...
        raise ClusterError(f"cannot join the Ray cluster at {address}: {_first_line(e)}") from None
    finally:
        if tries is None:
            del os.environ[JOIN_GCS_TRIES]


def machine_cpus() -> int:
    """The CPUs this process may use (its affinity mask, as `hearth serve`'s --threads warning counts them):
    what a local Ray instance offers its replicas."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def check_machine_fits(spec: ClusterSpec) -> None:
    """Before a local instance starts (5-10 s): replicas it cannot place would wait in Ray's queue forever."""
    cpus, t = machine_cpus(), spec.threads_per_replica
    if t > cpus:
        raise ClusterError(f"--threads-per-replica {t} is more than the {cpus} CPUs this process may use: give at "
                           f"most {cpus}, or join a Ray cluster with bigger nodes (--address)")
    if spec.replicas * t > cpus:
        raise ClusterError(f"{_times(spec.replicas, t)} need {spec.replicas * t} CPUs, more than the {cpus} this "
                           f"process may use (each replica holds its threads' CPUs): give --replicas "
                           f"{cpus // t} or fewer at --threads-per-replica {t}, or join a Ray cluster with more "
                           "CPUs (--address)")


def check_fits(spec: ClusterSpec, count: int, more: bool = False) -> None:
    """More replicas than the cluster can place would wait in Ray's queue forever: refuse up front.
    more: they join running ones (POST /cluster/replicas)."""
    ray = import_ray()
    total, free = ray.cluster_resources().get("CPU", 0), ray.available_resources().get("CPU", 0)
    need = count * spec.threads_per_replica
    if need > free:
        raise ClusterError(f"{_times(count, spec.threads_per_replica, more)} need {need} CPUs, "
                           f"but the Ray cluster has {free:g} free of its {total:g}: "
                           f"{'ask for fewer' if more else 'lower --replicas or --threads-per-replica'}, or add "
                           "nodes to the cluster (`ray start --address HEAD:PORT` on another machine)")


def _times(replicas: int, threads: int, more: bool = False) -> str:
    return f"{replicas} {'more ' * more}replica{'s' * (replicas != 1)} x {threads} thread{'s' * (threads != 1)}"


def start_replicas(spec: ClusterSpec) -> ClusterEngine:
    """Place the replicas and wait for all to load (or raise, none left running)."""
    placed = spawn(spec, spec.replicas, first=0)
    slots = [ReplicaSlot(f"r{i}", h, info) for i, (h, info) in enumerate(placed)]
    return ClusterEngine(slots, router_for(spec, placed[0][1], spec.replicas))


def spawn(spec: ClusterSpec, count: int, first: int) -> list[tuple[object, ReplicaInfo]]:
    """Place `count` replicas, named r{first}, r{first + 1}, ..., and wait for all to load; on any
    failure kill them all and raise."""
    ray = import_ray()
    check_fits(spec, count, more=first > 0)
    actor = ray.remote(Replica).options(num_cpus=spec.threads_per_replica, max_restarts=-1, max_task_retries=0)
    args = {**spec.engine_args, "threads": spec.threads_per_replica}
    if args.get("kv_disk_dir"):  # one shared tier: --kv-disk-space-mb is split between the replicas
        args["kv_disk_space_mb"] = max(1, args.get("kv_disk_space_mb", 4096) // spec.replicas)
    handles = [actor.remote(spec.model, args, spec.max_queued, f"r{first + i}") for i in range(count)]
    try:
        return list(zip(handles, _wait_ready(ray, handles, spec.startup_timeout_s, first)))
    except BaseException:
        for h in handles:
            ray.kill(h, no_restart=True)
        raise


def router_for(spec: ClusterSpec, info: ReplicaInfo, n: int):
    return make_router(spec.routing, n, root=info.cache_root, block_size=info.block_size,
                       load_factor=spec.load_factor, prefix_blocks=spec.prefix_blocks)


def scaler_for(spec: ClusterSpec, engine: ClusterEngine) -> Scaler:
    """POST /cluster/replicas's worker: more replicas like the first, or fewer after draining."""
    ray = import_ray()

    def placed(count: int):
        added = spawn(spec, count, first=len(engine.slots))
        if added[0][1].cache_root != engine.slots[0].info.cache_root:
            for h, _ in added:
                ray.kill(h, no_restart=True)
            raise ClusterError("new replicas loaded another model or settings (prefix-cache keys differ)")
        return added

    return Scaler(engine, placed, lambda n: router_for(spec, engine.slots[0].info, n),
                  lambda h: ray.kill(h, no_restart=True))


def _wait_ready(ray, handles: list, timeout_s: float, first: int = 0) -> list[ReplicaInfo]:
    refs = [h.ready.remote() for h in handles]
    deadline = time.monotonic() + timeout_s
    pending = list(refs)
    while pending:
        done, pending = ray.wait(pending, num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
        if not done:
            raise ClusterError(f"{len(pending)} of {len(refs)} replicas were not placed and loaded within "
                               f"{timeout_s:g}s: the Ray cluster lacks room for them, or loading is slow "
                               "(--startup-timeout)")
        try:
            result = ray.get(done[0])
        except Exception as e:  # noqa: BLE001 - the actor died while loading
            raise ClusterError(f"replica r{first + refs.index(done[0])} died while loading: {_first_line(e)}") from None
        if isinstance(result, LoadFailure):
            raise ClusterError(f"replica r{first + refs.index(done[0])} could not load the model: {result.message}")
    infos = ray.get(refs)
    if len({(i.cache_root, i.block_size, i.max_model_len) for i in infos}) > 1:
        raise ClusterError("replicas loaded different models or settings (prefix-cache keys differ)")
    return infos


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__
