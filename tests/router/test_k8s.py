"""deploy/k8s/: the manifests parse, hang together (selectors, ports, the
headless Service the router resolves, probes on routes loom answers) and use
only flags `loom serve` / `loom router` have."""
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy/k8s"


def flags(*sources):
    """Every --flag the sources declare (CLI11 names: "model,--model",
    "--x,!--no-x")."""
    out = set()
    for src in sources:
        for names in re.findall(r'add_(?:option|flag)\(\s*"([^"]+)"', (ROOT / src).read_text()):
            out.update(n.lstrip("!") for n in names.split(",") if n.lstrip("!").startswith("--"))
    return out


@pytest.fixture(scope="module")
def docs():
    yaml = pytest.importorskip("yaml")
    kust = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    out = {}
    for name in kust["resources"]:
        for doc in yaml.safe_load_all((K8S / name).read_text()):
            out[(doc["kind"], doc["metadata"]["name"])] = doc
    return out


def container(deployment):
    (c,) = deployment["spec"]["template"]["spec"]["containers"]
    return c


def arg_value(args, flag):
    for a in args:
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    raise AssertionError(f"{flag} not in {args}")


def test_selectors_and_ports_match(docs):
    for kind, name in [k for k in docs if k[0] == "Deployment"]:
        d = docs[(kind, name)]
        labels = d["spec"]["template"]["metadata"]["labels"]
        assert d["spec"]["selector"]["matchLabels"].items() <= labels.items(), name
    for (kind, name), svc in docs.items():
        if kind != "Service":
            continue
        targets = [d for (k, _), d in docs.items() if k == "Deployment" and
                   svc["spec"]["selector"].items() <= d["spec"]["template"]["metadata"]["labels"].items()]
        assert len(targets) == 1, f"Service {name} selects {len(targets)} Deployments"
        port_names = {p["name"] for p in container(targets[0])["ports"]}
        for p in svc["spec"]["ports"]:
            assert p["targetPort"] in port_names


def test_replicas(docs):
    d = docs[("Deployment", "loom-replica")]
    c = container(d)
    assert c["args"][0] == "serve"
    used = {a.split("=", 1)[0] for a in c["args"][1:]}
    assert used <= flags("tools/cmd_serve.cpp", "tools/cmd_runtime.cpp"), used
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert c["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert c["livenessProbe"]["httpGet"]["path"] == "/health"
    mount = c["volumeMounts"][0]
    assert arg_value(c["args"], "--model").startswith(mount["mountPath"] + "/")
    vol = d["spec"]["template"]["spec"]["volumes"][0]
    assert vol["name"] == mount["name"]
    assert ("PersistentVolumeClaim", vol["persistentVolumeClaim"]["claimName"]) in docs
    # Draining (--shutdown-timeout) fits in the grace period.
    grace = d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert int(arg_value(c["args"], "--shutdown-timeout")) < grace


def test_router_points_at_the_headless_service(docs):
    headless = docs[("Service", "loom-replicas")]
    assert headless["spec"]["clusterIP"] == "None"
    c = container(docs[("Deployment", "loom-router")])
    assert c["args"][0] == "router"
    used = {a.split("=", 1)[0] for a in c["args"][1:]}
    assert used <= flags("tools/cmd_router.cpp"), used
    host, port = arg_value(c["args"], "--backends-dns").rsplit(":", 1)
    assert host.split(".")[0] == "loom-replicas"
    assert int(port) in {p["port"] for p in headless["spec"]["ports"]}
    assert c["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert c["livenessProbe"]["httpGet"]["path"] == "/health"
    assert "nvidia.com/gpu" not in str(c["resources"])


def test_model_volume_modes_match_how_it_is_filled(docs):
    """The README fills the volume through the loader pod (read-write), and the
    replicas read it: the claim's mode must allow both."""
    yaml = pytest.importorskip("yaml")
    pvc = docs[("PersistentVolumeClaim", "loom-models")]
    assert "ReadWriteMany" in pvc["spec"]["accessModes"]
    loader = yaml.safe_load((K8S / "model-loader.yaml").read_text())
    (vol,) = loader["spec"]["volumes"]
    assert vol["persistentVolumeClaim"]["claimName"] == "loom-models"
    assert not vol["persistentVolumeClaim"].get("readOnly", False)
    (c,) = loader["spec"]["containers"]
    assert not c["volumeMounts"][0].get("readOnly", False)
    replica = docs[("Deployment", "loom-replica")]
    assert container(replica)["volumeMounts"][0]["readOnly"] is True
    # The README copies the model to the path the replicas' --model names.
    readme = (K8S / "README.md").read_text()
    model = arg_value(container(replica)["args"], "--model")
    assert f"loom-model-loader:{model}" in readme
    for f in re.findall(r"deploy/k8s/([a-z-]+\.yaml)", readme):
        assert (K8S / f).exists(), f
    for f in re.findall(r"-f (deploy/docker/[A-Za-z.]+)", readme):
        assert (ROOT / f).exists(), f
