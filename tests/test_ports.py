"""Where the stack listens: ports and URLs derived from settings, and the plan ``up`` checks."""

from __future__ import annotations

import socket

import pytest

from ruleengine.devstack.embedded import port_free
from ruleengine.devstack.ports import PortsUnavailable, check_ports, plan_problems, planned_ports
from ruleengine.devstack.supervise import restart_delay_s
from ruleengine.settings import PORT_LAYOUT, Settings


def test_defaults_are_todays_ports_and_urls() -> None:
    s = Settings()
    assert (s.web_port, s.sandbox_port, s.redis_port, s.mongodb_port) == (8080, 8081, 6380, 27018)
    assert (s.dispatcher_metrics_port, s.worker_metrics_port) == (9101, 9102)
    assert s.mongodb_url == "mongodb://127.0.0.1:27018/?directConnection=true&retryWrites=false"
    assert s.redis_url == "redis://127.0.0.1:6380/0"
    assert s.graph_url == "http://127.0.0.1:8081"
    assert s.model_fields_set == set()  # derived values do not count as set


def test_a_port_base_moves_every_port_and_the_urls_follow() -> None:
    s = Settings(port_base=20000)
    assert {name: getattr(s, name) - 20000 for name in PORT_LAYOUT} == PORT_LAYOUT
    assert s.mongodb_url == "mongodb://127.0.0.1:20003/?directConnection=true&retryWrites=false"
    assert s.redis_url == "redis://127.0.0.1:20002/0"
    assert s.graph_url == "http://127.0.0.1:20001"


def test_the_environment_is_read_like_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RULEENGINE_PORT_BASE", "30000")
    monkeypatch.setenv("RULEENGINE_SANDBOX_PORT", "31000")
    monkeypatch.setenv("RULEENGINE_WORKER_METRICS_PORT", "0")
    s = Settings()
    assert s.graph_url == "http://127.0.0.1:31000"  # a moved sandbox is the Graph API used
    assert (s.web_port, s.worker_metrics_port, s.mongodb_port) == (30000, 0, 30003)


def test_whatever_is_set_explicitly_wins() -> None:
    s = Settings(
        port_base=20000,
        web_port=9000,
        mongodb_url="mongodb://db.internal:27017/",
        graph_url="https://graph.facebook.com/",
    )
    assert s.web_port == 9000 and s.redis_port == 20002
    assert s.mongodb_url == "mongodb://db.internal:27017/"
    assert s.graph_url == "https://graph.facebook.com"
    assert s.redis_url == "redis://127.0.0.1:20002/0"


def test_the_plan_leaves_out_metrics_that_are_off_and_servers_that_are_external() -> None:
    s = Settings(
        port_base=20000, dispatcher_metrics_port=0, redis_url="redis://cache.internal:6379/0"
    )
    uses = planned_ports(s, workers=2)
    assert [(u.component, u.port) for u in uses] == [
        ("mongodb", 20003),
        ("sandbox", 20001),
        ("worker-1", 20005),
        ("worker-2", 20006),
        ("web", 20000),
    ]
    assert uses[3].variable == "RULEENGINE_WORKER_METRICS_PORT (+1 for worker-2)"


def test_a_plan_with_a_port_twice_or_port_zero_names_the_settings() -> None:
    s = Settings(web_port=8081, mongodb_port=0)
    problems = plan_problems(planned_ports(s, workers=1))
    assert problems == [
        "RULEENGINE_MONGODB_PORT is 0: mongodb needs a fixed port; set RULEENGINE_MONGODB_PORT,"
        " or move the whole stack with RULEENGINE_PORT_BASE (ruleengine up --port-base N)",
        "sandbox and web would both listen on port 8081: set RULEENGINE_SANDBOX_PORT or"
        " RULEENGINE_WEB_PORT to another port",
    ]


def test_a_port_with_a_listener_is_refused_by_name_and_setting() -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        assert port_free(port) is not None
        with pytest.raises(PortsUnavailable) as refused:
            check_ports(Settings(dispatcher_metrics_port=port, port_base=40000), workers=1)
    message = str(refused.value)
    assert f"port {port} (dispatcher) on 127.0.0.1 is not free" in message
    assert "set RULEENGINE_DISPATCHER_METRICS_PORT" in message
    assert port_free(port) is None  # closed: free again


def test_restarts_back_off_doubling_up_to_a_ceiling() -> None:
    assert [restart_delay_s(n) for n in range(1, 7)] == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]
