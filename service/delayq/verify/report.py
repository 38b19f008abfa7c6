"""A verify report as text (a line per file, a summary) or JSON (pure)."""

from __future__ import annotations

import json

from .findings import Report

__all__ = ["render_json", "render_text"]


def render_json(report: Report) -> str:
    return json.dumps(report.to_dict(), indent=2)


def render_text(report: Report) -> str:
    lines: list[str] = []
    for r in sorted(report.files.values(), key=lambda r: r.file):
        facts = ", ".join(f"{k} {v}" for k, v in r.facts.items())
        lines.append(f"{r.status:8} {r.file}" + (f"  ({facts})" if facts else ""))
        for f in r.findings:
            if f.fixed:
                tag = "fixed"
            elif not f.damage:
                tag = "note"
            else:
                tag = "fixable" if f.fixable else "not fixable"
            at = "" if f.position is None else f" at {f.position}"
            lines.append(f"         {f.kind}{at}: {f.detail} [{tag}]")
            if f.action:
                lines.append(f"           -> {f.action}")
    doc = report.to_dict()["summary"]
    left = report.damaged
    if not left:
        verdict = "repaired" if doc["FIXED"] else "clean"
    elif report.fix or not any(f.fixable for f in left):
        verdict = f"{len(left)} damage left that --fix cannot repair"
    else:
        verdict = f"{len(left)} damage found; --fix repairs what it can"
    lines.append(
        f"{doc['files']} files: {doc['OK']} OK, {doc['DAMAGED']} DAMAGED, "
        f"{doc['FIXED']} FIXED: {verdict}"
    )
    return "\n".join(lines)
