"""``update`` never reads the data on the host: every metric of the registry updates on ``meta`` tensors
(no values at all), in every floating dtype, with no host-to-device copy either."""

from __future__ import annotations

import pytest
import torch

from contracts._contract import STATEFUL, build, cut
from embedmetrics._metric.registry import MetricSpec
from integration.test_no_host_sync import NoHostCopies

META = torch.device("meta")


@pytest.mark.parametrize("spec", STATEFUL, ids=lambda s: s.key)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_update_on_meta_tensors(spec: MetricSpec, dtype: torch.dtype) -> None:
    if spec.route == "streamed":
        pytest.skip("the stated exception: a streamed route folds each chunk into its lists in `update`")
    case = spec.make_case(dtype=dtype)
    metric = build(spec, case, validate_args=False).to(META)
    batches = [p for s in case.streams for p in cut(s, [s.rows // 2])]
    with NoHostCopies():
        for part in batches:
            args = tuple(torch.empty_like(a, device=META) for a in part.args)
            metric.update(*args, **part.kwargs)
    assert metric._update_count == len(batches)
