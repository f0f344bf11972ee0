"""Checks that PromQL expressions refer only to series and labels a server exports.

A dashboard panel or an alert whose expression names a misspelt metric, or groups by a label
the metric does not have, shows nothing or never fires, and nothing says so. This module parses
each expression (promql_parser: the Rust PromQL parser of GreptimeDB, whose grammar follows
Prometheus') and walks it:

- every metric a selector names must be a series of the catalogue (what a scrape of the server
  shows: histograms as NAME_bucket, NAME_sum and NAME_count, counters with their _total);
- every label of a matcher must be on that series, or be a target label that Prometheus adds
  when it scrapes (TARGET_LABELS), and a matcher's literal values (`code!~"OK|NOT_FOUND"`) must
  be values that label takes, for the labels whose values are known (`label_values`);
- every label of by (...), without (...), on (...), ignoring (...) and group_left/right (...)
  must be on what the clause applies to: the labels each sub-expression can carry are worked
  out bottom-up (an aggregation keeps its by labels, histogram_quantile drops le, ...);
- two vectors combined by an arithmetic or comparison operator without on/ignoring must carry
  the same labels (otherwise one-to-one matching pairs nothing);
- rate(), irate() and increase() take counters (or histogram series), histogram_quantile()
  takes buckets (something with le).

Grafana's range variables ($__rate_interval, $__interval, $__range) are replaced by durations
before parsing; other variables may appear only inside strings (label values such as
"$namespace"). Grafana variable queries label_values(...) and query_result(...) are checked too.

    catalogue = Catalogue.from_scrape(text)       # the server's /metrics text
    problems = check_expression('sum by (rpc) (rate(tensorcompute_requests_total[5m]))',
                                catalogue, label_values={"code": GRPC_CODES})
    # [] when all is well, else one sentence per problem
    documented_families(deploy_md)                # {family: (type, [labels])} of its table
    exposed_families(text)                        # {family: (type, {labels})} of a scrape
"""

import difflib
import re
from dataclasses import dataclass, field

import promql_parser
from prometheus_client.parser import text_string_to_metric_families

# Labels Prometheus puts on every series it scrapes through a ServiceMonitor (the Prometheus
# Operator's target labels, plus job and instance): the server never exports them.
TARGET_LABELS = frozenset({"namespace", "pod", "service", "container", "endpoint", "job",
                           "instance"})

# gRPC status code names as the server writes them in `code` (absl::StatusCodeToString).
GRPC_CODES = frozenset({
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
    "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
    "UNAUTHENTICATED"})

# What Grafana's built-in range variables become for parsing (any valid duration would do).
GRAFANA_DURATIONS = {"__rate_interval": "5m", "__interval": "1m", "__range": "1h"}

# Functions whose (first) argument must be a counter: they treat a drop as a reset.
COUNTER_FUNCTIONS = frozenset({"rate", "irate", "increase", "resets"})


class _Unknown(frozenset):
    """The labels of what an unknown metric selects: anything may be there, so that one
    misspelt name is reported once, not again by every clause above it."""

    def __contains__(self, label):
        return True

    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = frozenset.__hash__

    def __sub__(self, other):
        return self

    def __rsub__(self, other):
        return frozenset()

    def __or__(self, other):
        return self

    __ror__ = __or__

    def __xor__(self, other):
        return frozenset()

    __rxor__ = __xor__


UNKNOWN = _Unknown()


@dataclass
class Series:
    """One series name as a scrape shows it (a histogram is three of these)."""
    name: str
    kind: str  # counter, gauge, histogram, summary, untyped: of its family
    labels: frozenset = frozenset()
    values: dict = field(default_factory=dict)  # label -> set of values seen
    source: str = "scrape"  # or where it was documented instead

    @property
    def counter_like(self):
        if self.kind == "counter":
            return True
        return self.kind in ("histogram", "summary") and self.name.endswith(
            ("_bucket", "_sum", "_count"))


class Catalogue:
    """Series names and their labels: what expressions may refer to."""

    def __init__(self):
        self.series = {}

    @classmethod
    def from_scrape(cls, *texts):
        """From Prometheus text expositions (several: their union)."""
        catalogue = cls()
        for text in texts:
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    catalogue._add(sample.name, family.type, sample.labels, "scrape")
        return catalogue

    def add_documented(self, family, kind, labels, source):
        """A family known from documentation rather than a scrape: its series as a scrape would
        show them (a histogram's _bucket with le, _sum and _count)."""
        labels = dict.fromkeys(labels, None)
        if kind == "histogram":
            self._add(family + "_bucket", kind, {**labels, "le": None}, source)
            self._add(family + "_sum", kind, labels, source)
            self._add(family + "_count", kind, labels, source)
        else:
            self._add(family, kind, labels, source)

    def _add(self, name, kind, labels, source):
        s = self.series.setdefault(name, Series(name, kind, source=source))
        s.labels = s.labels | frozenset(labels)
        for k, v in labels.items():
            if v is not None:
                s.values.setdefault(k, set()).add(v)

    def get(self, name):
        return self.series.get(name)


def documented_families(markdown):
    """{family: (kind, [labels])} from the metrics table of docs/deploy.md: the rows after the
    header `| metric | type | what |`, each naming one or more families in its first cell
    (`tensorcompute_x{a,b}`, `tensorcompute_y`) and their types in its second (one type for
    all, or one per family in order: `counter, histogram`)."""
    out = {}
    lines = iter(markdown.splitlines())
    for line in lines:
        if re.fullmatch(r"\|\s*metric\s*\|\s*type\s*\|\s*what\s*\|", line.strip()):
            break
    else:
        raise ValueError("no table headed | metric | type | what |")
    next(lines, None)  # |---|---|---|
    for line in lines:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        families = re.findall(r"`([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})?`", cells[0])
        kinds = [kind.strip() for kind in cells[1].split(",")]
        if len(kinds) == 1:
            kinds *= len(families)
        if not families or len(kinds) != len(families):
            raise ValueError(f"cannot read the families of: {line}")
        for (name, labels), kind in zip(families, kinds):
            out[name] = (kind, [label.strip() for label in labels.split(",") if label.strip()])
    return out


def exposed_families(*texts):
    """{family: (kind, {labels})} of Prometheus text expositions (their union), named as their
    `# TYPE` lines name them (counters with _total); a histogram's le is not among its labels."""
    out = {}
    for text in texts:
        for m in re.finditer(r"^# TYPE (\S+) (\S+)$", text, re.M):
            out.setdefault(m.group(1), (m.group(2), set()))
        for family in text_string_to_metric_families(text):
            name = family.name + "_total" if family.type == "counter" else family.name
            for sample in family.samples:
                out[name][1].update(k for k in sample.labels if k not in ("le", "quantile"))
    return out


def substitute_grafana_variables(expr):
    """The expression with Grafana's range variables replaced by durations. Returns
    (expr, problems): a variable outside a string that is not a range variable is a problem
    (it cannot be parsed, so nothing about it could be checked)."""
    out, problems, i = [], [], 0
    var = re.compile(r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))|\[\[(\w+)\]\]")
    while i < len(expr):
        c = expr[i]
        if c in "\"'`":
            end = i + 1
            while end < len(expr) and expr[end] != c:
                end += 2 if expr[end] == "\\" and c != "`" else 1
            out.append(expr[i:end + 1])
            i = end + 1
            continue
        m = var.match(expr, i)
        if m:
            name = m.group(1) or m.group(2) or m.group(3)
            if name in GRAFANA_DURATIONS:
                out.append(GRAFANA_DURATIONS[name])
            else:
                problems.append(f"Grafana variable ${name} outside a string: only "
                                f"{', '.join('$' + v for v in GRAFANA_DURATIONS)} may stand there")
                out.append("1")
            i = m.end()
            continue
        out.append(c)
        i += 1
    return "".join(out), problems


def _is_literal_alternation(value):
    return re.fullmatch(r"[A-Za-z0-9_:.+-]+(\|[A-Za-z0-9_:.+-]+)*", value) is not None


