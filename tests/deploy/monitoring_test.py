"""deploy/monitoring against the real server: every PromQL expression of the Grafana dashboard
and of the alerting rules refers only to series and labels tensorcompute-server exports.

Two servers hold the two shards of a table and route to each other; the first also serves KServe
over HTTP. A third holds the table on disk (the families of tables on disk). Traffic through them touches every family: Gather, GatherNd and EmbeddingBag with
params inline and on a resident table, a lookup routed across the shards, errors (a bad index,
an unknown table, a put of a name in use), ListTensors, and KServe inference over HTTP. Their
/metrics, parsed by prometheus_client, is the catalogue the expressions are checked against
(promql_refs.py: metric names, matcher labels and values, by/without/on/ignoring labels,
histogram_quantile over le, rate of counters only, both sides of a binary operator alike).

The same scrape keeps docs/deploy.md's table of metrics true: it names exactly the
tensorcompute_* families the servers export, each with its type and labels (the code in
server/prometheus_metrics.cc is the one list of families; the table is the operator's view).

One family cannot be scraped here: tensorcompute_gpu_stage_duration_seconds exists only on a
server with a GPU. It is checked against its row in docs/deploy.md instead (GPU_ONLY_FAMILIES),
and against the scrape when a GPU is there.

Also, without a server: the checker itself on expressions known to be wrong; each panel has a
target, the template variables are defined, each alert has for, severity, summary and
description; the ServiceMonitor selects the base Service's metrics port.

Run by ctest from tests/deploy (tests/testing on PYTHONPATH) with TC_SERVER_BINARY set and the
`tensorcompute` package installed (python_client.install).
"""

import copy
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

import numpy as np
import yaml

import validate_custom_resources
from promql_refs import (GRPC_CODES, TARGET_LABELS, Catalogue, check_expression,
                         check_variable_query, documented_families, exposed_families,
                         metric_names)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MONITORING = os.path.join(REPO, "deploy", "monitoring")
DASHBOARD = os.path.join(MONITORING, "grafana-dashboard.json")
RULES = os.path.join(MONITORING, "prometheus-rules.yaml")
SERVICE_MONITOR = os.path.join(MONITORING, "servicemonitor.yaml")
KUSTOMIZATION = os.path.join(MONITORING, "kustomization.yaml")
BASE = os.path.join(REPO, "deploy", "k8s", "base")
METRICS_DOC = os.path.join(REPO, "docs", "deploy.md")  # its table of metrics

# Families that only a server with a GPU exports, checked against docs/deploy.md's table when
# the scrape lacks them (stage: the three steps of a GPU batch). Every other documented family
# is exported by the servers of ExportedSeriesTest (sharded, with resident tables and KServe).
GPU_ONLY_FAMILIES = {"tensorcompute_gpu_stage_duration_seconds"}
GPU_STAGES = {"copy_in", "kernel", "copy_out"}
SEVERITIES = {"critical", "warning", "info"}


