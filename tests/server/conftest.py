"""Starts `loom serve` for the end-to-end tests.

LOOM_BIN: the loom binary (default build/cpu/loom); LOOM_TEST_MODEL: a model
with a tokenizer and chat template (default the README's default model,
models/qwen2.5-coder-0.5b-instruct.gguf, fetched by scripts/fetch_model.sh).
"""
import json
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
MODEL = os.environ.get("LOOM_TEST_MODEL", str(ROOT / "models/qwen2.5-coder-0.5b-instruct.gguf"))
MODEL_NAME = pathlib.Path(MODEL).stem


def parse_metrics(text):
    """{'name{labels}': value} of a Prometheus text exposition."""
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, _, value = line.rpartition(" ")
        out[name] = float(value)
    return out


class LoomProcess:
    """A loom subcommand listening on a free port (--port 0): started, its
    port read from its log, metrics parsed, stopped by a signal."""

    def __init__(self, args, what, startup_s, poll_s=0.1):
        self.log = tempfile.NamedTemporaryFile("w+", prefix=f"loom-{what}-", suffix=".log", delete=False)
        self.proc = subprocess.Popen([LOOM, *args], stdout=self.log, stderr=self.log)
        self.port = None
        deadline = time.time() + startup_s
        while time.time() < deadline:
            m = re.search(r"listening on http://[^:]+:(\d+)", self.logs())
            if m:
                self.port = int(m.group(1))
                break
            if self.proc.poll() is not None:
                raise RuntimeError(f"loom {what} exited early:\n{self.logs()}")
            time.sleep(poll_s)
        if self.port is None:
            self.stop()
            raise RuntimeError(f"loom {what} did not start in time")
        self.url = f"http://127.0.0.1:{self.port}"

    def logs(self):
        return pathlib.Path(self.log.name).read_text(errors="replace")

    def metrics(self, headers=None):
        return parse_metrics(requests.get(self.url + "/metrics", headers=headers, timeout=10).text)

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


class Server(LoomProcess):
    def __init__(self, *extra_args, max_model_len=1024):
        if not pathlib.Path(LOOM).exists():
            pytest.skip(f"{LOOM} not built")
        if not pathlib.Path(MODEL).exists():
            pytest.skip(f"{MODEL} missing (scripts/fetch_model.sh)")
        super().__init__(["serve", "--model", MODEL, "--port", "0", "--max-model-len", str(max_model_len),
                          "--kv-cache-memory", "512MiB", *extra_args], "serve", startup_s=120)


@pytest.fixture(scope="session")
def server():
    s = Server()
    yield s
    s.stop()


@pytest.fixture(scope="session")
def client(server):
    openai = pytest.importorskip("openai")
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300)


def write_json(obj):
    f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump(obj, f)
    f.close()
    return f.name
