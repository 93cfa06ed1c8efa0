"""What LLM(...) does around reading the model: the settings refused before anything loads, torch's CPU
threads for its steps, and the loading bar."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import torch

from hearth.config import EngineConfig
from hearth.errors import HearthError
from hearth.loader.store import folder_problem

log = logging.getLogger("hearth")


def check_settings(cfg: EngineConfig, backend, codec) -> None:
    """A KV cache format or disk tier the backend cannot run, or a disk folder hearth cannot write, said
    before anything loads."""
    if why := backend.kv_refusal(codec):
        raise HearthError(f"--device {backend.name} has {why}")
    if backend.name == "cuda" and cfg.kv_disk_dir:
        raise HearthError("--device cuda has no KV disk tier yet: drop --kv-disk-dir")
    if cfg.kv_disk_dir and (why := folder_problem(Path(cfg.kv_disk_dir))) is not None:
        raise HearthError(f"--kv-disk-dir {cfg.kv_disk_dir} is not a folder hearth can write to: {why}")


def use_threads(threads: int, named: str = "--threads") -> None:
    """torch's CPU threads (0: its default, left as it is); more than the CPUs this process may use is said
    in a warning, `named` before the number (serve's --models entries name their field)."""
    if threads > 0:
        torch.set_num_threads(threads)
        if threads > (cpus := len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()):
            # every step waits for its slowest thread, and the extra ones are always descheduled
            log.warning("%s %d is more than the %d CPUs this process may use: steps run slower, not faster",
                        named, threads, cpus)


def layer_progress(enabled: bool):
    """load_model's progress callback: a bar of loaded layers on a terminal, else None."""
    if not enabled or not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    bar = tqdm(total=None, desc="loading layers", unit="layer", leave=False, file=sys.stderr)

    def update(done: int, total: int) -> None:
        bar.total = total
        bar.update(done - bar.n)
        if done == total:
            bar.close()

    return update
