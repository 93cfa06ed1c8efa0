"""How many engine replicas (`hearth cluster serve`) a target request rate needs, and how many
machines hold them: the planner's ceilings for one replica, times N.

A replica of T threads on a machine measured at B bytes/s and F FLOP/s with `cores` cores gets
T/cores of both: the replicas of one machine share its memory bandwidth and compute evenly by
threads (the measurement used every core). Machines given as cores:memory are assumed to have this
device's bandwidth and FLOP/s per core. A request of P prompt + O output tokens costs the replica
P / prefill ceiling + O / decode ceiling (all its C sequences decoding together at the full P + O
context) seconds of its time: prefill and decode take turns on the same threads."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from hearth.memory import PlanError
from hearth.memory.budget import Budget
from hearth.memory.devices import GiB, Device
from hearth.memory.layouts import LAYOUTS, resident_weight_bytes
from hearth.memory.planner import PlanRequest, check_request
from hearth.memory.roofline import Roofline


@dataclass(frozen=True, slots=True)
class Machine:
    cores: int
    memory_bytes: int


@dataclass(frozen=True, slots=True)
class Workload:
    rps: float
    prompt_tokens: int
    output_tokens: int
    threads: int
    """Threads of one replica (`--threads-per-replica`)."""


@dataclass(frozen=True, slots=True)
class ReplicaPlan:
    work: Workload
    cores_here: int
    decode_tok_s: float
    """All C sequences of one replica together, at its bandwidth share."""
    prefill_tok_s: float
    replica_rps: float
    replica_bytes: float
    """One replica's footprint: weights as held, KV of its C sequences, activations, runtime, tokenizer."""
    replicas: int
    per_machine: list[int]
    """Replicas each given machine holds: min(cores // T, usable memory // footprint)."""
    open_ended: bool
    """No machines given: as many machines like this one (per_machine[0]) as it takes."""

    @property
    def machines_needed(self) -> int | None:
        """How many of the given machines, in order, hold `replicas`; None if they cannot."""
        if self.open_ended:
            return math.ceil(self.replicas / self.per_machine[0]) if self.per_machine[0] else None
        held = 0
        for i, n in enumerate(self.per_machine, 1):
            held += n
            if held >= self.replicas:
                return i
        return None


def parse_machines(spec: str, here: Machine) -> list[Machine]:
    """'3' = three machines like this one; '16:64,8:32' = one of 16 cores and 64 GiB, one of 8 and 32."""
    spec = spec.strip()
    if spec.isdigit():
        if int(spec) < 1:
            raise PlanError(f"--machines must name at least one machine, got {spec!r}")
        return [here] * int(spec)
    machines = []
    for part in spec.split(","):
        cores, _, mem = part.strip().partition(":")
        try:
            machine = Machine(int(cores), int(float(mem) * GiB))
        except ValueError:
            machine = None
        if machine is None or machine.cores < 1 or machine.memory_bytes <= 0:
            raise PlanError(f"--machines: {part.strip()!r} is not CORES:MEMORY_GIB (e.g. 16:64) "
                            "nor a count of machines like this one")
        machines.append(machine)
    return machines


def check_workload(w: Workload) -> None:
    if not (w.rps > 0 and math.isfinite(w.rps)):
        raise PlanError(f"--target-rps must be a positive number of requests a second, got {w.rps:g}")
    if w.prompt_tokens < 1 or w.output_tokens < 1:
        raise PlanError(f"--prompt-tokens and --output-tokens must be at least 1, "
                        f"got {w.prompt_tokens} and {w.output_tokens}")
    if w.threads < 1:
        raise PlanError(f"--threads-per-replica must be at least 1, got {w.threads}")


def request_tokens(w: Workload) -> str:
    """A request's context as the user gave it, for errors: they typed no --ctx."""
    return (f"--prompt-tokens {w.prompt_tokens:,} + --output-tokens {w.output_tokens:,} "
            f"({w.prompt_tokens + w.output_tokens:,} tokens)")


def plan_replicas(req: PlanRequest, w: Workload, here: Machine, machines: list[Machine] | None) -> ReplicaPlan:
    """`req`: the device measured here and C = req.concurrency sequences per replica; `machines`
    None: machines like `here`, as many as it takes."""
    check_workload(w)
    if req.device.kind != "cpu":
        raise PlanError(f"replica planning is for CPU machines (hearth cluster serve runs CPU replicas), "
                        f"not {req.device.name}")
    if machines is None and w.threads > here.cores:
        raise PlanError(f"--threads-per-replica {w.threads} is more than this machine's {here.cores} cores")
    ctx = w.prompt_tokens + w.output_tokens
    check_request(req.shape, ctx, req.concurrency, req.batch_tokens, request_tokens(w))
    share = w.threads / here.cores
    dev: Device = replace(req.device, bandwidth=req.device.bandwidth * share,
                          peak_flops=req.device.peak_flops * share, int8_ops=req.device.int8_ops * share)
    roof = Roofline(req.shape, req.tensors, dev, req.kv, req.block_size, req.batch_tokens)
    decode, prefill = roof.decode_tok_s(ctx, req.concurrency), roof.prefill_tok_s(w.prompt_tokens)
    rps = 1 / (w.prompt_tokens / prefill + w.output_tokens / decode)
    held = resident_weight_bytes(req.tensors, req.shape, LAYOUTS[dev.layout])
    footprint = Budget(req.shape, held, dev, req.kv, req.block_size, req.batch_tokens).total(ctx, req.concurrency)
    fits = [min(m.cores // w.threads, int(replace(dev, memory_bytes=m.memory_bytes).usable_bytes // footprint))
            for m in machines or [here]]
    return ReplicaPlan(w, here.cores, decode, prefill, rps, footprint, math.ceil(w.rps / rps), fits, machines is None)