class _Walker:
    def __init__(self, catalogue, label_values):
        self.catalogue = catalogue
        self.label_values = label_values or {}
        self.problems = []
        self.names = set()

    def problem(self, text):
        if text not in self.problems:
            self.problems.append(text)

    # Returns the labels a sub-expression's series can carry (a frozenset), or None for a
    # scalar or a string.
    def labels(self, node):
        kind = type(node).__name__
        method = getattr(self, "_" + kind, None)
        if method is None:
            self.problem(f"cannot check a {kind} node: {node}")
            return frozenset()
        return method(node)

    def _NumberLiteral(self, node):
        return None

    def _StringLiteral(self, node):
        return None

    def _ParenExpr(self, node):
        return self.labels(node.expr)

    def _UnaryExpr(self, node):
        return self.labels(node.expr)

    def _SubqueryExpr(self, node):
        return self.labels(node.expr)

    def _MatrixSelector(self, node):
        return self.labels(node.vector_selector)

    def _VectorSelector(self, node):
        matchers = list(node.matchers.matchers) + [m for group in node.matchers.or_matchers
                                                   for m in group]
        name = node.name
        if name is None:
            self.problem("a selector without a metric name (by __name__) cannot be checked: "
                         f"{{{', '.join(m.name for m in matchers)}}}")
            return frozenset()
        self.names.add(name)
        series = self.catalogue.get(name)
        if series is None:
            near = difflib.get_close_matches(name, list(self.catalogue.series), n=1)
            self.problem(f"metric {name} is not exported by the server"
                         + (f" (did you mean {near[0]}?)" if near else ""))
            return UNKNOWN
        available = series.labels | TARGET_LABELS
        for m in matchers:
            if m.name == "__name__":
                self.problem(f"{name}: a __name__ matcher cannot be checked")
                continue
            if m.name not in available:
                self.problem(f"label {m.name} is not on {name} (it has: "
                             f"{', '.join(sorted(series.labels)) or 'no labels'}; target "
                             f"labels: {', '.join(sorted(TARGET_LABELS))})")
                continue
            if m.name in self.label_values and "$" not in m.value and \
                    _is_literal_alternation(m.value):
                known = set(self.label_values[m.name]) | series.values.get(m.name, set())
                for value in m.value.split("|"):
                    if value not in known:
                        near = difflib.get_close_matches(value, sorted(known), n=1)
                        self.problem(f"{name}{{{m.name}}}: no such value {value!r}"
                                     + (f" (did you mean {near[0]!r}?)" if near else ""))
        return available

    def _Call(self, node):
        fn = node.func.name
        args = list(node.args)
        arg_labels = [self.labels(a) for a in args]
        vectors = [l for l in arg_labels if l is not None]
        if fn in COUNTER_FUNCTIONS and args:
            for series in self._selected_series(args[0]):
                if not series.counter_like:
                    self.problem(f"{fn}() of {series.name}, a {series.kind} (rate, irate, "
                                 "increase and resets take counters)")
        if fn == "histogram_quantile":
            inner = arg_labels[1] if len(arg_labels) > 1 else None
            if inner is not None and "le" not in inner:
                self.problem("histogram_quantile() of series without le (aggregate with "
                             f"by (le, ...)): it has {', '.join(sorted(inner)) or 'no labels'}")
            return (inner or frozenset()) - {"le"}
        if fn in ("label_replace", "label_join"):
            # label_replace(v, dst, replacement, src, regex); label_join(v, dst, sep, src...)
            base = arg_labels[0] or frozenset()
            sources = args[3:4] if fn == "label_replace" else args[3:]
            for src in (getattr(a, "val", "") for a in sources):
                if src and src not in base:
                    self.problem(f"{fn}() reads label {src}, which is not there "
                                 f"(there: {', '.join(sorted(base))})")
            return base | {getattr(args[1], "val", "")}
        if fn in ("scalar", "time", "pi"):
            return None
        if fn in ("vector", "absent", "absent_over_time"):
            return frozenset()
        return vectors[0] if vectors else frozenset()

    def _selected_series(self, node):
        """The catalogue series a range or instant selector (under parentheses) names."""
        while type(node).__name__ in ("ParenExpr", "SubqueryExpr"):
            node = node.expr
        if type(node).__name__ == "MatrixSelector":
            node = node.vector_selector
        if type(node).__name__ == "VectorSelector" and node.name:
            series = self.catalogue.get(node.name)
            return [series] if series else []
        return []

    def _AggregateExpr(self, node):
        op = str(node.op)
        inner = self.labels(node.expr)
        if node.param is not None:
            self.labels(node.param)  # a quantile's or topk's parameter may be an expression
        if inner is None:
            self.problem(f"{op}() of a scalar")
            inner = frozenset()
        modifier = node.modifier
        grouping = frozenset(modifier.labels) if modifier is not None else frozenset()
        is_by = modifier is not None and str(modifier.type).endswith("By")
        clause = "by" if is_by else "without"
        for label in sorted(grouping):
            if label not in inner:
                self.problem(f"{op} {clause} ({label}): no series inside has label {label} "
                             f"(they have: {', '.join(sorted(inner)) or 'no labels'})")
        if op in ("topk", "bottomk", "limitk", "limit_ratio"):
            return inner
        if modifier is None:
            result = frozenset()
        elif is_by:
            result = grouping
        else:
            result = inner - grouping
        if op == "count_values" and node.param is not None:
            result = result | {getattr(node.param, "val", "")}
        return result

    def _BinaryExpr(self, node):
        op = str(node.op)
        lhs, rhs = self.labels(node.lhs), self.labels(node.rhs)
        if lhs is None or rhs is None:
            return rhs if lhs is None else lhs
        modifier = node.modifier
        matching = modifier.matching if modifier is not None else None
        on = matching is not None and str(matching.type).endswith("Include")
        match_labels = frozenset(matching.labels) if matching is not None else frozenset()
        card = str(modifier.card) if modifier is not None else "OneToOne"
        group = frozenset(modifier.group_labels or ()) if modifier is not None else frozenset()
        for label in sorted(match_labels):
            sides = (lhs, rhs) if on else (lhs | rhs,)
            if any(label not in side for side in sides):
                self.problem(f"{op} {'on' if on else 'ignoring'} ({label}): not on "
                             f"{'both sides' if on else 'either side'}")
        if op in ("and", "or", "unless"):
            if op == "and" and matching is None and lhs != rhs:
                self.problem(f"`and` of vectors with different labels matches nothing: "
                             f"{sorted(lhs ^ rhs)} on one side only (use on (...))")
            return lhs | rhs if op == "or" else lhs
        if matching is None:
            if lhs != rhs:
                self.problem(f"`{op}` of vectors with different labels ({sorted(lhs - rhs)} only "
                             f"on the left, {sorted(rhs - lhs)} only on the right): one-to-one "
                             "matching pairs nothing; aggregate both sides alike or use on (...)")
            result = lhs
        elif on:
            result = match_labels
        else:
            if lhs - match_labels != rhs - match_labels and card.endswith("OneToOne"):
                self.problem(f"`{op}` ignoring ({', '.join(sorted(match_labels))}): the sides "
                             f"still differ in {sorted((lhs ^ rhs) - match_labels)}")
            result = lhs - match_labels
        if card.endswith("ManyToOne"):
            for label in sorted(group - rhs):
                self.problem(f"group_left ({label}): not on the right-hand side")
            return lhs | group
        if card.endswith("OneToMany"):
            for label in sorted(group - lhs):
                self.problem(f"group_right ({label}): not on the left-hand side")
            return rhs | group
        return result


