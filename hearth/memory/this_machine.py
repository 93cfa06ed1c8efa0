"""`--device this`: this machine's memory (detected) with read bandwidth, compute (a bf16 matmul, and
the CPU kernels' int8 dot products) and runtime cost measured once by hearth.memory.bandwidth in a
fresh process (about four seconds; the first time also builds the kernels, up to a minute), then
cached in $HEARTH_HOME/plan/this.json until the hardware, torch, the kernel tier or the measurement
changes. `--remeasure` measures again and
keeps the better bandwidth and FLOP/s of the two runs: they are ceilings, and a busy machine only
ever measures low (the 1-minute load average is kept with the figures and shown with them)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from hearth.kernels import tiers
from hearth.loader.store import hearth_home
from hearth.memory import PlanError
from hearth.memory.bandwidth import METHOD
from hearth.memory.devices import Device

CACHE = Path("plan") / "this.json"


def this_device(home=None, refresh: bool = False) -> Device:
    path = hearth_home(home) / CACHE
    key = machine_key()
    cached = _read(path, key)
    if cached is not None and not refresh:
        return _device(cached, key)
    print(f"hearth: measuring this machine's memory and compute (once: cached in $HEARTH_HOME/{CACHE}; "
          "the first time also builds the kernels) ...", file=sys.stderr, flush=True)
    m = {**_run_measurement(), "load_1min": _load()}
    if cached is not None:
        if cached["bandwidth"] > m["bandwidth"]:  # the figure kept: with the load it was measured under
            m["load_1min"] = cached.get("load_1min")
        for ceiling in ("bandwidth", "peak_flops", "int8_ops"):
            m[ceiling] = max(m.get(ceiling, 0.0), cached.get(ceiling, 0.0))
    _write(path, {"key": key, **m})
    return _device(m, key)


def machine_key() -> dict:
    """What the figures depend on; a cached measurement with another key is measured again."""
    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = ""
    return {"cpu": cpu_name(), "cores": os.cpu_count(), "memory_bytes": system_memory(),
            "gpu": os.path.exists("/proc/driver/nvidia/gpus") and sorted(os.listdir("/proc/driver/nvidia/gpus")),
            "torch": torch_version, "tier": tiers.selected().name, "method": METHOD}


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def system_memory() -> int:
    """Physical memory, or the container's limit (cgroup v2 / v1) when that is lower."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for limit in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(limit).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def _device(m: dict, key: dict) -> Device:
    cores = f"{key['cores']} cores" if m["kind"] == "cpu" else ""
    name = m.get("name") or f"{key['cpu']}, {cores}"
    load = m.get("load_1min")
    under = f" at a 1-minute load of {load:.1f} on {key['cores']} cores" if load is not None else ""
    return Device(f"this ({name})", m["kind"], int(m.get("memory_bytes") or key["memory_bytes"]),
                  float(m["bandwidth"]), float(m["peak_flops"]),
                  source=f"measured on this machine ({m['kind']}){under}, cached in $HEARTH_HOME/{CACHE}",
                  runtime_bytes=int(m["runtime_bytes"]), int8_ops=float(m.get("int8_ops", 0.0)))


def _load() -> float | None:
    """The 1-minute load average, kept with a measurement: a busy machine measures low (a later
    `hearth bench` that beats the ceiling measures again)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def _run_measurement(timeout: float = 900) -> dict:  # the first run builds the kernels too
    cmd = [sys.executable, "-m", "hearth.memory.bandwidth"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise PlanError(f"measuring this machine took over {timeout:.0f} s (is it busy?)") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise PlanError(f"measuring this machine failed: {last}")
    return json.loads(done.stdout)


def _read(path: Path, key: dict) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if data.get("key") == json.loads(json.dumps(key)) else None


def _write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)
