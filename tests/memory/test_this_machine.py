"""`--device this`: memory detected, bandwidth / FLOP/s / runtime measured once, then cached."""

from __future__ import annotations

import json
import os

import pytest

from hearth.kernels import tiers
from hearth.memory import this_machine
from hearth.memory.this_machine import CACHE, system_memory, this_device


def test_measured_once_then_cached(plan_home, monkeypatch):
    device = this_device(plan_home)
    assert device.memory_bytes == system_memory()
    assert system_memory() <= os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    # sane physics for any machine hearth runs on, even measured beside other busy processes (a loaded
    # 2-core host read 0.2 GFLOP/s once)
    assert 0.5e9 < device.bandwidth < 20e12 and 5e7 < device.peak_flops < 5e15
    assert 50 * 2**20 < device.runtime < 4 * 2**30
    cached = json.loads((plan_home / CACHE).read_text())
    assert cached["key"] == this_machine.machine_key() and cached["bandwidth"] == device.bandwidth
    # int8 dots are measured where a native tier without AMX tiles runs prefills on them
    assert cached["tier"] == tiers.active() and device.int8_ops == cached["int8_ops"]
    assert (device.int8_ops > 5e9) == (tiers.active() not in ("amx", "torch"))

    def no_measuring():
        raise AssertionError("measured again despite a matching cache")

    monkeypatch.setattr(this_machine, "_run_measurement", no_measuring)
    assert this_device(plan_home) == device


def test_other_hardware_is_measured_again(plan_home, monkeypatch):
    this_device(plan_home)  # cached by now
    key = {**this_machine.machine_key(), "cores": 4096}
    monkeypatch.setattr(this_machine, "machine_key", lambda: key)
    fake = {"kind": "cpu", "runtime_bytes": 1, "bandwidth": 2.0, "peak_flops": 3.0}
    monkeypatch.setattr(this_machine, "_run_measurement", lambda: fake)
    home = plan_home / "other"
    (home / CACHE).parent.mkdir(parents=True)
    (home / CACHE).write_text((plan_home / CACHE).read_text())
    assert this_device(home).bandwidth == 2.0


def test_a_failed_measurement_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setattr(this_machine.sys, "executable", "/bin/false")
    with pytest.raises(this_machine.PlanError, match="measuring this machine failed"):
        this_device(tmp_path)


def test_remeasuring_keeps_the_better_ceilings(plan_home, monkeypatch, tmp_path):
    home = tmp_path / "home"
    (home / CACHE).parent.mkdir(parents=True)
    (home / CACHE).write_text((plan_home / CACHE).read_text() if (plan_home / CACHE).exists()
                              else json.dumps({"key": this_machine.machine_key(), "kind": "cpu", "runtime_bytes": 5,
                                               "bandwidth": 1e9, "peak_flops": 1e11}))
    old = this_device(home)
    slower = {"kind": "cpu", "runtime_bytes": 7, "bandwidth": old.bandwidth / 2, "peak_flops": old.peak_flops * 2,
              "int8_ops": old.int8_ops / 2}
    monkeypatch.setattr(this_machine, "_run_measurement", lambda: dict(slower))
    new = this_device(home, refresh=True)
    assert new.bandwidth == old.bandwidth and new.peak_flops == old.peak_flops * 2 and new.runtime == 7
    assert new.int8_ops == old.int8_ops


def test_the_load_it_was_measured_under_is_kept_and_said(monkeypatch, tmp_path):
    """A bandwidth measured on a busy machine is low: the figure says under what load it was taken."""
    fake = {"kind": "cpu", "runtime_bytes": 1, "bandwidth": 8.7e9, "peak_flops": 1e11}
    monkeypatch.setattr(this_machine, "_run_measurement", lambda: dict(fake))
    monkeypatch.setattr(this_machine.os, "getloadavg", lambda: (7.25, 5.0, 3.0))
    device = this_device(tmp_path)
    cores = this_machine.machine_key()["cores"]
    assert f"at a 1-minute load of 7.2 on {cores} cores" in device.source
    assert json.loads((tmp_path / CACHE).read_text())["load_1min"] == 7.25
    monkeypatch.setattr(this_machine.os, "getloadavg", lambda: (0.5, 0.5, 0.5))
    fake["bandwidth"] = 24e9  # quiet now: the better figure, and its load
    assert "load of 0.5" in this_device(tmp_path, refresh=True).source
    monkeypatch.setattr(this_machine.os, "getloadavg", lambda: (9.0, 9.0, 9.0))
    fake["bandwidth"] = 5e9  # busy again: the quiet figure stays, with the load it was taken at
    again = this_device(tmp_path, refresh=True)
    assert again.bandwidth == 24e9 and "load of 0.5" in again.source


def test_a_measurement_that_times_out_is_a_plan_error(monkeypatch):
    """`hearth doctor` and `hearth plan` say so in one line instead of a traceback."""
    import subprocess

    from hearth.memory import PlanError

    def slow(cmd, **kw):
        raise subprocess.TimeoutExpired(cmd, kw["timeout"])

    monkeypatch.setattr(this_machine.subprocess, "run", slow)
    with pytest.raises(PlanError, match="took over 900 s"):
        this_machine._run_measurement()
