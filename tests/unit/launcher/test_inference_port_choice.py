"""`rl`'s inference ports (launcher/prepare.py settle_ports, rlcore/processes/ports.py): unset, the
first free one from 8000 up, said in the banner and the dry run and recorded in the configs the
servers get, while `configs/rl.toml` keeps it unset (a resume or a job's node chooses again);
given, kept exactly and refused when taken (dry run too), naming the flag. A SLURM job applies
the rule on each inference node. Reservations use a name prefix of this test's own."""

import os
import socket
import subprocess

import pytest

from launcher import slurm
from launcher.launch import write_configs
from launcher.plan import as_given, describe
from launcher.prepare import build_plan
from launcher.rl_config import RLConfig
from rlcore.config.toml_io import load_toml
from rlcore.errors import ConfigError
from rlcore.files.readback import Damaged
from rlcore.processes import ports
from rlcore.runs import run_json


@pytest.fixture(autouse=True)
def own_ports(monkeypatch):
    """Ports from an OS-picked base (far from the machine's real 8000) and reservations under a
    name of this test's own."""
    monkeypatch.setattr(ports, "NAME_PREFIX", f"rl-port-test-{os.getpid()}-")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        base = min(sock.getsockname()[1], 60000)
    monkeypatch.setattr(ports, "DEFAULT_PORT", base)
    monkeypatch.setattr(ports, "SCAN_PORTS", 50)
    yield base
    ports.release_all()


def config(tmp_path, **inference) -> RLConfig:
    return RLConfig.model_validate({"output_dir": str(tmp_path / "run"), "inference": inference})


def test_an_unset_port_is_the_default_when_free_reserved_and_said(tmp_path, own_ports):
    plan = build_plan(config(tmp_path), dry_run=False)
    assert plan.config.inference.server.port == own_ports and own_ports in ports._held
    assert plan.config.orchestrator.client.base_url == f"http://127.0.0.1:{own_ports}/v1"
    assert f"Inference: http://127.0.0.1:{own_ports} (inference.server.port unset: " in describe(
        plan
    )
    assert plan.env("inference")[ports.HELD_ENV] == str(own_ports)
    given = as_given(plan)
    assert given["inference"]["server"]["port"] is None
    assert given["orchestrator"]["client"]["base_url"] is None


def test_a_taken_default_gives_the_next_free_port(tmp_path, own_ports):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", own_ports))
        busy.listen()
        plan = build_plan(config(tmp_path, replicas=2), dry_run=False)
    assert plan.config.inference.server.port == own_ports + 1
    assert plan.config.orchestrator.client.base_url == [
        f"http://127.0.0.1:{own_ports + 1}/v1",
        f"http://127.0.0.1:{own_ports + 2}/v1",
    ]
    assert f"{own_ports} is taken, this is the next free port" in plan.ports_note


@pytest.mark.parametrize("dry_run", [True, False])
def test_a_taken_explicit_port_is_refused_naming_it_the_holder_and_the_flag(
    tmp_path, own_ports, dry_run
):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", own_ports))
        busy.listen()
        with pytest.raises(ConfigError) as err:
            build_plan(config(tmp_path, server={"port": own_ports}), dry_run=dry_run)
    message = str(err.value)
    assert f"port {own_ports} on 127.0.0.1 is in use" in message
    assert f"pid {os.getpid()}" in message and "--inference.server.port" in message
    assert not ports._held


def test_an_explicit_free_port_is_kept_exactly_and_the_configs_keep_it(tmp_path, own_ports):
    plan = build_plan(config(tmp_path, server={"port": own_ports + 7}), dry_run=False)
    assert plan.config.inference.server.port == own_ports + 7 and plan.machine_chosen == {}
    plan.run.configs.mkdir(parents=True)
    write_configs(plan)
    assert load_toml(plan.run.config_file("rl"))["inference"]["server"]["port"] == own_ports + 7


def test_rl_toml_keeps_an_unset_port_unset_and_the_servers_get_theirs(tmp_path, own_ports):
    plan = build_plan(config(tmp_path, replicas=2), dry_run=False)
    plan.run.configs.mkdir(parents=True)
    write_configs(plan)
    rl_toml = load_toml(plan.run.config_file("rl"))
    assert rl_toml["inference"]["server"]["port"] == "None"
    assert rl_toml["orchestrator"]["client"]["base_url"] == "None"
    assert load_toml(plan.run.config_file("inference"))["server"]["port"] == own_ports
    assert load_toml(plan.run.config_file("inference-1"))["server"]["port"] == own_ports + 1
    orch = load_toml(plan.run.config_file("orchestrator"))
    assert orch["client"]["base_url"][1] == f"http://127.0.0.1:{own_ports + 1}/v1"


