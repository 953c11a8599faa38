"""What a run writes, checked against what it reads before any work starts.

A run writes into its folder (``outputs.dir``) the entries :func:`run_entries` names and,
optionally, into a results store (``outputs.store``). None of them may be one of the run's
own inputs (the spec, the model, the data, the reference data, the feature file), and both
must be writable: :func:`check_run_outputs` says which option is wrong before the model is
loaded.
"""

from __future__ import annotations

from pathlib import Path

from robustscope.core.fileio import check_output_folder, check_outputs
from robustscope.runs.journal import JOURNAL, PLAN, SHARDS
from robustscope.runs.spec import EvaluationSpec
from robustscope.runs.store import is_store_url


def run_entries(spec: EvaluationSpec) -> list[str]:
    """Names of the files and folders a run of ``spec`` writes (or replaces) in its folder."""
    # the data cache (data/) only adds folders of its own: not listed
    names = [PLAN, JOURNAL, SHARDS, "run.json", spec.outputs.report]
    for threat in spec.threats:
        names += [f"radii_{threat.name}.csv", f"adv_{threat.name}.npz"]
    return names


def run_inputs(spec: EvaluationSpec, spec_path: str | Path | None = None
               ) -> dict[str, Path | None]:
    """The files a run of ``spec`` reads, by the key that names them."""
    features = spec.features.file if spec.features is not None else None
    return {"spec": None if spec_path is None else Path(spec_path),
            "model.path": spec.model.path, "data.path": spec.data.path,
            "data.reference": spec.data.reference, "features.file": features}


def check_run_outputs(spec: EvaluationSpec, spec_path: str | Path | None = None) -> None:
    """Raise :class:`~robustscope.core.errors.InputError` when the run folder or the store
    of ``spec`` cannot be written or would overwrite one of the run's inputs."""
    inputs = run_inputs(spec, spec_path)
    check_output_folder("outputs.dir", spec.outputs.dir, inputs, run_entries(spec))
    store = spec.outputs.store
    if store is not None and not is_store_url(str(store)) and str(store) != ":memory:":
        check_outputs([("outputs.store", store, None)], inputs)
