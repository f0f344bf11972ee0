"""Scrapes a tensorcompute-server's Prometheus endpoint and parses it with prometheus_client.

    samples = scrape(port)                        # {(name, labels): value}
    samples.get(("tensorcompute_requests_total", labels(rpc="Gather", code="OK")), 0)
"""

import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def labels(**kv):
    """The key for a sample's labels: a frozenset of (name, value) pairs."""
    return frozenset(kv.items())


def scrape(port, host="127.0.0.1", timeout=10):
    """GET /metrics and parse it; returns {(sample name, labels): value}, and checks the
    content type is Prometheus text (version 0.0.4)."""
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=timeout) as response:
        content_type = response.headers.get("Content-Type", "")
        if not content_type.startswith("text/plain"):
            raise AssertionError(f"/metrics Content-Type is {content_type!r}, not text/plain")
        text = response.read().decode("utf-8")
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, labels(**sample.labels))] = sample.value
    return samples


def requests_ok(samples):
    """Gather + GatherNd answered OK."""
    return sum(samples.get(("tensorcompute_requests_total", labels(rpc=rpc, code="OK")), 0)
               for rpc in ("Gather", "GatherNd"))
