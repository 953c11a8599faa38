"""The zoo's registry (issue #39, requirements 3 and 4): every network's recipe, its split,
and ``load(name)``, which builds (trains, exports to ONNX, checks the export) or reads back
from the cache.

Trained networks live in ``benchmarks/zoo/.cache/`` (git-ignored) as
``<name>-<recipe hash>.pt`` and ``.onnx``; the hash covers every field of the recipe except
its split, plus ``ZOO_VERSION`` (bump it when the training code changes), plus the base's hash
for a logit-scaled network. A rerun with the same recipes rebuilds nothing. Training is
seeded and runs on one torch thread; bit-identical weights across machines are not
guaranteed (see ``benchmarks/peers/budget_curves.py``), so radii measured on one machine's
zoo are compared on that machine.

    PYTHONPATH=src nice -n 19 python benchmarks/zoo/networks.py            # build all, table
    PYTHONPATH=src nice -n 19 python benchmarks/zoo/networks.py NAME ...   # build some
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

if __package__ in (None, ""):                      # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "zoo"

from . import architectures as A  # noqa: E402
from . import data as D  # noqa: E402
from . import ibp  # noqa: E402

HERE = Path(__file__).resolve().parent
CACHE = HERE / ".cache"
ZOO_VERSION = 1
N_TEST = 20                      # correctly classified test inputs kept per network
OPSET = 17
SPLITS = ("tune", "held_out")
FAMILIES = ("mlp-mnist", "mlp-digits", "cnn", "resnet")
TRAININGS = ("natural", "pgd", "ibp")


@dataclass(frozen=True)
class Recipe:
    """How one network is made. ``arch_kw`` is a tuple of (key, value) pairs (hashable).
    A network with ``base`` set is ``base``'s network with its logits times ``scale`` (no
    training of its own: the same decision function, other gradients)."""

    name: str
    split: str                    # "tune" or "held_out" (not part of the hash)
    family: str
    data: str = ""                # data.load key
    arch: str = ""
    arch_kw: tuple = ()
    training: str = "natural"     # "natural", "pgd" (Linf, Madry) or "ibp"
    epochs: int = 0
    lr: float = 1e-3
    batch: int = 64
    eps: float = 0.0              # training eps (Linf, scaled units) for pgd / ibp
    pgd_steps: int = 5
    seed: int = 0
    base: str = ""
    scale: float = 1.0


def _mlp(name, split, data, width, depth, training="natural", epochs=10, lr=1e-3, eps=0.0,
         **kw) -> Recipe:
    d_in = 784 if data == "mnist-flat" else 64
    fam = "mlp-mnist" if data == "mnist-flat" else "mlp-digits"
    return Recipe(name, split, fam, data, "mlp",
                  (("d_in", d_in), ("depth", depth), ("width", width)), training, epochs, lr,
                  eps=eps, **kw)


def _cnn(name, split, channels, hidden, bn, training="natural", epochs=6, lr=1e-3, eps=0.0):
    return Recipe(name, split, "cnn", "mnist", "cnn",
                  (("bn", bn), ("channels", tuple(channels)), ("hidden", hidden)), training,
                  epochs, lr, eps=eps)


def _scaled(name, split, base, scale) -> Recipe:
    return Recipe(name, split, REG_BASE[base].family, training=REG_BASE[base].training,
                  base=base, scale=scale)


# -- the registry ---------------------------------------------------------------------------
# The split is declared here, once, before anything is tuned on the zoo.
# THE HELD-OUT HALF MUST NEVER BE USED FOR TUNING: no setting, threshold or stopping rule of
# robustscope may be chosen by looking at results on a `held_out` network. Tune on `tune`,
# then judge on `held_out` once. Moving a network between halves after results have been
# seen defeats the split. Every family, training type and logit scale has members in both.
_BASE = [
    # MLPs on digits (64 inputs)
    _mlp("digits-mlp-64x1", "tune", "digits", 64, 1, epochs=60, lr=3e-3),
    _mlp("digits-mlp-512x4", "held_out", "digits", 512, 4, epochs=30, lr=1e-3),
    _mlp("digits-mlp-128x3-pgd", "tune", "digits", 128, 3, "pgd", 40, 3e-3, eps=0.05),
    _mlp("digits-mlp-256x2-pgd", "held_out", "digits", 256, 2, "pgd", 40, 3e-3, eps=0.05),
    _mlp("digits-mlp-256x2-ibp", "tune", "digits", 256, 2, "ibp", 60, 1e-3, eps=0.05),
    _mlp("digits-mlp-128x1-ibp", "held_out", "digits", 128, 1, "ibp", 60, 1e-3, eps=0.05),
    # MLPs on MNIST (784 inputs)
    _mlp("mnist-mlp-256x2", "tune", "mnist-flat", 256, 2),
    _mlp("mnist-mlp-1024x1", "tune", "mnist-flat", 1024, 1),
    _mlp("mnist-mlp-256x6", "held_out", "mnist-flat", 256, 6),
    _mlp("mnist-mlp-64x8", "held_out", "mnist-flat", 64, 8, epochs=15),
    _mlp("mnist-mlp-256x2-ibp", "tune", "mnist-flat", 256, 2, "ibp", 15, eps=0.1),
    _mlp("mnist-mlp-128x4-pgd", "held_out", "mnist-flat", 128, 4, "pgd", 8, eps=0.1),
    # CNNs on MNIST (1x28x28), with and without BatchNorm
    _cnn("mnist-cnn-16-32", "tune", (16, 32), 100, False),
    _cnn("mnist-cnn-16-32-bn", "held_out", (16, 32), 100, True),
    _cnn("mnist-cnn-32-64-bn", "tune", (32, 64), 256, True),
    _cnn("mnist-cnn-32-64", "held_out", (32, 64), 256, False),
    _cnn("mnist-cnn-16-32-ibp", "tune", (16, 32), 100, False, "ibp", 10, eps=0.1),
    _cnn("mnist-cnn-16-32-pgd", "held_out", (16, 32), 100, False, "pgd", 5, eps=0.1),
    # residual networks on colourised, upsampled digits (3x32x32)
    Recipe("colour-resnet-8", "tune", "resnet", "colour", "resnet", (("width", 8),),
           "natural", 15, 3e-3),
    Recipe("colour-resnet-16", "held_out", "resnet", "colour", "resnet", (("width", 16),),
           "natural", 15, 3e-3),
]
REG_BASE = {r.name: r for r in _BASE}
_SCALED = [
    _scaled("digits-mlp-64x1-x0.01", "tune", "digits-mlp-64x1", 0.01),
    _scaled("digits-mlp-64x1-x100", "tune", "digits-mlp-64x1", 100.0),
    _scaled("mnist-mlp-256x6-x0.01", "held_out", "mnist-mlp-256x6", 0.01),
    _scaled("mnist-mlp-256x6-x100", "held_out", "mnist-mlp-256x6", 100.0),
]
REGISTRY: dict[str, Recipe] = {r.name: r for r in _BASE + _SCALED}
assert len(REGISTRY) == len(_BASE) + len(_SCALED), "network names must be unique"


def names(split: str | None = None) -> list[str]:
    """The zoo's network names in registry order, all or those of one split."""
    if split is not None and split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}")
    return [n for n, r in REGISTRY.items() if split is None or r.split == split]


