"""The /filter and /prioritize replies' fast encodings write exactly what `json_bytes` writes."""
from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from tessera.httpd import json_bytes, string_map_json
from tessera.scheduler.extender_types import ExtenderFilterResult, HostPriority, host_priorities, host_priorities_json

MESSAGES = ["tessera: not enough free GPU compute or GPU memory", "tessera: not enough free CPU", 'odd "quoted" \\ message é\u2028']
node_names = st.from_regex(r"[a-z0-9][a-z0-9.-]{0,30}", fullmatch=True)
any_names = st.one_of(node_names, st.text(max_size=12))  # quotes, backslashes, control and non-ASCII characters


@given(st.dictionaries(any_names, st.sampled_from(MESSAGES) | st.text(max_size=8), max_size=40))
def test_any_map_encodes_as_json_bytes_does(values: dict[str, str]) -> None:
    assert string_map_json(values) == json_bytes(values)
    assert json.loads(string_map_json(values)) == values


@given(st.dictionaries(node_names, st.sampled_from(MESSAGES), max_size=200))
def test_node_name_maps_take_the_fast_path_and_still_match(values: dict[str, str]) -> None:
    assert string_map_json(values) == json_bytes(values)


@given(
    st.one_of(st.none(), st.lists(st.fixed_dictionaries({"metadata": st.fixed_dictionaries({"name": any_names})}), max_size=3)),
    st.one_of(st.none(), st.lists(node_names, max_size=5)),
    st.dictionaries(any_names, st.sampled_from(MESSAGES), max_size=20),
    st.dictionaries(any_names, st.sampled_from(MESSAGES), max_size=5),
    st.text(max_size=10),
)
def test_filter_reply_bytes_are_the_json_of_its_fields(
    nodes: list[dict[str, object]] | None, names: list[str] | None, failed: dict[str, str], unresolvable: dict[str, str], error: str
) -> None:
    result = ExtenderFilterResult(nodes=nodes, node_names=names, failed_nodes=failed, failed_and_unresolvable_nodes=unresolvable, error=error)
    assert result.to_json_bytes() == json_bytes(result.to_json())


@given(st.lists(st.tuples(st.one_of(node_names, any_names), st.integers(min_value=0, max_value=10)), max_size=60))
def test_prioritize_reply_bytes_are_the_json_of_its_entries(entries: list[tuple[str, int]]) -> None:
    priorities = [HostPriority(host, score) for host, score in entries]
    encoded = host_priorities_json(priorities)
    assert encoded == json_bytes([p.to_json() for p in priorities])
    assert [HostPriority.from_json(item) for item in json.loads(encoded)] == priorities


@given(st.lists(st.text(max_size=8), max_size=20, unique=True), st.dictionaries(st.text(max_size=8), st.integers(0, 10), max_size=20), st.integers(0, 10))
def test_host_priorities_are_the_named_tuples_a_comprehension_builds(names: list[str], scores: dict[str, int], default: int) -> None:
    built = host_priorities(names, scores, default)
    assert built == [HostPriority(n, scores.get(n, default)) for n in names]
    assert all(type(p) is HostPriority for p in built) and [p.score for p in built] == [scores.get(n, default) for n in names]
