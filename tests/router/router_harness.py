"""Helpers of tests/router: starts `loom router`, and `loom serve` replicas
through tests/server/conftest.py's Server (loaded under another module name:
two modules named conftest would collide in one pytest run)."""
import importlib.util
import os
import pathlib
import re
import signal
import subprocess
import tempfile
import time

import pytest
import requests

ROOT = pathlib.Path(__file__).resolve().parents[2]
LOOM = os.environ.get("LOOM_BIN", str(ROOT / "build/cpu/loom"))

_spec = importlib.util.spec_from_file_location("server_conftest", ROOT / "tests/server/conftest.py")
server_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(server_conftest)
Server = server_conftest.Server
MODEL_NAME = server_conftest.MODEL_NAME


def parse_metrics(text):
    """{'name{labels}': value} of a Prometheus text exposition."""
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, _, value = line.rpartition(" ")
        out[name] = float(value)
    return out


class Router:
    def __init__(self, backends, *extra_args):
        if not pathlib.Path(LOOM).exists():
            pytest.skip(f"{LOOM} not built")
        self.log = tempfile.NamedTemporaryFile("w+", prefix="loom-router-", suffix=".log", delete=False)
        defaults = [] if "--health-interval" in extra_args else ["--health-interval", "0.3"]
        listed = ["--backends", ",".join(backends)] if backends else []
        args = [LOOM, "router", *listed, "--port", "0",
                "--health-timeout", "1", *defaults, *extra_args]
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=self.log)
        self.port = None
        deadline = time.time() + 20
        while time.time() < deadline:
            m = re.search(r"listening on http://[^:]+:(\d+)", self.logs())
            if m:
                self.port = int(m.group(1))
                break
            if self.proc.poll() is not None:
                raise RuntimeError(f"loom router exited early:\n{self.logs()}")
            time.sleep(0.05)
        if self.port is None:
            self.stop()
            raise RuntimeError("loom router did not start in time")
        self.url = f"http://127.0.0.1:{self.port}"

    def logs(self):
        return pathlib.Path(self.log.name).read_text(errors="replace")

    def metrics(self):
        return parse_metrics(requests.get(self.url + "/metrics", timeout=10).text)

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
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode
