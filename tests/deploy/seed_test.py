"""One test per requirement comment of the seed manifest (shared/seeds/display-operator.yaml).

Each test is named for what its comment requires and asserts that one thing of the rendered
base. render_test.py shows the release differs from the base only in namespace and image
tags, so these hold for the release too.
"""

from __future__ import annotations

import pytest

from tests.deploy.manifests import (
    DEPLOY,
    OPERATOR_RENDERINGS,
    Doc,
    all_containers,
    base_packages,
    build_plan,
    container,
    daemonset,
    dockerfile,
    env,
    exec_form,
    find,
    json_list,
    mounts,
    pod_spec,
    render,
    split_image,
    volume,
)

# Which image directory under deploy/images each container runs.
IMAGE_OF = {"declare": "declare", "weston": "weston", "operator": "operator", "capture": "capture"}
# The binary's main mode each container runs: its args, or its image's CMD when it has none.
MODE_OF = {"declare": "declare", "weston": "weston", "operator": "operator", "capture": "capture"}
SHELLS = {"/bin/sh", "/bin/dash", "/bin/bash", "/usr/bin/sh", "/usr/bin/dash", "/usr/bin/bash"}


def _template() -> Doc:
    return find(render("base"), "ResourceClaimTemplate", "display-gpu")


def _requests() -> dict[str, str]:
    """Request name -> device class of the operator's claim template."""
    requests = _template()["spec"]["spec"]["devices"]["requests"]
    return {r["name"]: r["exactly"]["deviceClassName"] for r in requests}


def _claims(name: str) -> list[Doc]:
    claims: list[Doc] = container(name)["resources"]["claims"]
    return claims


# --- The claim template -------------------------------------------------------------------


def test_claim_is_a_template_so_each_pod_allocates_on_its_own_node() -> None:
    assert pod_spec()["resourceClaims"] == [
        {"name": "gpu", "resourceClaimTemplateName": _template()["metadata"]["name"]}
    ]


def test_card_and_render_node_are_requested_apart() -> None:
    """The card allocates once (one mode setter); the render node is shareable."""
    assert (_requests()["display"], _requests()["render"]) == ("display-gpu", "display-render")


def test_base_ships_the_three_classes_the_template_names_in_deviceclasses_yaml() -> None:
    text = (DEPLOY / "base" / "cluster" / "deviceclasses.yaml").read_text()
    shipped = {d["metadata"]["name"] for d in render("base") if d["kind"] == "DeviceClass"}
    named = set(_requests().values())
    assert named <= shipped and all(f"name: {c}\n" in text for c in named)


def test_wires_are_requested_apart_from_the_card() -> None:
    assert _requests()["wires"] == "display-i2c"


def test_wires_belong_to_the_card_by_its_pci_address() -> None:
    assert _template()["spec"]["spec"]["devices"]["constraints"] == [
        {"requests": ["display", "wires"], "matchAttribute": "liken.sh/address"}
    ]


# --- The workload --------------------------------------------------------------------------


def test_plugin_label_on_the_workload_running_the_operator_image() -> None:
    first = pod_spec()["containers"][0]
    assert (
        daemonset()["metadata"]["labels"]["cli.liken.sh/plugin"],
        split_image(first["image"])[0],
    ) == ("display", "ghcr.io/liken-sh/display-operator")


def test_cli_image_is_built_at_the_first_containers_tag() -> None:
    """build.sh builds <first container's image>-cli at the tag it builds that image at."""
    repo, _ = split_image(pod_spec()["containers"][0]["image"])
    assert build_plan()[f"{repo}-cli"].tag == build_plan()[repo].tag


def test_max_surge_zero_so_two_pods_never_hold_one_card() -> None:
    assert daemonset()["spec"]["updateStrategy"]["rollingUpdate"]["maxSurge"] == 0


def test_max_unavailable_one_rolls_the_nodes_one_at_a_time() -> None:
    assert daemonset()["spec"]["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
    }


