"""tests/prefetch.py (what make test builds and fetches while pip installs): the models it fetches are
the catalog's that tests name, and it builds each kernel library this machine runs once."""

from __future__ import annotations

from hearth.kernels import native, tiers
from hearth.loader.catalog import CATALOG
from tests import prefetch


def test_the_models_fetched_are_the_catalogs_that_tests_name():
    names = prefetch.catalog_models()
    assert names == [n for n in CATALOG if n in names]  # catalog order: the smallest first
    assert "smollm2-135m" in names and "qwen2.5-coder-1.5b" in names  # conftest's smol_llm, the goldens


def test_each_kernel_library_this_machine_runs_is_built_once():
    want = {native.LIBRARIES[n].source for n in tiers.BY_NAME if n in native.LIBRARIES and tiers.why_not(n) is None}
    jobs = [what for what, _ in prefetch.kernel_jobs()]
    assert sorted(jobs) == sorted(f"kernels {source}" for source in want)