def test_submitting_a_job_leaves_the_port_to_the_node(tmp_path):
    job = {"output_dir": str(tmp_path / "run"), "slurm": {"nodes": 1}}
    plan = build_plan(RLConfig.model_validate(job), dry_run=True)
    assert plan.config.inference.server.port is None and not ports._held
    assert plan.config.orchestrator.client.base_url is None


def test_a_job_applies_the_rule_on_each_inference_node(monkeypatch, tmp_path):
    """Node n1 has 8001 and 8002 free, n2 8001 and 8003: server i listens on the port + i, so
    the first port that fits both is 8002 (8001 would need 8002 free on n2)."""
    free = {"n1": "8001 8002", "n2": "8001 8003"}
    seen = []

    def fake_run(cmd, **kwargs):
        host = next(a.split("=", 1)[1] for a in cmd if a.startswith("--nodelist="))
        seen.append(cmd[cmd.index("-c") + 2 : cmd.index("-c") + 5])
        return subprocess.CompletedProcess(cmd, 0, stdout=free[host], stderr="")

    monkeypatch.setattr(slurm.children, "run", fake_run)
    monkeypatch.setattr(ports, "DEFAULT_PORT", 8000)
    assert slurm.port_free_on(["n1", "n2"]) == 8002
    assert seen[0] == ["8000", "50", ports.NAME_PREFIX]  # the probe checks the reservations too
    free["n2"] = "9000"
    with pytest.raises(ConfigError, match="--inference.server.port"):
        slurm.port_free_on(["n1", "n2"])


def test_run_json_records_the_servers_addresses_as_checked_data(tmp_path):
    urls = ["http://127.0.0.1:8001", "http://[::1]:8002", "http://node-3.cluster:8000"]
    assert run_json.parse({"inference_urls": urls}).inference_urls == urls
    for bad in (["http://h:8000/../x"], "http://h:8000", [8000], ["h:8000"], ["http://h:80\n"]):
        with pytest.raises(Damaged, match="inference_urls"):
            run_json.parse({"inference_urls": bad})


def test_a_multi_node_job_leaves_each_servers_port_to_its_node(monkeypatch, tmp_path, own_ports):
    """The launcher keeps no reservation there (its own node may serve inference-0, which
    reserves its port itself) and tells no server its port is held for it."""
    monkeypatch.setattr(slurm, "job_hosts", lambda: ["n1", "n2", "n3"])
    monkeypatch.setattr(slurm, "check_shared", lambda root, hosts: None)
    monkeypatch.setattr(slurm, "port_free_on", lambda hosts: 8000)
    job = {
        "output_dir": str(tmp_path / "run"),
        "inference": {"server": {"port": own_ports}},
        "slurm": {"nodes": 3, "trainer_nodes": 1, "gpus_per_node": 0},
    }
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv(slurm.INSIDE_ENV, "1")
    plan = build_plan(RLConfig.model_validate(job), dry_run=False)
    assert own_ports in ports._held  # checked and reserved here first
    slurm.place_in_job(plan)
    assert not ports._held and plan.config.inference.server.port == own_ports  # kept as given
    for name in ("inference", "inference-1"):
        assert not any(a.startswith(ports.HELD_ENV) for a in plan.command(name)), name
    assert plan.config.orchestrator.client.base_url[1] == f"http://n2:{own_ports + 1}/v1"


def test_evals_own_server_takes_the_same_rule_and_its_flag_parses(own_ports):
    from orchestrator.evals.config import EvalsConfig
    from orchestrator.evals.server import own_port
    from rlcore.config.entry import parse_config

    argv = ["--inference.server.port", str(own_ports + 5), "--eval.env", '[{id = "rl-add-digits"}]']
    config, _ = parse_config(EvalsConfig, "evals", argv)
    assert config.inference == {"server": {"port": own_ports + 5}}  # a plain value into a table
    assert own_port("127.0.0.1", own_ports + 5) == own_ports + 5 and own_ports + 5 in ports._held
    assert own_port("127.0.0.1", None) == own_ports and own_ports in ports._held
    assert own_port("127.0.0.1", "None") == own_ports + 1  # an explicit None: the rule too
    assert own_port("127.0.0.1", "x") == "x"  # not a port: `inference` refuses it by its schema
