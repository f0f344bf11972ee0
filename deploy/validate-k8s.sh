#!/usr/bin/env bash
# deploy/validate-k8s.sh: offline checks of the Kubernetes manifests in deploy/k8s. No cluster.
#
#   1. kubernetes-validate --strict: every manifest in deploy/k8s (kustomization.yaml files
#      are not Kubernetes resources and are skipped) against the API schemas of Kubernetes
#      1.27 (the oldest we support: native gRPC probes are GA there) and of the newest version
#      the installed kubernetes-validate ships. Unknown fields, wrong types, missing required
#      fields and a kind or apiVersion that version does not serve all fail.
#   2. Invariants the schemas cannot see (terminationGracePeriodSeconds covers preStop + drain,
#      probes on the gRPC port, non-root, read-only root filesystem, ...): check_invariants.
#      A pod with an `edge` container (deploy/k8s/edge) has its own: the server on 127.0.0.1
#      only (--listen, --http_listen), no --health_listen, no TLS, no container port but
#      metrics, --trusted_proxies trusting the loopback edge, exec probes (`tensorcompute
#      health`) on the loopback listener; the edge
#      non-root on a read-only root filesystem, TLS from a read-only Secret volume, limits,
#      tcpSocket probes on 8443, a preStop that quits nginx gracefully after the server's
#      preStop sleep and outlives the server's drain within the grace period; no Service port
#      reaching 50051 (only https 8443 and metrics); a NetworkPolicy admitting 8443 and, from
#      chosen sources, 9090 only.
#   3. With kubectl (or kustomize) on PATH: 1 and 2 again on what `kubectl kustomize` renders
#      for deploy/k8s (CPU), deploy/k8s/gpu, deploy/k8s/secure (TLS and tokens from
#      Secrets, probes on the plaintext health port), deploy/k8s/sharded (a StatefulSet of
#      one pod per shard of a table; its shards bring TLS and tokens to each other's sub-calls
#      when they require them), deploy/k8s/sharded-secure (it with TLS and tokens) and
#      deploy/k8s/edge (nginx in front of the server on loopback); without it, says "skipped"
#      (step 1 still validates each overlay's own manifests, such as
#      deploy/k8s/edge/networkpolicy.yaml).
#   4. deploy/monitoring: the Prometheus Operator CRDs kept in deploy/monitoring/crds pass
#      kubernetes-validate (they are CustomResourceDefinitions), and the ServiceMonitor and
#      PrometheusRule are valid against those CRDs' openAPIV3Schema, unknown fields refused
#      (tests/deploy/validate_custom_resources.py, with jsonschema); with kubectl, the same for
#      what `kubectl kustomize deploy/monitoring` renders, its ConfigMap through
#      kubernetes-validate. (tests/deploy/monitoring_test.py checks their PromQL.)
#
# kubernetes-validate: $KUBERNETES_VALIDATE, else <repo>/.venv/bin/kubernetes-validate
# (tools/install-deps.sh installs it there). Missing: exit 77, which ctest reports as skipped.
# Exit status: 0 all passed, 1 a check failed, 77 skipped.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
k8s_dir=$repo/deploy/k8s
oldest_version=1.27.0

kv=${KUBERNETES_VALIDATE:-$repo/.venv/bin/kubernetes-validate}
if [[ ! -x $kv ]]; then
  echo "SKIPPED: kubernetes-validate not found at $kv" \
       "(run tools/install-deps.sh, or set KUBERNETES_VALIDATE)"
  exit 77
fi

