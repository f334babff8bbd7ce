"""Where /filter puts a node that does not fit: FailedNodes (preemption may help) or
FailedAndUnresolvableNodes (it cannot), with the reason kube-scheduler shows in the pod's events."""
from __future__ import annotations

import pytest

from tessera.alloc import FitFailure
from tessera.scheduler.core import _ROUTES, NOT_SHARED

UNRESOLVABLE = {FitFailure.UNKNOWN_NODE, FitFailure.GPU_MODEL}


@pytest.mark.parametrize("failure", list(FitFailure))
def test_every_failure_has_its_list_and_its_reason(failure: FitFailure) -> None:
    to_unresolvable, message = _ROUTES[id(failure)]
    assert to_unresolvable == (failure in UNRESOLVABLE)
    assert message.startswith("tessera: ")
    assert message.endswith(NOT_SHARED if failure is FitFailure.UNKNOWN_NODE else failure.value)
