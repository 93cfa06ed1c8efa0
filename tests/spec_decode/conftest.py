"""Real-model speculation tests need the native kernels: on the torch tier verify rows are not
bit-identical to decode rows, so the runner turns speculation off there (and nothing is drafted)."""

import pytest

from hearth.kernels import tiers
from tests.conftest import SPECULATION_OFF


@pytest.fixture(autouse=True)
def _speculation_runs_here(request):
    if tiers.active() == "torch" and {"smol_llm", "model_path"} & set(request.fixturenames):
        pytest.skip(SPECULATION_OFF)