# The Python that runs kubernetes-validate (its shebang) has PyYAML, a dependency of it.
python=()
read -r -a python < <(head -n 1 "$kv" | sed -n 's/^#! *//p')
if ((${#python[@]} == 0)) || ! "${python[@]}" -c 'import yaml, kubernetes_validate' 2>/dev/null; then
  python=("$(dirname "$kv")/python3")
  if ! "${python[@]}" -c 'import yaml, kubernetes_validate' 2>/dev/null; then
    echo "FAILED: found $kv but no Python with yaml and kubernetes_validate beside it"
    exit 1
  fi
fi
newest_version=$("${python[@]}" -c \
  'import kubernetes_validate.utils as u; print(u.latest_version())')
versions=("$oldest_version")
if [[ $newest_version != "$oldest_version" ]]; then versions+=("$newest_version"); fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0

# validate LABEL FILE...: kubernetes-validate --strict against every version in $versions.
# It only warns (exit 0) about a kind/apiVersion it has no schema for, e.g. a typo in `kind`
# or an API removed in that version: such a WARN counts as a failure here.
validate() {
  local label=$1
  shift
  local args=(--strict) version
  for version in "${versions[@]}"; do args+=(-k "$version"); done
  local rc=0
  "$kv" "${args[@]}" "$@" >"$tmp/out" 2>&1 || rc=$?
  cat "$tmp/out"
  if ((rc != 0)) || grep -qE '^(WARN|ERROR|FATAL)' "$tmp/out"; then
    echo "FAILED: $label: kubernetes-validate (exit $rc)"
    failed=1
  else
    echo "ok: $label: $# file(s) valid for Kubernetes ${versions[*]} (strict)"
  fi
}

# check_invariants LABEL FILE...: the files together are one set of resources (one variant).
check_invariants() {
  local label=$1
  shift
  if "${python[@]}" - "$@" <<'PYTHON'; then
import math
import re
import sys

import yaml

GRPC_PORT = 50051
# The edge (deploy/k8s/edge): a container named `edge`, nginx with deploy/edge/nginx.conf, serves
# TLS on EDGE_PORT and forwards to the server's gRPC and HTTP ports on the pod's loopback (the
# conf's upstreams: 127.0.0.1:50051 and 127.0.0.1:8000).
EDGE_CONTAINER = "edge"
EDGE_IMAGE = "tensorcompute-edge"
EDGE_PORT = 8443
LOOPBACK = "127.0.0.1"
EDGE_HTTP_PORT = 8000
METRICS_PORT = 9090
# After --drain_timeout_s the server may still take this long to exit: grpc::Server::Shutdown
# gets 1 s more, then it waits up to 5 s for cancelled tasks (Server::DoDrain, server/server.cc).
DRAIN_SLACK_S = 6

docs = []
for path in sys.argv[1:]:
    with open(path) as f:
        try:
            docs += [d for d in yaml.safe_load_all(f) if d]
        except yaml.YAMLError as e:
            sys.exit(f"  invariant: {path}: not YAML: {e}")
errors = []


def check(ok, what):
    if not ok:
        errors.append(what)


def cpu_cores(quantity):
    q = str(quantity)
    return int(q[:-1]) / 1000 if q.endswith("m") else float(q)


def sleeps(command):
    """The seconds of each `sleep N` of a preStop exec command: [sleep, N] or [sh, -c, SCRIPT]."""
    if len(command) == 2 and command[0].endswith("sleep") and command[1].isdigit():
        return [int(command[1])]
    if len(command) == 3 and command[0].endswith("sh") and command[1] == "-c":
        return [int(n) for n in re.findall(r"(?:^|[;&|\s])sleep\s+(\d+)\b", command[2])]
    return []


def option(command, name):
    """The value after `name` in an argv list (`--target X`), or None."""
    return command[command.index(name) + 1] if name in command[:-1] else None


def flags(args):
    out = {}
    for arg in args:
        m = re.fullmatch(r"--([a-z0-9_]+)(?:=(.*))?", arg)
        if m:
            out[m.group(1)] = m.group(2)
    return out


# Deployments, and the StatefulSets of sharded tables: the same pod rules.
deployments = [d for d in docs if d.get("kind") in ("Deployment", "StatefulSet")]
check(deployments, "no Deployment or StatefulSet")
for dep in deployments:
    name = f"{dep['kind']} {dep['metadata']['name']}"
    pod = dep["spec"]["template"]["spec"]
    pod_labels = dep["spec"]["template"]["metadata"].get("labels", {})
    pod_sc = pod.get("securityContext", {})
    edges = [c for c in pod["containers"] if c["name"] == EDGE_CONTAINER]
    servers = [c for c in pod["containers"] if c["name"] != EDGE_CONTAINER]
    # With an edge, the server serves on loopback only: nothing outside the pod reaches its
    # gRPC 1.51 (docs/deploy.md, "The edge").
    edge = bool(edges)
    check(servers, f"{name}: no server container")
    # Per server container: when its shutdown is over at the latest (preStop + drain + slack).
    server_stops = []
    for c in servers:
        where = f"{name} container {c['name']}"
        sc = c.get("securityContext", {})
        f = flags(c.get("args", []))
        env = {e["name"]: e for e in c.get("env", [])}
        ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}

        # Shutdown: grace > preStop + drain (+ the server's slack after the drain timeout).
        pre_stop = c.get("lifecycle", {}).get("preStop", {})
        sleep_s = 0
        if "exec" in pre_stop:
            cmd = pre_stop["exec"]["command"]
            check(len(cmd) == 2 and cmd[0].endswith("sleep") and cmd[1].isdigit(),
                  f"{where}: preStop exec is not [sleep, SECONDS]: {cmd}")
            sleep_s = int(cmd[1]) if len(cmd) == 2 and cmd[1].isdigit() else 0
        elif "sleep" in pre_stop:
            sleep_s = int(pre_stop["sleep"]["seconds"])
        check(sleep_s > 0, f"{where}: no preStop sleep (endpoints must go before SIGTERM)")
        drain = f.get("drain_timeout_s")
        check(drain is not None and drain.isdigit(), f"{where}: no --drain_timeout_s=N arg")
        drain = int(drain) if drain and drain.isdigit() else 30
        grace = pod.get("terminationGracePeriodSeconds", 30)
        check(grace > sleep_s + drain + DRAIN_SLACK_S,
              f"{where}: terminationGracePeriodSeconds {grace} <= preStop {sleep_s} + "
              f"--drain_timeout_s {drain} + {DRAIN_SLACK_S} s shutdown slack")
        server_stops.append((sleep_s, sleep_s + drain + DRAIN_SLACK_S))

        # Probes: native gRPC, on the port the server listens on.
        listen = f.get("listen") or f"0.0.0.0:{GRPC_PORT}"
        check(listen.rsplit(":", 1)[1] == str(GRPC_PORT), f"{where}: --listen={listen}")
        tls = f.get("tls_cert") is not None
        if edge:
            # Behind the edge: gRPC and HTTP on loopback only (explicitly: --listen's default
            # is 0.0.0.0), no TLS (the edge terminates it), no plaintext health listener, no
            # container port but metrics. Kubelet probes the pod's IP, so the probes are exec
            # probes of the image's CLI against the loopback listener.
            check(f.get("listen") == f"{LOOPBACK}:{GRPC_PORT}",
                  f"{where}: behind the edge, --listen={f.get('listen')} is not "
                  f"{LOOPBACK}:{GRPC_PORT}")
            check(f.get("http_listen") == f"{LOOPBACK}:{EDGE_HTTP_PORT}",
                  f"{where}: behind the edge, --http_listen={f.get('http_listen')} is not "
                  f"{LOOPBACK}:{EDGE_HTTP_PORT}")
            check(f.get("health_listen") is None,
                  f"{where}: behind the edge, --health_listen opens a gRPC listener to the "
                  f"network")
            check(not tls, f"{where}: behind the edge, the server serves no TLS (--tls_cert)")
            # Every client arrives from the edge on loopback: without the edge trusted, they
            # would all be one client of --max_inflight_share.
            trusted = (f.get("trusted_proxies") or "").split(",")
            check(LOOPBACK in trusted,
                  f"{where}: behind the edge, --trusted_proxies={f.get('trusted_proxies')} does "
                  f"not trust {LOOPBACK}, the edge's address (X-Forwarded-For)")
            check(set(ports) == {"metrics"},
                  f"{where}: behind the edge, container ports {sorted(ports, key=str)} "
                  f"(only metrics)")
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                spec = c.get(probe, {})
                cmd = spec.get("exec", {}).get("command", [])
                timeout = option(cmd, "--timeout")
                check(len(cmd) >= 2 and cmd[0].endswith("/tensorcompute") and cmd[1] == "health"
                      and option(cmd, "--target") == f.get("listen")
                      and set(spec) & {"grpc", "httpGet", "tcpSocket"} == set(),
                      f"{where}: {probe} is not an exec probe `tensorcompute health --target "
                      f"{f.get('listen')}`: {spec}")
                # The CLI's own deadline ends the check before kubelet kills it (and says so).
                check(timeout is not None and timeout.isdigit()
                      and spec.get("timeoutSeconds", 1) > int(timeout),
                      f"{where}: {probe}: --timeout {timeout} is not under timeoutSeconds "
                      f"{spec.get('timeoutSeconds', 1)}")
        else:
            check(ports.get("grpc") == GRPC_PORT,
                  f"{where}: container port grpc is not {GRPC_PORT}")
            # With --health_listen (the plaintext health-only listener) the probes may use it,
            # and with TLS they must: kubelet gRPC probes cannot speak TLS.
            health_listen = f.get("health_listen")
            health_port = int(health_listen.rsplit(":", 1)[1]) if health_listen else None
            if health_port is not None:
                check(ports.get("health") == health_port,
                      f"{where}: --health_listen={health_listen} but container port health is "
                      f"{ports.get('health')}")
            probe_ports = {health_port} if tls else {GRPC_PORT, health_port} - {None}
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                port = c.get(probe, {}).get("grpc", {}).get("port")
                check(port in probe_ports,
                      f"{where}: {probe} is not a gRPC probe on {sorted(probe_ports, key=str)}"
                      + (" (TLS: probes need the plaintext --health_listen port)" if tls
                         else ""))

        # TLS and tokens: cert and key together, mTLS only over TLS, and every file read from
        # a read-only mount of a Secret.
        check((f.get("tls_cert") is None) == (f.get("tls_key") is None),
              f"{where}: --tls_cert and --tls_key must come together")
        check(f.get("tls_client_ca") is None or tls, f"{where}: --tls_client_ca without TLS")
        secret_volumes = {v["name"] for v in pod.get("volumes", []) if "secret" in v}
        for flag in ("tls_cert", "tls_key", "tls_client_ca", "auth_token_file",
                     "shard_peer_token_file", "shard_peer_tls_ca"):
            file = f.get(flag)
            if file is None:
                continue
            mounts = [m for m in c.get("volumeMounts", [])
                      if file.startswith(m["mountPath"].rstrip("/") + "/")]
            check(any(m["name"] in secret_volumes and m.get("readOnly") is True
                      for m in mounts),
                  f"{where}: --{flag}={file} is not on a read-only Secret volume mount")

        # Security: non-root, read-only root, no privilege escalation, no capabilities.
        check(pod_sc.get("runAsNonRoot") is True and sc.get("runAsNonRoot", True) is True,
              f"{where}: runAsNonRoot is not true (pod and container)")
        check(sc.get("readOnlyRootFilesystem") is True, f"{where}: root filesystem writable")
        check(sc.get("allowPrivilegeEscalation") is False,
              f"{where}: allowPrivilegeEscalation is not false")
        check("ALL" in sc.get("capabilities", {}).get("drop", []),
              f"{where}: capabilities do not drop ALL")

        # Metrics: --metrics_listen, the metrics port and the scrape annotation agree.
        annotations = dep["spec"]["template"]["metadata"].get("annotations", {})
        metrics_port = (f.get("metrics_listen") or ":").rsplit(":", 1)[1]
        check(metrics_port == str(ports.get("metrics")) == annotations.get("prometheus.io/port"),
              f"{where}: --metrics_listen port {metrics_port!r}, container port metrics "
              f"{ports.get('metrics')} and prometheus.io/port differ")

        # --cpu_threads follows the CPU limit (a number equal to it rounded up, or $(VAR) of a
        # resourceFieldRef on limits.cpu).
        limits = c.get("resources", {}).get("limits", {})
        threads = f.get("cpu_threads")
        check("cpu" in limits and threads is not None, f"{where}: no cpu limit or --cpu_threads")
        if "cpu" in limits and threads is not None:
            m = re.fullmatch(r"\$\((\w+)\)", threads)
            if m:
                ref = env.get(m.group(1), {}).get("valueFrom", {}).get("resourceFieldRef", {})
                check(ref.get("resource") == "limits.cpu",
                      f"{where}: --cpu_threads={threads} is not an env var of limits.cpu")
            else:
                check(threads == str(math.ceil(cpu_cores(limits["cpu"]))),
                      f"{where}: --cpu_threads={threads} but the cpu limit is {limits['cpu']}")

        # Shards: a StatefulSet of one pod per shard (--shard_count), each pod its ordinal's
        # shard, and one --shard_peers target per shard; a shard has rows to load.
        if f.get("shard_count") is not None or f.get("shard_peers") is not None:
            count = f.get("shard_count") or ""
            check(count.isdigit() and int(count) >= 1, f"{where}: --shard_count={count}")
            count = int(count) if count.isdigit() else 0
            check(dep["kind"] == "StatefulSet" and dep["spec"].get("replicas") == count,
                  f"{where}: --shard_count={count} but not a StatefulSet of {count} replicas")
            check(len((f.get("shard_peers") or "").split(",")) == count,
                  f"{where}: --shard_peers does not list {count} targets")
            ref = (env.get("TC_SHARD_INDEX", {}).get("valueFrom", {}).get("fieldRef", {})
                   .get("fieldPath"))
            check(f.get("shard_index") == "$(TC_SHARD_INDEX)"
                  and ref == "metadata.labels['apps.kubernetes.io/pod-index']",
                  f"{where}: --shard_index is not the pod's ordinal")
            check(f.get("preload") is not None, f"{where}: shards but no --preload")
            # The peers are pods like this one: what its port requires, its sub-calls bring.
            peer_tls = "shard_peer_tls" in f and (f["shard_peer_tls"] or "true").lower() in (
                "true", "1", "yes", "t", "y")
            check(not tls or peer_tls,
                  f"{where}: TLS (--tls_cert) but plaintext sub-calls to the shards "
                  f"(no --shard_peer_tls)")
            check(f.get("auth_token_file") is None or f.get("shard_peer_token_file") is not None,
                  f"{where}: tokens required (--auth_token_file) but the sub-calls to the shards "
                  f"carry none (no --shard_peer_token_file)")
            check(f.get("tls_client_ca") is None or (peer_tls and tls),
                  f"{where}: mTLS (--tls_client_ca) but the sub-calls present no certificate "
                  f"(--shard_peer_tls with --tls_cert)")
            check(peer_tls or (f.get("shard_peer_tls_ca") is None
                               and f.get("shard_peer_tls_server_name") is None),
                  f"{where}: --shard_peer_tls_ca or --shard_peer_tls_server_name without "
                  f"--shard_peer_tls")
            services = {s["metadata"]["name"] for s in docs if s.get("kind") == "Service"}
            for target in (f.get("shard_peers") or "").split(","):
                host = re.sub(r"^dns:///", "", target).rsplit(":", 1)[0].split(".")[0]
                check(host in services, f"{where}: --shard_peers target {target} is no Service")

        # --device=gpu needs a GPU, and the GPU nodes' taint tolerated.
        if f.get("device") == "gpu":
            check(int(limits.get("nvidia.com/gpu", 0)) >= 1, f"{where}: gpu but no GPU limit")
            check(any(t.get("key") == "nvidia.com/gpu" for t in pod.get("tolerations", [])),
                  f"{where}: gpu but no toleration for the nvidia.com/gpu taint")

    # The edge: nginx, non-root on a read-only root filesystem (/tmp an emptyDir), TLS from a
    # read-only Secret volume, bounded resources, probes on its port, and a preStop that quits
    # it gracefully once the endpoints are gone and outlives the server's drain.
    check(len(edges) <= 1, f"{name}: more than one {EDGE_CONTAINER} container")
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    grace = pod.get("terminationGracePeriodSeconds", 30)
    for c in edges:
        where = f"{name} container {c['name']}"
        sc = c.get("securityContext", {})
        mounts = {m["mountPath"].rstrip("/"): m for m in c.get("volumeMounts", [])}
        ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
        image = re.split(r"[:@]", c.get("image", "").rsplit("/", 1)[-1])[0]
        check(image == EDGE_IMAGE, f"{where}: image {c.get('image')} is not {EDGE_IMAGE}")
        check(ports == {"https": EDGE_PORT},
              f"{where}: container ports {ports} are not https {EDGE_PORT} alone")
        check(c.get("args") is None and c.get("command") is None,
              f"{where}: command or args replace the image's nginx invocation")
        user = sc.get("runAsUser", pod_sc.get("runAsUser"))
        check(pod_sc.get("runAsNonRoot") is True and sc.get("runAsNonRoot", True) is True
              and user not in (None, 0),
              f"{where}: not non-root (runAsNonRoot, a non-zero runAsUser)")
        check(sc.get("readOnlyRootFilesystem") is True, f"{where}: root filesystem writable")
        check(sc.get("allowPrivilegeEscalation") is False,
              f"{where}: allowPrivilegeEscalation is not false")
        check("ALL" in sc.get("capabilities", {}).get("drop", []),
              f"{where}: capabilities do not drop ALL")
        tmp = mounts.get("/tmp", {})
        check("emptyDir" in volumes.get(tmp.get("name"), {}) and not tmp.get("readOnly"),
              f"{where}: /tmp (pid file, temporary paths) is not a writable emptyDir")
        tls_mount = mounts.get("/etc/tensorcompute/tls", {})
        check("secret" in volumes.get(tls_mount.get("name"), {})
              and tls_mount.get("readOnly") is True and "subPath" not in tls_mount,
              f"{where}: /etc/tensorcompute/tls is not a read-only Secret volume (no subPath)")
        limits = c.get("resources", {}).get("limits", {})
        check("cpu" in limits and "memory" in limits, f"{where}: no cpu and memory limits")
        for probe in ("readinessProbe", "livenessProbe"):
            port = c.get(probe, {}).get("tcpSocket", {}).get("port")
            check(port in (EDGE_PORT, "https"), f"{where}: {probe} is not tcpSocket on {EDGE_PORT}")
        cmd = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
        script = cmd[2] if len(cmd) == 3 else ""
        slept = sleeps(cmd)
        check(re.search(r"nginx(\s+-e\s+\S+)?\s+-s\s+quit\b", script),
              f"{where}: preStop does not `nginx -s quit` (graceful): {cmd}")
        check(slept and grace > sum(slept),
              f"{where}: preStop sleeps {slept}, not within terminationGracePeriodSeconds {grace}")
        first = re.match(r"\s*sleep\s+(\d+)\s*;", script)
        for server_sleep, server_done in server_stops:
            check(first and int(first.group(1)) >= server_sleep,
                  f"{where}: preStop does not first sleep as long as the server's preStop "
                  f"({server_sleep} s), so that the endpoints are gone before nginx quits")
            check(sum(slept) >= server_done,
                  f"{where}: preStop ({sum(slept)} s) ends before the server's drain can "
                  f"({server_done} s: preStop + --drain_timeout_s + {DRAIN_SLACK_S} s slack)")

    # Services route to these pods, by port names the container has.
    for svc in (d for d in docs if d.get("kind") == "Service"):
        selector = svc["spec"].get("selector", {})
        if selector.items() <= pod_labels.items():
            cports = [p for c in pod["containers"] for p in c.get("ports", [])]
            targets = {p.get("name") for p in cports} | {p["containerPort"] for p in cports}
            for p in svc["spec"]["ports"]:
                check(p.get("targetPort", p["port"]) in targets,
                      f"Service {svc['metadata']['name']}: targetPort {p.get('targetPort')} "
                      f"is no container port")
                if edge:
                    check(GRPC_PORT not in (p["port"], p.get("targetPort"))
                          and p.get("targetPort") != "grpc",
                          f"Service {svc['metadata']['name']}: port {p['port']} reaches the "
                          f"server's gRPC port behind the edge")
                    check(p.get("targetPort", p["port"]) in ("https", EDGE_PORT, "metrics",
                                                             METRICS_PORT),
                          f"Service {svc['metadata']['name']}: port {p['port']} is neither the "
                          f"edge's https nor metrics")

    # Behind the edge, a NetworkPolicy selecting these pods admits ingress on the edge's port
    # (from anywhere) and the metrics port (from chosen sources) only.
    if edge:
        policies = [d for d in docs if d.get("kind") == "NetworkPolicy"
                    and not d["spec"]["podSelector"].get("matchExpressions")
                    and d["spec"]["podSelector"].get("matchLabels", {}).items()
                    <= pod_labels.items()]
        check(policies, f"{name}: behind the edge, no NetworkPolicy selects its pods")
        for pol in policies:
            pname = f"NetworkPolicy {pol['metadata']['name']}"
            check("Ingress" in pol["spec"].get("policyTypes", ["Ingress"]),
                  f"{pname}: does not restrict Ingress")
            for rule in pol["spec"].get("ingress", []):
                rule_ports = [p.get("port") for p in rule.get("ports", [])]
                check(rule_ports and all(p in (EDGE_PORT, "https", METRICS_PORT, "metrics")
                                         for p in rule_ports),
                      f"{pname}: an ingress rule admits ports {rule_ports or 'all'}, not only "
                      f"{EDGE_PORT} and {METRICS_PORT}")
                check(not ({METRICS_PORT, "metrics"} & set(rule_ports)) or rule.get("from"),
                      f"{pname}: the metrics port is open to any source")

    # With an HPA on it, `replicas` (if set) is the HPA's floor: an apply never resets the
    # Deployment below what the HPA would keep.
    for hpa in (d for d in docs if d.get("kind") == "HorizontalPodAutoscaler"):
        ref = hpa["spec"]["scaleTargetRef"]
        if ref["kind"] == "Deployment" and ref["name"] == dep["metadata"]["name"]:
            check(dep["spec"].get("replicas", hpa["spec"].get("minReplicas", 1))
                  == hpa["spec"].get("minReplicas", 1),
                  f"{name}: replicas is not HorizontalPodAutoscaler "
                  f"{hpa['metadata']['name']}'s minReplicas")
            check(hpa["spec"].get("minReplicas", 1) >= 2,
                  f"HorizontalPodAutoscaler {hpa['metadata']['name']}: minReplicas < 2")

for svc in (d for d in docs if d.get("kind") == "Service" and d["spec"].get("clusterIP") == "None"):
    check(svc["spec"].get("publishNotReadyAddresses", False) is False,
          f"headless Service {svc['metadata']['name']} publishes pods that are not Ready")

for e in errors:
    print(f"  invariant: {e}")
sys.exit(1 if errors else 0)
PYTHON
    echo "ok: $label: invariants hold"
  else
    echo "FAILED: $label: invariants"
    failed=1
  fi
}

echo "kubernetes-validate $("$kv" --version) ($kv), Kubernetes ${versions[*]}"

mapfile -t manifests < <(find "$k8s_dir" -name '*.yaml' ! -name kustomization.yaml | sort)
if ((${#manifests[@]} == 0)); then
  echo "FAILED: no manifests under $k8s_dir"
  exit 1
fi
validate "deploy/k8s manifests" "${manifests[@]}"
mapfile -t base < <(find "$k8s_dir/base" -name '*.yaml' ! -name kustomization.yaml | sort)
check_invariants "deploy/k8s/base manifests" "${base[@]}"

monitoring_dir=$repo/deploy/monitoring
validate_crs=$repo/tests/deploy/validate_custom_resources.py
validate "deploy/monitoring/crds" "$monitoring_dir"/crds/*.yaml

# custom_resources LABEL FILE...: the custom resources against the CRDs in
# deploy/monitoring/crds, and the documents of other kinds through kubernetes-validate.
custom_resources() {
  local label=$1
  shift
  rm -f "$tmp/rest.yaml"
  if "${python[@]}" "$validate_crs" --crds "$monitoring_dir/crds" --rest "$tmp/rest.yaml" "$@"; then
    echo "ok: $label: custom resources valid against deploy/monitoring/crds"
  else
    echo "FAILED: $label: custom resources (against deploy/monitoring/crds)"
    failed=1
  fi
  if [[ -f $tmp/rest.yaml ]] && grep -q '^kind:' "$tmp/rest.yaml"; then
    validate "$label (other kinds)" "$tmp/rest.yaml"
  fi
}
mapfile -t monitoring < <(find "$monitoring_dir" -maxdepth 1 -name '*.yaml' \
                            ! -name kustomization.yaml | sort)
custom_resources "deploy/monitoring" "${monitoring[@]}"

render=()
if command -v kubectl >/dev/null 2>&1; then
  render=(kubectl kustomize)
elif command -v kustomize >/dev/null 2>&1; then
  render=(kustomize build)
fi
if ((${#render[@]} == 0)); then
  echo "skipped: kubectl not found: the kustomize renderings of deploy/k8s, deploy/k8s/gpu," \
       "deploy/k8s/secure, deploy/k8s/sharded, deploy/k8s/sharded-secure, deploy/k8s/edge and" \
       "deploy/monitoring are not validated (their own manifests are, above)"
else
  for variant in "" gpu secure sharded sharded-secure edge; do
    dir=deploy/k8s${variant:+/$variant}
    out=$tmp/rendered-${variant:-cpu}.yaml
    if "${render[@]}" "$repo/$dir" >"$out"; then
      validate "${render[*]} $dir" "$out"
      check_invariants "${render[*]} $dir" "$out"
    else
      echo "FAILED: ${render[*]} $dir"
      failed=1
    fi
  done
  if "${render[@]}" "$monitoring_dir" >"$tmp/rendered-monitoring.yaml"; then
    custom_resources "${render[*]} deploy/monitoring" "$tmp/rendered-monitoring.yaml"
  else
    echo "FAILED: ${render[*]} deploy/monitoring"
    failed=1
  fi
fi

if ((failed)); then
  echo "FAILED: deploy/k8s"
  exit 1
fi
echo "PASSED: deploy/k8s"
