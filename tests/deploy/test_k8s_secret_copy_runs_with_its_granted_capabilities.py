"""deploy/k8s's secret-file init container does its job with what the manifest grants it: its command, as
the manifest says it (paths under its volume mounts moved to scratch directories), run as root with only
the capabilities it adds to ALL dropped (setpriv: bounding set, no inheritable or ambient ones) and no new
privileges, leaves the secret owner-only and the kvstore container's user's, and that user's kvstore
reads it. Kubernetes gives a container its capability sets exactly so; a copy that needs one more fails
here as the pod would (GNU install chowns before it chmods: without CAP_FOWNER, root may not chmod the
file it just gave away)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from kvstore.config.secret_file import new_secret_file
from tests.deploy.run_as import read_secret_as, require_root_and_setpriv, shared_scratch
from tests.deploy.test_k8s_manifests_are_valid_and_consistent import WORKLOADS, of_kind

SECRET_KEY = "cluster-secret"  # the Secret's key (master.yaml: --from-file=cluster-secret=...)


def secret_copiers() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [
        (workload, init)
        for workload in of_kind(*WORKLOADS)
        for init in workload["spec"]["template"]["spec"].get("initContainers", [])
        if init["name"] == "secret-file"
    ]


def setpriv_options(pod: dict[str, Any], container: dict[str, Any]) -> list[str]:
    """The user, group, capabilities and no_new_privs the container runs with, as setpriv options."""
    context = {**pod["securityContext"], **container["securityContext"]}
    capabilities = context["capabilities"]
    assert capabilities["drop"] == ["ALL"], container["name"]  # (else the runtime's default set applies)
    added = "".join(f",+{name.lower()}" for name in capabilities.get("add", []))
    options = [
        f"--reuid={context['runAsUser']}",
        f"--regid={context['runAsGroup']}",
        "--clear-groups",
        "--inh-caps=-all",
        "--ambient-caps=-all",
        f"--bounding-set=-all{added}",
    ]
    if context.get("allowPrivilegeEscalation") is False:
        options.append("--no-new-privs")
    return options


def scratch_volumes(pod: dict[str, Any], container: dict[str, Any], scratch: Path) -> dict[str, Path]:
    """Each of the container's mount paths -> a scratch directory made as Kubernetes makes that volume:
    a Secret's files root's with its defaultMode, an emptyDir world-writable."""
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounted = {}
    for mount in container["volumeMounts"]:
        place = scratch / mount["name"]
        place.mkdir()
        volume = volumes[mount["name"]]
        if "secret" in volume:
            new_secret_file(place / SECRET_KEY)
            (place / SECRET_KEY).chmod(volume["secret"]["defaultMode"])
        else:
            assert "emptyDir" in volume, mount["name"]
            place.chmod(0o777)
        mounted[mount["mountPath"]] = place
    return mounted


def moved(arg: str, mounted: dict[str, Path]) -> str:
    for path, place in mounted.items():
        arg = arg.replace(path + "/", f"{place}/")
    return arg


@pytest.mark.parametrize(
    "workload, init", secret_copiers(), ids=[w["metadata"]["name"] for w, _ in secret_copiers()]
)
def test_the_secret_copy_runs_with_only_its_granted_capabilities(
    workload: dict[str, Any], init: dict[str, Any]
) -> None:
    setpriv = require_root_and_setpriv()
    pod = workload["spec"]["template"]["spec"]
    (kvstore,) = pod["containers"]
    secret_file = {e["name"]: e.get("value") for e in kvstore["env"]}["KVSTORE_CLUSTER_SECRET_FILE"]
    with shared_scratch() as scratch:
        mounted = scratch_volumes(pod, init, scratch)
        command = [moved(arg, mounted) for arg in init["command"]]
        ran = subprocess.run(
            [setpriv, *setpriv_options(pod, init), "--", *command], capture_output=True, text=True, timeout=60
        )
        assert ran.returncode == 0, f"{init['command']}: {ran.stderr}"
        copy = Path(moved(secret_file, mounted))
        given = next(p for p in mounted.values() if (p / SECRET_KEY).exists()) / SECRET_KEY
        assert copy.read_bytes() == given.read_bytes()
        user, group = pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]
        info = copy.stat()
        assert (info.st_uid, info.st_gid, info.st_mode & 0o777) == (user, group, 0o400)
        read = read_secret_as(user, group, copy)
        assert read.returncode == 0, read.stderr
