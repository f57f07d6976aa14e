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


class Server:
    def __init__(self, *extra_args, max_model_len=1024):
        if not pathlib.Path(LOOM).exists():
            pytest.skip(f"{LOOM} not built")
        if not pathlib.Path(MODEL).exists():
            pytest.skip(f"{MODEL} missing (scripts/fetch_model.sh)")
        self.log = tempfile.NamedTemporaryFile("w+", prefix="loom-serve-", suffix=".log", delete=False)
        args = [LOOM, "serve", "--model", MODEL, "--port", "0", "--max-model-len", str(max_model_len),
                "--kv-cache-memory", "512MiB", *extra_args]
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=self.log)
        self.port = None
        deadline = time.time() + 120
        while time.time() < deadline:
            text = pathlib.Path(self.log.name).read_text(errors="replace")
            m = re.search(r"listening on http://[^:]+:(\d+)", text)
            if m:
                self.port = int(m.group(1))
                break
            if self.proc.poll() is not None:
                raise RuntimeError(f"loom serve exited early:\n{text}")
            time.sleep(0.1)
        if self.port is None:
            self.stop()
            raise RuntimeError("loom serve did not start in time")
        self.url = f"http://127.0.0.1:{self.port}"

    def logs(self):
        return pathlib.Path(self.log.name).read_text(errors="replace")

    def metrics(self, headers=None):
        text = requests.get(self.url + "/metrics", headers=headers, timeout=10).text
        out = {}
        for line in text.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
        return out

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


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
