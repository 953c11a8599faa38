"""What a run writes, checked against what it reads before any work starts.

A run writes into its folder (``outputs.dir``) the entries :func:`run_entries` names and,
optionally, into a results store (``outputs.store``). None of them may be one of the run's
own inputs (the spec, the model, the data, the reference data, the feature file), and both
must be writable: :func:`check_run_outputs` says which option is wrong before the model is
loaded.

A run folder is a folder of its own: not the file system's root, not the home folder, not a
folder that holds any of the run's inputs, and either empty, new, or a robustscope run
folder already (it holds a plan or a manifest, or only entries a run writes), so that a run
never writes its plan, shards and tables among files that are not its own.
"""

from __future__ import annotations

from pathlib import Path

from robustscope.core.errors import InputError
from robustscope.core.fileio import check_output_folder, check_outputs
from robustscope.runs.journal import JOURNAL, PLAN, SHARDS
from robustscope.runs.locations import is_store_url
from robustscope.runs.lock import LOCK
from robustscope.runs.spec import EvaluationSpec


def run_entries(spec: EvaluationSpec) -> list[str]:
    """Names of the files and folders a run of ``spec`` writes (or replaces) in its folder."""
    # the data cache (data/) only adds folders of its own: not listed
    names = [PLAN, JOURNAL, SHARDS, LOCK, "run.json", spec.outputs.report]
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
    check_run_folder(spec, inputs)
    store = spec.outputs.store
    if store is not None and not is_store_url(str(store)) and str(store) != ":memory:":
        check_outputs([("outputs.store", Path(store), None)], inputs)


#: Entries of a run folder that no spec names: the data cache (see runs.inputs._load_data).
_CACHE_ENTRIES = ("data",)


def check_run_folder(spec: EvaluationSpec, inputs: dict[str, Path | None]) -> None:
    """Raise :class:`InputError` when ``outputs.dir`` is the root or home folder, holds one
    of ``inputs`` (key -> path), or is a non-empty folder that is not a run folder."""
    folder = Path(spec.outputs.dir)
    resolved = folder.resolve()
    if resolved == Path(resolved.anchor):
        raise InputError(f"outputs.dir {folder}: is the file system's root; give a folder "
                         "of the run's own")
    if resolved == Path.home().resolve():
        raise InputError(f"outputs.dir {folder}: is the home folder; give a folder of the "
                         "run's own")
    for key, path in inputs.items():
        if path is not None and Path(path).resolve().is_relative_to(resolved):
            raise InputError(f"outputs.dir {folder}: holds the run's {key} ({path}); give a "
                             "folder of the run's own")
    if not resolved.is_dir():
        return
    entries = {p.name for p in resolved.iterdir()}
    own = set(run_entries(spec)) | set(_CACHE_ENTRIES)
    if entries and not ({PLAN, "run.json"} & entries) and not entries <= own:
        others = sorted(entries - own)
        shown = ", ".join(others[:3]) + (" ..." if len(others) > 3 else "")
        raise InputError(f"outputs.dir {folder}: is not empty and not a robustscope run "
                         f"folder (it holds {shown}); give a new or empty folder")
