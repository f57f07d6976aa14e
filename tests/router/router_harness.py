"""Helpers of tests/router: starts `loom router`, and `loom serve` replicas
through tests/server/conftest.py's Server (loaded under another module name:
two modules named conftest would collide in one pytest run)."""
import importlib.util
import os
import pathlib
import re
import signal
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
LOOM = os.environ.get("LOOM_BIN", str(ROOT / "build/cpu/loom"))

_spec = importlib.util.spec_from_file_location("server_conftest", ROOT / "tests/server/conftest.py")
server_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(server_conftest)
Server = server_conftest.Server
MODEL_NAME = server_conftest.MODEL_NAME
parse_metrics = server_conftest.parse_metrics


class Router(server_conftest.LoomProcess):
    def __init__(self, backends, *extra_args):
        if not pathlib.Path(LOOM).exists():
            pytest.skip(f"{LOOM} not built")
        defaults = [] if "--health-interval" in extra_args else ["--health-interval", "0.3"]
        listed = ["--backends", ",".join(backends)] if backends else []
        super().__init__(["router", *listed, "--port", "0", "--health-timeout", "1", *defaults, *extra_args],
                         "router", startup_s=20, poll_s=0.05)

    def requests_by_backend(self, route):
        """{backend URL: requests answered 200 on `route`}."""
        out = {}
        for key, value in self.metrics().items():
            m = re.match(r'loom_router_requests_total\{backend="([^"]+)",route="([^"]+)",status="200"\}', key)
            if m and m.group(2) == route:
                out[m.group(1)] = out.get(m.group(1), 0) + value
        return out

    def wait_for(self, predicate, timeout=10):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if predicate(self.metrics()):
                return True
            time.sleep(0.1)
        return False

    def stop(self, sig=signal.SIGTERM, timeout=20):
        return super().stop(sig, timeout)