def test_scheduled_ahead_and_evicted_last_as_system_node_critical() -> None:
    assert pod_spec()["priorityClassName"] == "system-node-critical"


def test_runs_whatever_the_node_is_tainted_with() -> None:
    assert pod_spec()["tolerations"] == [{"operator": "Exists"}]


def test_node_labeled_display_none_gets_no_pod() -> None:
    affinity = pod_spec()["affinity"]["nodeAffinity"]
    assert affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {
            "matchExpressions": [
                {"key": "display.liken.sh/display", "operator": "NotIn", "values": ["none"]}
            ]
        }
    ]


def test_host_user_namespace_so_uevents_arrive() -> None:
    assert pod_spec()["hostUsers"] is True


def test_compositor_stops_within_five_seconds_of_sigterm() -> None:
    assert pod_spec()["terminationGracePeriodSeconds"] == 5


def test_one_process_namespace_so_the_operator_can_signal_the_compositor() -> None:
    assert pod_spec()["shareProcessNamespace"] is True


@pytest.mark.parametrize("rendering", OPERATOR_RENDERINGS)
def test_four_containers_in_the_kubelets_order(rendering: str) -> None:
    """Every rendering keeps the base's order; an overlay may drop capture, never reorder.

    A strategic-merge patch of one list item moves it to the front (kustomize #5904): weston
    would then start before declare wrote its weston.ini.
    """
    spec = pod_spec(rendering)
    containers = [c["name"] for c in spec["containers"]]
    assert (
        [c["name"] for c in spec["initContainers"]],
        containers,
    ) == (["declare", "weston"], ["operator", "capture"][: len(containers)])


def test_capture_comes_from_its_own_image() -> None:
    assert split_image(container("capture")["image"])[0] == "ghcr.io/liken-sh/display-capture"


def test_capture_image_carries_ffmpeg_with_va_api_drivers() -> None:
    # Its ffmpeg is compiled in the image's build stage (images/capture/ffmpeg.sh) with VA-API's
    # H.264 encoder; the base holds Intel's drivers, display-capture-amd adds Mesa's.
    script = (DEPLOY / "images" / "capture" / "ffmpeg.sh").read_text()
    copied = [rest for key, rest in dockerfile("capture") if key == "COPY"]
    assert "--enable-vaapi" in script and "h264_vaapi" in script
    assert "--from=ffmpeg /out/ /" in copied
    plan = build_plan()
    drivers = {repo: base_packages(plan[f"ghcr.io/liken-sh/{repo}"].build_args["BASE_IMAGE"])
               for repo in ("display-capture", "display-capture-amd")}
    assert {"intel-media-va-driver", "i965-va-driver"} <= drivers["display-capture"]
    assert "mesa-va-drivers" in drivers["display-capture-amd"]


def test_declare_writes_the_config_as_an_init_step_before_the_compositor() -> None:
    declare = pod_spec()["initContainers"][0]
    assert (declare["name"], "restartPolicy" in declare) == ("declare", False)


def test_declare_reads_displays_with_the_pods_service_account() -> None:
    rules = find(render("base"), "ClusterRole", "display-operator")["rules"]
    display_rule = next(r for r in rules if r["resources"] == ["displays"])
    assert (pod_spec()["serviceAccountName"], "get" in display_rule["verbs"]) == (
        "display-operator",
        True,
    )


def test_compositor_is_a_native_sidecar() -> None:
    assert container("weston")["restartPolicy"] == "Always"


@pytest.mark.parametrize("name", list(MODE_OF), ids=list(MODE_OF))
def test_each_container_runs_its_binarys_main_mode(name: str) -> None:
    """The seed's args are the contract; a container without args runs its image's CMD."""
    args = container(name).get("args") or exec_form(IMAGE_OF[name], "CMD")
    assert args == [MODE_OF[name]]