def recipe_hash(recipe: Recipe, registry: dict[str, Recipe] | None = None) -> str:
    """12 hex digits over the recipe's fields except ``split`` (and ``name``: a renamed
    network keeps its weights' key only through its file name), ``ZOO_VERSION`` and, for a
    scaled network, its base's hash."""
    registry = REGISTRY if registry is None else registry
    d = dataclasses.asdict(recipe)
    d.pop("split")
    d.pop("name")
    d["zoo_version"] = ZOO_VERSION
    if recipe.base:
        d["base_hash"] = recipe_hash(registry[recipe.base], registry)
    text = json.dumps(d, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


# -- building -------------------------------------------------------------------------------
@contextlib.contextmanager
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def input_shape(recipe: Recipe) -> tuple[int, ...]:
    r = REGISTRY[recipe.base] if recipe.base else recipe
    return D.load(r.data)[2].shape[1:]


def make(recipe: Recipe) -> nn.Module:
    """The untrained network of a recipe (seeded init); a scaled one wraps a fresh base."""
    if recipe.base:
        return A.Scaled(make(REGISTRY[recipe.base]), recipe.scale)
    torch.manual_seed(recipe.seed)
    return A.build(recipe.arch, **dict(recipe.arch_kw))


def train(recipe: Recipe) -> nn.Module:
    """Train a base recipe: natural and PGD training by ``examples/paper/_common.train``
    (Adam, cross-entropy; PGD: every batch replaced by its Linf PGD examples), IBP by
    :func:`ibp.train_ibp`."""
    Xtr, ytr, _, _ = D.load(recipe.data)
    net = make(recipe)
    if recipe.training == "ibp":
        return ibp.train_ibp(net, Xtr, ytr, recipe.epochs, recipe.eps, recipe.seed, recipe.lr,
                             recipe.batch)
    adv = recipe.eps if recipe.training == "pgd" else 0.0
    return D.paper_common().train(net, Xtr, ytr, recipe.epochs, recipe.seed, recipe.lr,
                                  recipe.batch, adv_eps=adv, adv_steps=recipe.pgd_steps)


def logits(net: nn.Module, X: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return net(torch.as_tensor(X, dtype=torch.float32)).numpy()


def export_onnx(net: nn.Module, shape: tuple[int, ...], path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net.eval(), (torch.zeros(1, *shape),), str(path),
                          opset_version=OPSET, input_names=["x"], output_names=["logits"],
                          dynamic_axes={"x": {0: "n"}, "logits": {0: "n"}}, dynamo=False)


def onnx_difference(net: nn.Module, path: Path, X: np.ndarray) -> tuple[float, float]:
    """Max abs difference between torch's and onnxruntime's logits on ``X``, and the same
    relative to the largest |logit| (comparable across logit scales)."""
    import onnxruntime as ort
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    out = sess.run(None, {"x": np.ascontiguousarray(X, dtype=np.float32)})[0]
    ref = logits(net, X)
    diff = float(np.abs(out - ref).max())
    return diff, diff / float(np.abs(ref).max())


def check_inputs(X_test: np.ndarray, seed: int = 0) -> np.ndarray:
    """The export check's inputs: up to 64 test inputs and 64 uniform points of the box."""
    rng = np.random.default_rng(seed)
    U = rng.uniform(0, 1, (64, *X_test.shape[1:])).astype(np.float32)
    return np.concatenate([X_test[:64], U])


@dataclass
class ZooCase(D.peers_models().Case):
    """``benchmarks/peers/models.Case`` plus the zoo's fields. ``native`` and ``torch_model``
    are the same float32 module (``module``)."""

    split: str = ""
    accuracy: float = float("nan")
    family: str = ""
    training: str = ""
    params: int = 0
    recipe: Recipe | None = None
    recipe_hash: str = ""
    onnx_path: Path | None = None
    onnx_max_abs_diff: float = float("nan")
    extra: dict = field(default_factory=dict)

    @property
    def module(self) -> nn.Module:
        return self.native


def cache_path(name: str, suffix: str) -> Path:
    return CACHE / f"{name}-{recipe_hash(REGISTRY[name])}{suffix}"


def build(name: str, verbose: bool = True) -> dict:
    """Train (or read back) ``name``, export and check its ONNX; returns the cache record."""
    recipe = REGISTRY[name]
    pt, onnx_file = cache_path(name, ".pt"), cache_path(name, ".onnx")
    if pt.exists() and onnx_file.exists():
        return torch.load(pt, weights_only=False)
    t0 = time.perf_counter()
    with one_thread():
        if recipe.base:
            base = _module_from(build(recipe.base, verbose), REGISTRY[recipe.base])
            net = A.Scaled(base, recipe.scale).eval()
        else:
            net = train(recipe)
    seconds = time.perf_counter() - t0
    _, _, Xte, yte = D.load(REGISTRY[recipe.base].data if recipe.base else recipe.data)
    acc = float((logits(net, Xte).argmax(1) == yte).mean())
    extra = {"train_seconds": round(seconds, 2)}
    if recipe.training == "ibp" and not recipe.base:
        extra["ibp_certified_accuracy_at_eps"] = ibp.certified_accuracy(net, Xte, yte,
                                                                       recipe.eps)
    CACHE.mkdir(parents=True, exist_ok=True)
    export_onnx(net, Xte.shape[1:], onnx_file)
    diff, rel = onnx_difference(net, onnx_file, check_inputs(Xte))
    extra["onnx_rel_diff"] = rel
    record = {"name": name, "state_dict": net.state_dict(), "accuracy": acc,
              "onnx_max_abs_diff": diff, "extra": extra,
              "recipe_hash": recipe_hash(recipe), "torch": torch.__version__}
    torch.save(record, pt)
    if verbose:
        print(f"built {name}: accuracy {acc:.3f}, {seconds:.1f} s, onnx diff {diff:.2e}",
              file=sys.stderr, flush=True)
    return record


def _module_from(record: dict, recipe: Recipe) -> nn.Module:
    net = make(recipe)
    net.load_state_dict(record["state_dict"])
    return net.eval()


def load(name: str, n: int = N_TEST) -> ZooCase:
    """Network ``name`` with its first ``n`` correctly classified test inputs (test-set
    order), the box [0, 1], its split, accuracy and export check; builds it if not cached."""
    from robustscope import FeatureSpace
    recipe = REGISTRY[name]
    record = build(name)
    net = _module_from(record, recipe)
    for p in net.parameters():
        p.requires_grad_(False)
    _, _, Xte, yte = D.load(REGISTRY[recipe.base].data if recipe.base else recipe.data)
    ok = logits(net, Xte).argmax(1) == yte
    X, y = Xte[ok][:n], yte[ok][:n]
    shape = X.shape[1:]
    space = FeatureSpace.box(shape[0] if len(shape) == 1 else tuple(shape))

    def predict(x):
        return logits(net, x).argmax(1)

    def proba(x):
        with torch.no_grad():
            return net(torch.as_tensor(x, dtype=torch.float32)).softmax(1).numpy()

    kind = "relu" if recipe.family.startswith("mlp") else "cnn"
    return ZooCase(name, net, net, predict, proba, X, y, space, 10, ("linf", "l2", "l1"), kind,
                   {"accuracy": record["accuracy"], "split": recipe.split},
                   split=recipe.split, accuracy=record["accuracy"], family=recipe.family,
                   training=recipe.training, params=A.n_params(net), recipe=recipe,
                   recipe_hash=record["recipe_hash"], onnx_path=cache_path(name, ".onnx"),
                   onnx_max_abs_diff=record["onnx_max_abs_diff"], extra=record["extra"])


def table(cases: list[ZooCase]) -> str:
    rows = ["| name | family | training | params | accuracy | split | ONNX max abs diff |"
            " ONNX rel diff | train s |", "|---|---|---|---|---|---|---|---|---|"]
    for c in cases:
        r = c.recipe
        tr = c.training + (f" (eps {r.eps:g})" if r.eps else "")
        tr += f", logits x{r.scale:g}" if r.base else ""
        rows.append(f"| {c.name} | {c.family} | {tr} | {c.params:,} | {c.accuracy:.3f} | "
                    f"{c.split} | {c.onnx_max_abs_diff:.1e} | {c.extra['onnx_rel_diff']:.1e} | "
                    f"{c.extra.get('train_seconds', float('nan')):.0f} |")
    return "\n".join(rows) + "\n"


def main(argv: list[str]) -> None:
    chosen = argv or names()
    unknown = [n for n in chosen if n not in REGISTRY]
    if unknown:
        raise SystemExit(f"unknown networks: {unknown}; known: {names()}")
    cases = [load(n) for n in chosen]
    text = table(cases)
    print(text)
    if not argv:
        (HERE / "ZOO.md").write_text(
            "# The zoo (built by `benchmarks/zoo/networks.py`)\n\n" + text
            + f"\nBuilt on {time.strftime('%Y-%m-%d %H:%M %Z')}, torch {torch.__version__}; "
            "accuracy on the whole test split; ONNX difference over 64 test inputs and 64 "
            "uniform points of the box; train s = seconds to train (1 thread, niced, "
            "machine shared).\n")


if __name__ == "__main__":
    main(sys.argv[1:])