def load_yaml(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def load_dashboard():
    with open(DASHBOARD) as f:
        return json.load(f)


def all_panels(panels):
    """Panels, with those inside rows (collapsed rows hold theirs)."""
    for panel in panels:
        yield panel
        yield from all_panels(panel.get("panels", []))


def dashboard_expressions(dashboard):
    """[(where, kind, text)]: kind "expr" for panel targets, "variable" for variable queries."""
    out = []
    for panel in all_panels(dashboard.get("panels", [])):
        for target in panel.get("targets", []):
            if "expr" in target:
                out.append((f"panel {panel.get('title')!r} {target.get('refId')}", "expr",
                            target["expr"]))
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("type") != "query":
            continue
        query = var.get("query")
        query = query.get("query") if isinstance(query, dict) else query
        out.append((f"variable ${var['name']}", "variable", query))
        if var.get("definition") and var["definition"] != query:
            out.append((f"variable ${var['name']} (definition)", "variable", var["definition"]))
    return out


def rule_expressions(docs):
    out = []
    for doc in docs:
        for group in doc["spec"]["groups"]:
            for rule in group["rules"]:
                name = rule.get("alert") or rule.get("record")
                out.append((f"rule {name}", "expr", str(rule["expr"])))
    return out


def check_all(expressions, catalogue, label_values):
    problems = []
    for where, kind, text in expressions:
        check = check_expression if kind == "expr" else check_variable_query
        problems += [f"{where}: {p}" for p in check(text, catalogue, label_values)]
    return problems


# A small exposition in the server's format, for the checker's own tests.
EXPOSITION = """\
# TYPE tensorcompute_requests_total counter
tensorcompute_requests_total{code="OK",rpc="Gather"} 3
tensorcompute_requests_total{code="INVALID_ARGUMENT",rpc="Gather"} 1
# TYPE tensorcompute_request_duration_seconds histogram
tensorcompute_request_duration_seconds_bucket{rpc="Gather",le="0.1"} 4
tensorcompute_request_duration_seconds_bucket{rpc="Gather",le="+Inf"} 4
tensorcompute_request_duration_seconds_sum{rpc="Gather"} 0.01
tensorcompute_request_duration_seconds_count{rpc="Gather"} 4
# TYPE tensorcompute_queue_depth gauge
tensorcompute_queue_depth 0
# TYPE tensorcompute_queue_capacity gauge
tensorcompute_queue_capacity 1024
# TYPE tensorcompute_executor_busy_seconds_total counter
tensorcompute_executor_busy_seconds_total{device="cpu"} 0.5
# TYPE tensorcompute_executor_slots gauge
tensorcompute_executor_slots{device="cpu"} 2
"""


class PromqlCheckerTest(unittest.TestCase):
    """The checker finds what it must, on expressions known to be right or wrong."""

    @classmethod
    def setUpClass(cls):
        cls.catalogue = Catalogue.from_scrape(EXPOSITION)
        cls.values = {"code": GRPC_CODES}

    def problems(self, expr):
        return check_expression(expr, self.catalogue, self.values)

    def assertProblem(self, expr, *words):
        problems = self.problems(expr)
        self.assertTrue(problems, f"no problem found in {expr}")
        text = " ".join(problems)
        for word in words:
            self.assertIn(word, text, problems)

    def test_right_expressions_pass(self):
        for expr in [
            'sum by (rpc, code) (rate(tensorcompute_requests_total{namespace=~"$namespace", '
            'pod=~"$pod"}[$__rate_interval]))',
            'histogram_quantile(0.99, sum by (le, rpc) (rate('
            'tensorcompute_request_duration_seconds_bucket{rpc=~"Gather|GatherNd"}[5m])))',
            'sum(rate(tensorcompute_requests_total{code!~"OK|INVALID_ARGUMENT"}[5m])) / '
            'sum(rate(tensorcompute_requests_total[5m])) > 0.05',
            'sum by (pod, device) (rate(tensorcompute_executor_busy_seconds_total[5m])) / '
            'sum by (pod, device) (tensorcompute_executor_slots)',
            'tensorcompute_queue_depth / tensorcompute_queue_capacity > 0.8',
            'sum without (code) (rate(tensorcompute_requests_total[5m]))',
            'rate(tensorcompute_executor_busy_seconds_total[5m]) / on (device) '
            'group_left tensorcompute_executor_slots',
            'count(tensorcompute_queue_depth == 0) or vector(0)',
        ]:
            self.assertEqual(self.problems(expr), [], expr)

    def test_a_misspelt_metric_is_found(self):
        self.assertProblem("sum(rate(tensorcompute_request_total[5m]))",
                           "tensorcompute_request_total is not exported",
                           "did you mean tensorcompute_requests_total")
        # A histogram's family name is not a series: its _bucket, _sum and _count are.
        self.assertProblem("rate(tensorcompute_request_duration_seconds[5m])",
                           "tensorcompute_request_duration_seconds is not exported")

    def test_a_misspelt_label_is_found(self):
        self.assertProblem('rate(tensorcompute_requests_total{rcp="Gather"}[5m])',
                           "label rcp is not on tensorcompute_requests_total")
        self.assertProblem("sum by (rpc, coed) (rate(tensorcompute_requests_total[5m]))",
                           "by (coed)")
        self.assertProblem("sum without (device) (rate(tensorcompute_requests_total[5m]))",
                           "without (device)")
        # by() applies to what is inside: rpc is gone after sum by (code).
        self.assertProblem("sum by (rpc) (sum by (code) (rate(tensorcompute_requests_total[5m])))",
                           "by (rpc)")

    def test_a_misspelt_label_value_is_found(self):
        self.assertProblem('rate(tensorcompute_requests_total{code!~"OK|INVALID_ARGUMNET"}[5m])',
                           "no such value 'INVALID_ARGUMNET'", "INVALID_ARGUMENT")
        self.assertEqual(self.problems(
            'rate(tensorcompute_requests_total{code="UNAVAILABLE"}[5m])'), [])

    def test_histogram_quantile_needs_le(self):
        self.assertProblem("histogram_quantile(0.99, sum by (rpc) (rate("
                           "tensorcompute_request_duration_seconds_bucket[5m])))", "without le")

    def test_rate_of_a_gauge_is_found(self):
        self.assertProblem("rate(tensorcompute_queue_depth[5m])",
                           "rate() of tensorcompute_queue_depth")

    def test_sides_that_cannot_match_are_found(self):
        self.assertProblem("sum by (device) (rate(tensorcompute_executor_busy_seconds_total[5m]))"
                           " / sum(tensorcompute_executor_slots)", "pairs nothing")
        self.assertProblem("tensorcompute_queue_depth / on (device) tensorcompute_queue_capacity",
                           "on (device)")

    def test_grafana_variables(self):
        self.assertEqual(self.problems(
            'rate(tensorcompute_requests_total{pod=~"$pod", job="${job}"}[$__rate_interval])'), [])
        self.assertProblem("histogram_quantile($quantile, sum by (le) (rate("
                           "tensorcompute_request_duration_seconds_bucket[5m])))",
                           "$quantile outside a string")

    def test_what_does_not_parse_is_a_problem(self):
        self.assertProblem("sum by (le) (rate(tensorcompute_requests_total[5m])",
                           "does not parse")

    def test_variable_queries(self):
        self.assertEqual(check_variable_query(
            'label_values(tensorcompute_requests_total{namespace=~"$namespace"}, rpc)',
            self.catalogue), [])
        self.assertEqual(check_variable_query("label_values(tensorcompute_queue_depth, pod)",
                                              self.catalogue), [])
        self.assertTrue(check_variable_query("label_values(tensorcompute_queue_depth, rpc)",
                                             self.catalogue))
        self.assertTrue(check_variable_query("metrics(tensorcompute_.*)", self.catalogue))

    def test_documented_families(self):
        families = documented_families(
            "Text before.\n\n"
            "| metric | type | what |\n"
            "|---|---|---|\n"
            "| `tensorcompute_requests_total{rpc,code}` | counter | answers by `rpc` |\n"
            "| `tensorcompute_device_info{device,description}` | gauge | 1; `cuda:0` |\n"
            "| `tensorcompute_queue_depth` | gauge | waiting |\n"
            "| `tensorcompute_a_total{shard,code}`, `tensorcompute_b_seconds{shard}` "
            "| counter, histogram | parts |\n"
            "| `tensorcompute_x_seconds{device,stage}`, `tensorcompute_y_seconds` "
            "| histogram | per batch |\n"
            "\n| `tensorcompute_not_in_the_table` | gauge | after it |\n")
        self.assertEqual(families["tensorcompute_requests_total"], ("counter", ["rpc", "code"]))
        self.assertEqual(families["tensorcompute_device_info"][0], "gauge")
        self.assertEqual(families["tensorcompute_queue_depth"], ("gauge", []))
        self.assertEqual(families["tensorcompute_a_total"], ("counter", ["shard", "code"]))
        self.assertEqual(families["tensorcompute_b_seconds"], ("histogram", ["shard"]))
        self.assertEqual(families["tensorcompute_y_seconds"], ("histogram", []))
        self.assertNotIn("tensorcompute_not_in_the_table", families)
        with self.assertRaises(ValueError):
            documented_families("| metric | type | what |\n|---|---|---|\n"
                                "| `tensorcompute_a`, `tensorcompute_b` | counter, gauge, gauge "
                                "| x |\n")
        catalogue = Catalogue()
        catalogue.add_documented("tensorcompute_x_seconds", "histogram", ["device", "stage"], "doc")
        self.assertEqual(catalogue.get("tensorcompute_x_seconds_bucket").labels,
                         {"device", "stage", "le"})
        self.assertIsNotNone(catalogue.get("tensorcompute_x_seconds_count"))


class DashboardAndRulesShapeTest(unittest.TestCase):
    """What can be checked without a server."""

    def test_every_panel_has_a_target(self):
        dashboard = load_dashboard()
        self.assertGreaterEqual(dashboard["schemaVersion"], 36)
        ids = []
        for panel in all_panels(dashboard["panels"]):
            ids.append(panel["id"])
            self.assertIn("gridPos", panel, panel.get("title"))
            if panel["type"] == "row":
                continue
            targets = [t for t in panel.get("targets", []) if t.get("expr", "").strip()]
            self.assertTrue(targets, f"panel {panel.get('title')!r} has no target")
            self.assertEqual(panel["datasource"], {"type": "prometheus", "uid": "${datasource}"},
                             panel["title"])
            refs = [t["refId"] for t in panel["targets"]]
            self.assertEqual(len(refs), len(set(refs)), panel["title"])
        self.assertEqual(len(ids), len(set(ids)), "panel ids repeat")

    def test_template_variables_are_defined(self):
        dashboard = load_dashboard()
        variables = {v["name"]: v for v in dashboard["templating"]["list"]}
        self.assertEqual(variables["datasource"]["type"], "datasource")
        self.assertEqual(variables["datasource"]["query"], "prometheus")
        for name in ("namespace", "pod"):
            self.assertEqual(variables[name]["type"], "query", name)
            self.assertEqual(variables[name]["datasource"]["uid"], "${datasource}", name)
        builtins = {"__rate_interval", "__interval", "__range", "datasource"}
        for where, _, text in dashboard_expressions(dashboard):
            for m in re.finditer(r"\$(?:\{(\w+)[^}]*\}|(\w+))", text):
                name = m.group(1) or m.group(2)
                self.assertTrue(name in variables or name in builtins,
                                f"{where}: ${name} is not a variable of the dashboard")

    def test_every_alert_has_for_severity_summary_and_description(self):
        rules = [r for doc in load_yaml(RULES) for g in doc["spec"]["groups"] for r in g["rules"]]
        alerts = {r["alert"]: r for r in rules if "alert" in r}
        self.assertEqual(set(alerts), {
            "TensorcomputeErrorRatioHigh", "TensorcomputeLatencyP99High",
            "TensorcomputeQueueNearCapacity", "TensorcomputeGpuOutOfService",
            "TensorcomputeNotServing"})
        for name, rule in alerts.items():
            self.assertRegex(rule.get("for", ""), r"^([0-9]+[smh])+$", name)
            self.assertIn(rule.get("labels", {}).get("severity"), SEVERITIES, name)
            for annotation in ("summary", "description", "runbook"):
                self.assertTrue(rule.get("annotations", {}).get(annotation, "").strip(),
                                f"{name}: no {annotation}")
        with open(os.path.join(MONITORING, "README.md")) as f:
            readme = f.read()
        for name in alerts:
            self.assertIn(f"### {name}", readme, "README.md explains every alert")

    def test_service_monitor_scrapes_each_pod_once(self):
        (monitor,) = load_yaml(SERVICE_MONITOR)
        services = [d for f in ("service.yaml", "service-headless.yaml")
                    for d in load_yaml(os.path.join(BASE, f))]
        (deployment,) = load_yaml(os.path.join(BASE, "deployment.yaml"))
        selector = monitor["spec"]["selector"]["matchLabels"]
        ports = {e["port"] for e in monitor["spec"]["endpoints"]}
        scraped = [(s["metadata"]["name"], p) for s in services
                   if selector.items() <= s["metadata"].get("labels", {}).items()
                   for p in s["spec"]["ports"] if p["name"] in ports]
        self.assertEqual(len(scraped), 1, f"one Service port per pod must match: {scraped}")
        (service, port) = scraped[0]
        self.assertEqual(service, "tensorcompute")
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        container_ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        self.assertEqual(container_ports.get(port["targetPort"]), port["port"])
        self.assertIn(f"--metrics_listen=0.0.0.0:{port['port']}", container["args"])
        for endpoint in monitor["spec"]["endpoints"]:
            self.assertEqual(endpoint.get("path", "/metrics"), "/metrics")

    def test_kustomization_has_every_resource(self):
        (kustomization,) = load_yaml(KUSTOMIZATION)
        self.assertEqual(set(kustomization["resources"]),
                         {"servicemonitor.yaml", "prometheus-rules.yaml"})
        (generator,) = kustomization["configMapGenerator"]
        self.assertEqual(generator["files"], ["grafana-dashboard.json"])


class CustomResourceValidationTest(unittest.TestCase):
    """validate_custom_resources.py (what deploy/validate-k8s.sh runs) refuses what the API
    server would."""

    @classmethod
    def setUpClass(cls):
        cls.crds = validate_custom_resources.load_crds(os.path.join(MONITORING, "crds"))

    def test_the_resources_are_valid(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "cr.yaml")
            with open(path, "w") as f:
                yaml.safe_dump_all(load_yaml(SERVICE_MONITOR) + load_yaml(RULES), f)
            r = subprocess.run([sys.executable, validate_custom_resources.__file__, "--crds",
                                os.path.join(MONITORING, "crds"), path],
                               capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(r.stdout.count("  ok: "), 2, r.stdout)

    def test_what_the_api_server_refuses_is_refused(self):
        (monitor,) = load_yaml(SERVICE_MONITOR)
        (rules,) = load_yaml(RULES)

        def broken(doc, change):
            doc = copy.deepcopy(doc)
            change(doc)
            return doc

        def rule(change):
            return broken(rules, lambda d: change(d["spec"]["groups"][0]["rules"][0]))

        for doc, expected in (
                (broken(monitor, lambda d: d["spec"]["endpoints"][0].update(intervall="15s")),
                 "'intervall' was unexpected"),
                (broken(monitor, lambda d: d["spec"].pop("selector")),
                 "'selector' is a required property"),
                (broken(monitor, lambda d: d["spec"]["endpoints"][0].update(scheme="grpc")),
                 "'grpc' is not one of"),
                (broken(monitor, lambda d: d["metadata"].update(name="Tensor_Compute")),
                 "is not a DNS subdomain"),
                (rule(lambda r: r.update(**{"for": "5 minutes"})), "does not match"),
                (rule(lambda r: r.update(expr=[1])), "neither an integer nor a string"),
                (rule(lambda r: r["labels"].update(severity=3)), "3 is not of type 'string'")):
            with self.subTest(expected=expected):
                problems = validate_custom_resources.problems_of(doc, self.crds)
                self.assertTrue(any(expected in p for p in problems), problems)
        self.assertIsNone(validate_custom_resources.problems_of(
            broken(monitor, lambda d: d.update(kind="ServiceMonitors")), self.crds))


def scrape_text(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return response.read().decode()


class ExportedSeriesTest(unittest.TestCase):
    """The dashboard and the rules against what two real servers export under traffic."""

    @classmethod
    def setUpClass(cls):
        binary = os.environ.get("TC_SERVER_BINARY", "")
        if not binary or not os.path.exists(binary):
            raise unittest.SkipTest(f"TC_SERVER_BINARY not set or missing: {binary!r}")
        from reserved_ports import ReservedPorts  # tests/testing
        from server_process import ServerProcess
        import tensorcompute

        cls.tmp = tempfile.TemporaryDirectory(prefix="monitoring_test.")
        table = np.arange(64 * 4, dtype=np.float32).reshape(64, 4)
        path = os.path.join(cls.tmp.name, "t.npy")
        np.save(path, table)
        reservation = ReservedPorts(2)
        ports = reservation.numbers
        peers = ",".join(f"ipv4:127.0.0.1:{p}" for p in ports)
        servers = []
        try:
            for index, port in enumerate(ports):
                server = ServerProcess("--cpu_threads=1", f"--listen=127.0.0.1:{port}",
                                       f"--preload=T={path}", f"--shard_index={index}",
                                       "--shard_count=2", f"--shard_peers={peers}",
                                       "--http_listen=127.0.0.1:0")
                servers.append(server.__enter__())
            cls.drive(tensorcompute, servers, table)
            # A third server, unsharded, holds the table on disk too: the families of tables on
            # disk (a sharded server has none).
            disk = ServerProcess("--cpu_threads=1", f"--preload=D={path}:disk",
                                 "--table_cache_bytes=4096")
            servers.append(disk.__enter__())
            with tensorcompute.Client(disk.target, timeout=30) as client:
                for _ in range(3):
                    client.gather(None, [1, 2, 40], params_name="D")
            cls.texts = [scrape_text(s.metrics_port) for s in servers]
        finally:
            for server in servers:
                server.__exit__(None, None, None)
            reservation.close()
            cls.tmp.cleanup()
        cls.catalogue = Catalogue.from_scrape(*cls.texts)
        cls.rpcs = cls.catalogue.get("tensorcompute_requests_total").values["rpc"]
        cls.label_values = {"code": GRPC_CODES, "rpc": cls.rpcs, "stage": GPU_STAGES}
        with open(METRICS_DOC) as f:
            cls.documented = documented_families(f.read())
        cls.exposed = {name: family for name, family in exposed_families(*cls.texts).items()
                       if name.startswith("tensorcompute_")}
        for family in GPU_ONLY_FAMILIES:
            if family in cls.documented and not any(
                    name.startswith(family + "_") or name == family
                    for name in cls.catalogue.series):
                kind, labels = cls.documented[family]
                cls.catalogue.add_documented(family, kind, labels, "docs/deploy.md")

    @classmethod
    def drive(cls, tensorcompute, servers, table):
        """Traffic that makes every family show its labels."""
        clients = [tensorcompute.Client(s.target, timeout=30) for s in servers]
        try:
            deadline = time.monotonic() + 30
            while any(c.health() != "SERVING" for c in clients):
                if time.monotonic() > deadline:
                    raise AssertionError("the servers did not turn SERVING in 30 s")
                time.sleep(0.1)
            client = clients[0]
            params = np.arange(12, dtype=np.float32).reshape(4, 3)
            for _ in range(5):
                client.gather(params, [3, -1, 0])
                client.gather_nd(params, [[0, 1], [2, 2]])
                client.embedding_bag(params, [0, 1, 2, 3], offsets=[0, 2], mode="mean")
            client.put_tensor("users", params)
            for _ in range(5):
                client.gather(None, [1, 2], params_name="users")
                client.gather_nd(None, [[1, 1]], params_name="users")
                client.embedding_bag(None, [0, 3], offsets=[0, 1], params_name="users")
                # Rows 2 and 61 are on shards 0 and 1: a routed lookup with a sub-call.
                client.gather(None, [2, 61], params_name="T")
                client.embedding_bag(None, [60, 1, 63], offsets=[0, 2], params_name="T")
            client.list_tensors()
            for code, call in (("INVALID_ARGUMENT", lambda: client.gather(params, [7])),
                               ("NOT_FOUND", lambda: client.gather(None, [0], params_name="no")),
                               ("ALREADY_EXISTS", lambda: client.put_tensor("users", params))):
                try:
                    call()
                except tensorcompute.TensorComputeError as e:
                    if e.code.name != code:
                        raise
                else:
                    raise AssertionError(f"expected {code}")
            # KServe v2 over HTTP: inline params, a resident table, and a 400.
            url = f"http://127.0.0.1:{servers[0].http_port}/v2/models"
            inline = {"inputs": [
                {"name": "params", "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]},
                {"name": "indices", "datatype": "INT64", "shape": [2], "data": [3, 0]}]}
            on_table = {"inputs": [
                {"name": "indices", "datatype": "INT64", "shape": [2], "data": [1, 0]}]}
            for model, body, status in (("gather", inline, 200), ("users", on_table, 200),
                                        ("nope", on_table, 404)):
                request = urllib.request.Request(f"{url}/{model}/infer",
                                                 data=json.dumps(body).encode(), method="POST")
                try:
                    with urllib.request.urlopen(request, timeout=30) as response:
                        got = response.status
                except urllib.error.HTTPError as e:
                    got = e.code
                if got != status:
                    raise AssertionError(f"KServe {model}: HTTP {got}, expected {status}")
        finally:
            for c in clients:
                c.close()

    def test_gpu_only_families_are_documented(self):
        for family in GPU_ONLY_FAMILIES:
            self.assertIn(family, self.documented,
                          f"{family} is exported only with a GPU and so is checked against "
                          "docs/deploy.md's table of metrics, where it is missing")
            kind, labels = self.documented[family]
            self.assertEqual((kind, set(labels)), ("histogram", {"device", "stage"}))

    def test_every_exported_family_is_documented(self):
        problems = []
        for name, (kind, labels) in sorted(self.exposed.items()):
            if name not in self.documented:
                problems.append(f"{name} is exported, but not in docs/deploy.md's table")
                continue
            documented_kind, documented_labels = self.documented[name]
            if (documented_kind, set(documented_labels)) != (kind, labels):
                problems.append(f"{name}: docs/deploy.md says {documented_kind} "
                                f"{sorted(documented_labels)}, the server {kind} {sorted(labels)}")
        self.assertEqual(problems, [], "\n".join(problems))

    def test_every_documented_family_is_exported(self):
        # With a GPU the GPU-only families are exported too; without one they cannot be.
        missing = sorted(set(self.documented) - set(self.exposed) - GPU_ONLY_FAMILIES)
        self.assertEqual(missing, [], "in docs/deploy.md's table of metrics, but not exported "
                         "by servers that show every family but the GPU-only ones")

    def test_the_dashboard_refers_only_to_exported_series(self):
        expressions = dashboard_expressions(load_dashboard())
        self.assertGreater(len(expressions), 30)
        problems = check_all(expressions, self.catalogue, self.label_values)
        self.assertEqual(problems, [], "\n".join(problems))

    def test_the_rules_refer_only_to_exported_series(self):
        expressions = rule_expressions(load_yaml(RULES))
        problems = check_all(expressions, self.catalogue, self.label_values)
        self.assertEqual(problems, [], "\n".join(problems))

    def test_the_series_used_and_where_they_came_from(self):
        used = set()
        for _, kind, text in (dashboard_expressions(load_dashboard())
                              + rule_expressions(load_yaml(RULES))):
            if kind == "expr":
                used |= metric_names(text)
        unscraped = sorted(n for n in used if self.catalogue.get(n)
                           and self.catalogue.get(n).source != "scrape")
        for name in unscraped:
            self.assertTrue(any(name.startswith(f) for f in GPU_ONLY_FAMILIES), name)
        print(f"\n{len(used)} series used; checked against the scrape, except (documented "
              f"only) {unscraped or 'none'}")

    def test_a_misspelt_family_or_label_in_the_dashboard_is_found(self):
        dashboard = load_dashboard()
        for old, new, expected in (
                ("tensorcompute_queue_depth{", "tensorcompute_queue_dept{",
                 "metric tensorcompute_queue_dept is not exported"),
                ("sum by (pod, device) (rate(tensorcompute_executor_busy",
                 "sum by (pod, devcie) (rate(tensorcompute_executor_busy", "by (devcie)"),
                ('code!="OK"', 'code!="Ok"', "no such value 'Ok'"),
                ("sum by (le, rpc) (rate(tensorcompute_compute_duration_seconds_bucket",
                 "sum by (rpc) (rate(tensorcompute_compute_duration_seconds_bucket", "without le"),
                ("label_values(tensorcompute_device_info, namespace)",
                 "label_values(tensorcompute_device_info, namespaces)", "namespaces")):
            broken = copy.deepcopy(dashboard)
            text = json.dumps(broken)
            self.assertIn(json.dumps(old)[1:-1], text)
            broken = json.loads(text.replace(json.dumps(old)[1:-1], json.dumps(new)[1:-1], 1))
            problems = check_all(dashboard_expressions(broken), self.catalogue, self.label_values)
            self.assertTrue(any(expected in p for p in problems), f"{new}: {problems}")

    def test_target_labels_are_not_exported_by_the_server(self):
        # The dashboard relies on Prometheus adding them; the server must not export its own.
        for series in self.catalogue.series.values():
            self.assertFalse(series.labels & TARGET_LABELS, series.name)


if __name__ == "__main__":
    unittest.main()