@pytest.mark.parametrize("name", list(IMAGE_OF), ids=list(IMAGE_OF))
def test_each_container_runs_the_image_built_for_its_binary(name: str) -> None:
    assert split_image(container(name)["image"])[0] == f"ghcr.io/liken-sh/display-{IMAGE_OF[name]}"


def test_compositor_image_runs_westonctl_and_carries_the_layout_module() -> None:
    text = (DEPLOY / "images" / "weston" / "Dockerfile").read_text()
    assert (exec_form("weston", "ENTRYPOINT")[-1], "layout-shell.so" in text) == (
        "/opt/display/westonctl/bin/westonctl",
        True,
    )


def test_compositor_has_no_startup_probe_so_the_operator_starts_at_once() -> None:
    assert "startupProbe" not in container("weston")


def test_weston_log_scopes_are_empty_by_default() -> None:
    assert env(container("weston"))["WESTON_LOG_SCOPES"] == {
        "name": "WESTON_LOG_SCOPES",
        "value": "",
    }


@pytest.mark.parametrize("name", list(MODE_OF), ids=list(MODE_OF))
def test_no_privilege_and_no_capability(name: str) -> None:
    assert container(name)["securityContext"] == {
        "capabilities": {"drop": ["ALL"]},
        "privileged": False,
        "allowPrivilegeEscalation": False,
    }


@pytest.mark.parametrize("name", ["declare", "weston", "operator"])
def test_card_is_claimed_by_the_containers_that_use_it(name: str) -> None:
    assert _claims(name) == [{"name": "gpu"}]


def test_capture_names_the_render_request_alone() -> None:
    assert _claims("capture") == [{"name": "gpu", "request": "render"}]


def test_socket_directory_is_the_hostpath_consumers_mount() -> None:
    assert (
        mounts(container("weston"))["socket"],
        mounts(container("operator"))["socket"],
        volume("socket")["hostPath"]["path"],
    ) == ("/var/run/display.liken.sh",) * 3


@pytest.mark.parametrize("name", list(MODE_OF), ids=list(MODE_OF))
def test_config_directory_is_shared_by_the_pods_containers(name: str) -> None:
    assert mounts(container(name))["weston-config"] == "/etc/weston"


def test_operator_image_holds_weston_and_wayland_info() -> None:
    base = build_plan()["ghcr.io/liken-sh/display-operator"].build_args["BASE_IMAGE"]
    assert {"weston", "wayland-utils"} <= base_packages(base)


def test_operator_image_holds_no_shell() -> None:
    removed = {
        path
        for key, args in dockerfile("operator")
        if key == "RUN" and args.startswith('["/usr/bin/rm"')
        for path in json_list(args)
    }
    assert removed >= SHELLS


def test_declare_gets_the_node_name_it_reads_displays_by() -> None:
    from declare.main import declare_cmd

    envvar = next(p.envvar for p in declare_cmd.params if p.name == "node_name")
    assert envvar == "NODE_NAME"
    assert env(container("declare"))[envvar]["valueFrom"] == {
        "fieldRef": {"fieldPath": "spec.nodeName"}
    }


def test_slice_names_its_node_from_the_downward_api() -> None:
    assert env(container("operator"))["NODE_NAME"]["valueFrom"] == {
        "fieldRef": {"fieldPath": "spec.nodeName"}
    }


def test_operator_knows_its_own_pod_for_the_compositors_restart_count() -> None:
    variables = env(container("operator"))
    assert (variables["POD_NAME"]["valueFrom"], variables["POD_NAMESPACE"]["valueFrom"]) == (
        {"fieldRef": {"fieldPath": "metadata.name"}},
        {"fieldRef": {"fieldPath": "metadata.namespace"}},
    )


def test_metrics_port_9200_is_stated_in_the_base() -> None:
    operator = container("operator")
    assert (env(operator)["METRICS_ADDR"]["value"], operator["ports"]) == (
        ":9200",
        [{"name": "metrics", "containerPort": 9200}],
    )