def check_expression(expr, catalogue, label_values=None):
    """Problems (sentences) of one PromQL expression, possibly with Grafana variables; []
    when it parses and refers only to what `catalogue` has."""
    text, problems = substitute_grafana_variables(expr)
    try:
        tree = promql_parser.parse(text)
    except ValueError as e:
        return problems + [f"does not parse: {e}"]
    walker = _Walker(catalogue, label_values)
    walker.labels(tree)
    return problems + walker.problems


def metric_names(expr):
    """The metric names an expression's selectors name (for reports)."""
    text, _ = substitute_grafana_variables(expr)
    walker = _Walker(Catalogue(), None)
    try:
        walker.labels(promql_parser.parse(text))
    except ValueError:
        return set()
    return walker.names


def check_variable_query(query, catalogue, label_values=None):
    """Problems of a Grafana Prometheus variable query: label_values(EXPR, LABEL),
    label_values(LABEL) or query_result(EXPR)."""
    m = re.fullmatch(r"\s*label_values\(\s*(?:(.*)\s*,\s*)?([a-zA-Z_]\w*)\s*\)\s*", query, re.S)
    if m:
        expr, label = m.group(1), m.group(2)
        if expr is None:
            return [] if label in TARGET_LABELS or any(
                label in s.labels for s in catalogue.series.values()) else [
                f"label_values({label}): no series has label {label}"]
        problems = check_expression(expr, catalogue, label_values)
        if not problems:
            text, _ = substitute_grafana_variables(expr)
            walker = _Walker(catalogue, label_values)
            labels = walker.labels(promql_parser.parse(text)) or frozenset()
            if label not in labels:
                problems.append(f"label_values(..., {label}): {label} is not on {expr.strip()}")
        return problems
    m = re.fullmatch(r"\s*query_result\((.*)\)\s*", query, re.S)
    if m:
        return check_expression(m.group(1), catalogue, label_values)
    return [f"unsupported variable query (label_values or query_result only): {query}"]
