"""infra/grafana/peerlog.json charts every peerlog metric, and only metrics the code declares."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"peerlog_[a-z_]+")


def declared() -> set[str]:
    """Metric names in the modules that define Prometheus metrics."""
    names = set()
    for path in [*ROOT.joinpath("services").rglob("*.py"), *ROOT.joinpath("projections").rglob("*.py")]:
        text = path.read_text()
        if "prometheus_client" in text:
            names |= set(re.findall(r'"(peerlog_[a-z_]+)"', text))
    return names


def charted() -> set[str]:
    dashboard = json.loads(ROOT.joinpath("infra/grafana/peerlog.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", ())]
    return {name.removesuffix("_bucket") for expr in exprs for name in NAME.findall(expr)}


def test_the_dashboard_charts_exactly_the_declared_metrics():
    assert charted() == declared()


def test_every_panel_reads_the_chosen_datasource():
    dashboard = json.loads(ROOT.joinpath("infra/grafana/peerlog.json").read_text())
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert panels and all(p["datasource"]["uid"] == "${datasource}" for p in panels)