def test_operator_liveness_probe_is_healthz_on_the_metrics_port() -> None:
    probe = container("operator")["livenessProbe"]
    assert probe["httpGet"] == {"path": "/healthz", "port": "metrics"}
    # A stuck publisher fails /healthz after 60 s; the kubelet acts within 30 s more.
    assert (probe["periodSeconds"], probe["timeoutSeconds"], probe["failureThreshold"]) == (
        10, 5, 3)


@pytest.mark.parametrize("name", ["operator", "capture"])
def test_no_readiness_probe_to_stall_the_roll(name: str) -> None:
    assert "readinessProbe" not in container(name)


@pytest.mark.parametrize(
    ("name", "limit"),
    [("declare", "64Mi"), ("weston", "512Mi"), ("operator", "128Mi"), ("capture", "384Mi")],
)
def test_memory_limit(name: str, limit: str) -> None:
    assert container(name)["resources"]["limits"] == {"memory": limit}


def test_pod_memory_limits_add_up_to_1088_mib() -> None:
    limits = [c["resources"]["limits"]["memory"] for c in all_containers()]
    total = sum(int(limit.removesuffix("Mi")) for limit in limits)
    assert total == 1088


def test_operator_mounts_the_two_kubelet_plugin_directories() -> None:
    operator = mounts(container("operator"))
    assert (operator["kubelet-plugin"], operator["kubelet-plugins-registry"]) == (
        "/var/lib/kubelet/plugins/display.liken.sh",
        "/var/lib/kubelet/plugins_registry",
    )


def test_operator_writes_cdi_specs_where_the_runtime_reads_them() -> None:
    assert (mounts(container("operator"))["cdi"], volume("cdi")["hostPath"]["path"]) == (
        "/var/run/cdi",
        "/var/run/cdi",
    )


def test_plugin_mounts_are_writable() -> None:
    operator = container("operator")
    assert not any(m.get("readOnly") for m in operator["volumeMounts"])


def test_layout_sockets_live_in_a_volume_of_this_pod_alone() -> None:
    assert volume("weston-config") == {"name": "weston-config", "emptyDir": {}}


def test_capture_listens_on_9201_beside_the_operators_9200() -> None:
    capture = container("capture")
    assert (env(capture)["CAPTURE_ADDR"]["value"], capture["ports"]) == (
        ":9201",
        [{"name": "capture", "containerPort": 9201}],
    )


def test_capture_liveness_probe_is_https_healthz() -> None:
    assert container("capture")["livenessProbe"] == {
        "httpGet": {"path": "/healthz", "port": "capture", "scheme": "HTTPS"},
        "periodSeconds": 30,
        "failureThreshold": 3,
    }


def test_capture_reads_its_serving_leaf_read_only() -> None:
    capture_tls = next(
        m for m in container("capture")["volumeMounts"] if m["name"] == "capture-tls"
    )
    assert capture_tls == {
        "name": "capture-tls",
        "mountPath": "/var/run/display-capture-tls",
        "readOnly": True,
    }


def test_capture_tls_is_optional_so_the_pod_starts_before_the_secret() -> None:
    assert volume("capture-tls")["secret"] == {
        "secretName": "display-capture-server",
        "optional": True,
    }


def test_no_grant_on_the_capture_secret() -> None:
    rules = [
        rule
        for doc in render("base")
        if doc["kind"] in ("ClusterRole", "Role")
        for rule in doc["rules"]
    ]
    assert not [r for r in rules if "secrets" in r["resources"]]


@pytest.mark.parametrize("name", ["kubelet-plugin", "kubelet-plugins-registry", "cdi", "socket"])
def test_host_paths_are_created_on_a_node_that_never_ran_a_driver(name: str) -> None:
    assert volume(name)["hostPath"]["type"] == "DirectoryOrCreate"
