"""`hearth plan --target-rps`: replicas and machines a request rate needs. A fake machine (round
bandwidth, FLOP/s and cores, no measurement) so the arithmetic is checked against the planner's
own figures and by hand; bad input is one line."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from hearth.cli import main
from hearth.commands import plan as plan_cmd
from hearth.memory import PlanError, devices, this_machine
from hearth.memory.devices import GiB, Device
from hearth.memory.planner import plan
from hearth.memory.replicas import Machine, ReplicaPlan, Workload, parse_machines, plan_replicas
from hearth.memory.request import build_request

CORES = 16
FAKE = Device("fake", "cpu", 64 * GiB, 100e9, 2e12, "fake measurement", runtime_bytes=300 * 2**20)
HERE = Machine(CORES, FAKE.memory_bytes)


def request(ctx: int, seqs: int, device: Device = FAKE):
    return replace(build_request("llama-7b", device="h200", ctx=ctx, concurrency=seqs), device=device)


def test_one_replica_gets_its_threads_share_of_the_machine():
    w = Workload(rps=10, prompt_tokens=512, output_tokens=128, threads=4)
    rp = plan_replicas(request(640, 8), w, HERE, None)
    quarter = replace(FAKE, bandwidth=25e9, peak_flops=0.5e12)  # 4 of 16 cores
    decode = plan(request(640, 8, quarter))["decode_tok_s_ceiling_aggregate"]
    prefill = plan(request(512, 8, quarter))["prefill_tok_s_ceiling"]
    assert rp.decode_tok_s == pytest.approx(decode) and rp.prefill_tok_s == pytest.approx(prefill)
    assert rp.replica_rps == pytest.approx(1 / (512 / prefill + 128 / decode))
    assert rp.replicas == math.ceil(10 / rp.replica_rps)
    footprint = plan(request(640, 8))["total_bytes"]  # weights + 8 sequences' KV + activations + runtime
    assert rp.replica_bytes == pytest.approx(footprint)
    assert rp.per_machine == [min(CORES // 4, int(0.9 * 64 * GiB // footprint))]
    assert rp.machines_needed == math.ceil(rp.replicas / rp.per_machine[0])


def test_decode_bound_replicas_scale_with_threads_and_machines_do_not():
    roomy = [Machine(CORES, 512 * GiB)]  # cores, not memory, bound the replicas per machine
    one = plan_replicas(request(1024, 4), Workload(50, 8, 1016, 1), HERE, roomy)
    four = plan_replicas(request(1024, 4), Workload(50, 8, 1016, 4), HERE, roomy)
    assert four.replica_rps == pytest.approx(4 * one.replica_rps)  # bandwidth shared by threads
    assert one.per_machine == [16] and four.per_machine == [4]
    assert one.per_machine[0] * one.replica_rps == pytest.approx(four.per_machine[0] * four.replica_rps)


def test_listed_machines_are_filled_in_order():
    small, big = Machine(4, 64 * GiB), Machine(32, 8 * GiB)  # cores-bound, then memory-bound
    rp = plan_replicas(request(640, 8), Workload(1, 512, 128, 2), HERE, [small, big])
    footprint = rp.replica_bytes
    assert rp.per_machine == [2, min(16, int(0.9 * 8 * GiB // footprint))]
    wide = plan_replicas(request(640, 8), Workload(1, 512, 128, 32), HERE, [small, big])  # 32 > 16 cores here
    assert wide.per_machine == [0, min(1, int(0.9 * 8 * GiB // footprint))]
    held = ReplicaPlan(rp.work, CORES, 1, 1, 1, 1, replicas=3, per_machine=[2, 1, 5], open_ended=False)
    assert held.machines_needed == 2 and replace(held, replicas=9).machines_needed is None


def test_machines_spec():
    assert parse_machines("3", HERE) == [HERE] * 3
    assert parse_machines("16:64, 8:0.5", HERE) == [Machine(16, 64 * GiB), Machine(8, GiB // 2)]


@pytest.mark.parametrize("spec", ["0", "16:", "x:64", "16:64,4", "0:64", "16:-1", ""])
def test_a_bad_machines_spec_is_refused(spec):
    with pytest.raises(PlanError, match="--machines"):
        parse_machines(spec, HERE)


@pytest.fixture
def fake_this(monkeypatch):
    monkeypatch.setattr(this_machine, "this_device", lambda home=None, refresh=False: replace(FAKE, name="this"))
    monkeypatch.setattr(plan_cmd, "cores_here", lambda: CORES)
    assert devices.get_device("this").bandwidth == FAKE.bandwidth


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main(["plan", "llama-7b", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err.strip()


def test_report_and_json(capsys, fake_this):
    code, out, _ = run(capsys, "--target-rps", "30", "--threads-per-replica", "2", "--machines", "3")
    assert code == 0 and "replicas needed" in out and "2 thread(s) x 6.2 GB/s, 125.00 GFLOP/s a core" in out
    assert "assumes:" in out
    code, out, _ = run(capsys, "--target-rps", "30", "--threads-per-replica", "2", "--json")
    data = json.loads(out)
    assert code == 0 and data["replicas"] == math.ceil(30 / data["replica_rps"])
    assert data["machines_needed"] == math.ceil(data["replicas"] / data["per_machine"][0])


@pytest.mark.parametrize("argv,needle", [
    (["--target-rps", "-2"], "--target-rps must be a positive"),
    (["--target-rps", "0"], "--target-rps must be a positive"),
    (["--target-rps", "nan"], "--target-rps must be a positive"),
    (["--target-rps", "5", "--threads-per-replica", "0"], "--threads-per-replica must be at least 1"),
    (["--target-rps", "5", "--threads-per-replica", "17"], "more than this machine's 16 cores"),
    (["--target-rps", "5", "--output-tokens", "0"], "--output-tokens must be at least 1"),
    (["--target-rps", "5", "--machines", "16x64"], "--machines: '16x64' is not CORES:MEMORY_GIB"),
    (["--target-rps", "5", "--ctx", "1024"], "--ctx does not apply with --target-rps"),
    # named the --ctx the user had not typed ("--ctx 1000128 is beyond ...")
    (["--target-rps", "5", "--prompt-tokens", "1000000"],
     "--prompt-tokens 1,000,000 + --output-tokens 128 (1,000,128 tokens) is beyond the model's context length"),
    (["--target-rps", "5", "--concurrency", "0"], "--concurrency must be at least 1"),
    (["--target-rps", "5", "--device", "h200"], "replica planning is for CPU machines"),
    # without --target-rps a replica flag was ignored without a word (a new user's trial: --machines 16:xx)
    (["--machines", "16:xx"], "--machines applies to replica planning: add --target-rps"),
    (["--prompt-tokens", "100", "--threads-per-replica", "2"], "--prompt-tokens, --threads-per-replica apply to"),
])
def test_bad_input_is_one_line(capsys, fake_this, argv, needle):
    code, out, err = run(capsys, *argv)
    assert code == 1 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("hearth: error: ") and "Traceback" not in err
    assert needle in err, err
