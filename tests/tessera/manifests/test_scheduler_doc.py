"""docs/scheduler-extender.md shows the KubeSchedulerConfiguration the builder renders, and the
other docs quote the same defaults: one source (`tessera.manifests.scheduler`), checked here."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tessera.model.platform import SchedulerConfig
from tessera.manifests import scheduler_doc
from tessera.manifests.scheduler import go_duration, scheduler_configuration
from tessera.manifests.settings import SchedulerSettings

DOCS = Path(__file__).resolve().parents[3] / "docs"


def _committed() -> str:
    return (DOCS / "scheduler-extender.md").read_text(encoding="utf-8")


def test_the_doc_block_is_what_the_builder_renders() -> None:
    assert scheduler_doc.generated_block(_committed()) == scheduler_doc.render_block(), (
        "docs/scheduler-extender.md is stale: run python -m tessera.manifests.scheduler_doc"
    )


def test_the_doc_yaml_parses_to_the_rendered_configuration() -> None:
    block = scheduler_doc.generated_block(_committed())
    snippet = re.search(r"```yaml\n(.*?)```", block, re.S)
    assert snippet is not None
    assert yaml.safe_load(snippet.group(1)) == scheduler_configuration(scheduler_doc.default_settings())


def test_builder_defaults_are_the_stack_config_defaults() -> None:
    """What the doc shows is what a stack that sets nothing gets."""
    model, builder = SchedulerConfig(), SchedulerSettings()
    assert (builder.weight, builder.http_timeout_seconds) == (model.weight, model.http_timeout_seconds)


@pytest.mark.parametrize(
    ("doc", "pattern", "expected"),
    [
        ("deployment.md", r"`weight` \| `scheduler\.weight` \(default (\d+)\)", lambda: str(SchedulerSettings().weight)),
        ("deployment.md", r"`httpTimeout` \| `scheduler\.httpTimeoutSeconds` \(default (\w+)\)", lambda: go_duration(SchedulerSettings().http_timeout_seconds)),
        ("configuration.md", r"\| `weight` \| integer \| `(\d+)` \|", lambda: str(SchedulerSettings().weight)),
    ],
)
def test_other_docs_quote_the_same_defaults(doc: str, pattern: str, expected: object) -> None:
    found = re.findall(pattern, (DOCS / doc).read_text(encoding="utf-8"))
    assert found and set(found) == {expected()}, f"docs/{doc}: {found}"  # type: ignore[operator]


def test_no_other_configuration_values_outside_the_block() -> None:
    """Values belong in the generated block; prose elsewhere must not restate them."""
    document = _committed()
    outside = document.replace(scheduler_doc.generated_block(document), "")
    assert not re.search(r"^\s*(weight|httpTimeout):\s", outside, re.M)
    assert not re.search(r"\bweight (?:of |= ?)?\d+|\(\d+ below\)|httpTimeout:? \d+s", outside)


def test_check_mode_reports_a_stale_block(tmp_path: Path) -> None:
    stale = tmp_path / "doc.md"
    stale.write_text(_committed().replace("weight: 5", "weight: 10"), encoding="utf-8")
    assert scheduler_doc.main(["--check", "--doc", str(stale)]) == 1
    assert scheduler_doc.main(["--doc", str(stale)]) == 0
    assert scheduler_doc.main(["--check", "--doc", str(stale)]) == 0
    assert stale.read_text(encoding="utf-8") == _committed()
