"""docs/architecture.md is kept true by the import contracts: its layers are the
"service layers" contract's, every package on disk has its row in the page's
table (and every row a package), and every top-level module of the service sits
in some layer of the contract."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "architecture.md"
SERVICE = ROOT / "service" / "delayq"
GENERATED = ("v1", "admin", "rocketmq/v2")


def _layers_contract() -> list[str]:
    doc = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = doc["tool"]["importlinter"]["contracts"]
    (layers,) = [c["layers"] for c in contracts if c["name"] == "service layers"]
    return [str(layer).replace("delayq.", "") for layer in layers]


def _page_section(title: str) -> str:
    text = PAGE.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _page_layers() -> list[str]:
    block = re.search(r"```\n(.*?)```", _page_section("Layers"), re.S)
    assert block is not None, "the Layers section has no code block"
    return block.group(1).strip().splitlines()


def _disk_packages() -> set[str]:
    return {
        str(init.parent.relative_to(SERVICE))
        for init in SERVICE.rglob("__init__.py")
        if init.parent != SERVICE and not _generated(init.parent.relative_to(SERVICE))
    }


def _generated(package: Path) -> bool:
    return any(package == Path(g) or Path(g) in package.parents for g in GENERATED)


def _page_packages() -> set[str]:
    rows = re.findall(r"^\| `([a-z_/]+)/`", _page_section("Packages"), re.M)
    return set(rows)


def test_the_page_draws_the_layers_the_contract_enforces() -> None:
    assert _page_layers() == _layers_contract()


def test_every_package_has_a_row_and_every_row_a_package() -> None:
    disk, page = _disk_packages(), _page_packages()
    assert not disk - page, f"packages the page does not name: {sorted(disk - page)}"
    assert not page - disk, f"rows naming no package: {sorted(page - disk)}"


def test_every_top_level_module_and_package_is_in_a_layer() -> None:
    layered = {
        name.strip()
        for layer in _layers_contract()
        for name in re.split(r"[|:]", layer)
        if name.strip()
    }
    beside = {"client", "v1", "admin"}  # their own contracts (client) or generated
    tops = {p.stem for p in SERVICE.glob("*.py") if p.stem != "__init__"} | {
        p.name for p in SERVICE.iterdir() if (p / "__init__.py").exists()
    }
    missing = tops - layered - beside
    assert not missing, f"in no layer of the 'service layers' contract: {sorted(missing)}"
    gone = layered - tops
    assert not gone, f"the contract names what does not exist: {sorted(gone)}"


def test_the_leaves_are_each_described() -> None:
    leaves = [n.strip() for n in _layers_contract()[-1].split(":")]
    section = _page_section("Packages")
    undescribed = [n for n in leaves if f"`{n}`" not in section]
    assert not undescribed, f"leaves the page does not describe: {undescribed}"


OPERATOR = ROOT / "operator" / "delayq_operator"
PURE = "the operator's pure modules: no Kubernetes client, no kopf, none of its I/O modules"
KUBE = "kube is the operator's only Kubernetes API module"


def _sources(name: str) -> set[str]:
    doc = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (contract,) = [c for c in doc["tool"]["importlinter"]["contracts"] if c["name"] == name]
    return {str(m).removeprefix("delayq_operator.") for m in contract["source_modules"]}


def test_every_operator_module_is_pure_or_reaches_the_api_through_kube() -> None:
    pure, io = _sources(PURE), _sources(KUBE)
    assert not pure & io
    disk = {p.stem for p in OPERATOR.glob("*.py")} - {"__init__", "kube"}
    assert disk == pure | io, f"in neither operator contract: {sorted(disk - pure - io)}"


def test_the_page_names_the_operators_pure_modules_as_the_contract_does() -> None:
    text = PAGE.read_text()
    start = text.index("Outside `service/`: `operator/delayq_operator/`")
    paragraph = text[start : text.index("`spark/delayq_spark/`", start)]
    pure, io = paragraph.split("pure:", 1)[1].split("I/O:", 1)
    assert set(re.findall(r"`([a-z]+)`", pure)) == _sources(PURE)
    assert set(re.findall(r"`([a-z]+)`", io)) == _sources(KUBE) | {"kube"}
