"""Every bad input: exit 2, one line on stderr, no traceback, nothing left behind (issue 15).

Validation runs before any training, so each case runs in-process in well under a second.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgetrain.api.job import PowerAwareTrainingJobSpec
from edgetrain.cli import main
from edgetrain.operator import phases as ph

GOOD_SPEC: dict[str, Any] = {
    "model": {"architecture": "resnet8-w025"},
    "dataset": {"name": "mnist"},
    "proxyDataset": {"name": "digits"},
    "targetAccuracy": 0.8,
    "powerLimitWatts": 5,
    "batchSizes": [8, 16, 32],
    "budget": {"estimateSamples": 2048, "evalIntervalSamples": 256},
}


def invoke(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """`edgetrain ARGV` in-process: (exit code, stdout, stderr)."""
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def assert_one_line_error(code: int, err: str, *needles: str) -> None:
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith("error:"), err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working folder as cwd, with the caches inside it (so leftovers are seen)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EDGETRAIN_CACHE_DIR", str(tmp_path / "cache"))
    # Set (not deleted) so that teardown also undoes what `--debug` writes into os.environ.
    monkeypatch.setenv("EDGETRAIN_DEBUG", "0")
    return tmp_path


def with_field(path: str, value: Any) -> dict[str, Any]:
    """GOOD_SPEC with the dotted `path` set to `value` (`<del>` removes it)."""
    spec = copy.deepcopy(GOOD_SPEC)
    *parents, last = path.split(".")
    node = spec
    for part in parents:
        node = node.setdefault(part, {})
    if value == "<del>":
        node.pop(last, None)
    else:
        node[last] = value
    return spec


# (dotted field, bad value, text the one line must contain)
JOB_FIELD_CASES: list[tuple[str, Any, str]] = [
    ("model.architecture", "resnet9", "unknown model 'resnet9'"),
    ("model.architecture", 5, "model.architecture"),
    ("model.architecture", "", "model.architecture"),
    ("model.weights", "/nonexistent/w.pt", "does not exist"),
    ("model.weights", ".", "is not a file"),
    ("model.pretrain", {"dataset": "cifar10"}, "model.pretrain.dataset"),
    ("model.pretrain", {"dataset": "digits", "samples": 0}, "model.pretrain.samples"),
    ("model.pretrain", {"dataset": "austen"}, "text data set"),
    ("model", "<del>", "model"),
    ("dataset.name", "cifar10", "unknown data set 'cifar10'"),
    ("dataset.name", "austen", "is a text data set"),
    ("dataset.limit", 0, "dataset.limit"),
    ("dataset.limit", "many", "dataset.limit"),
    ("dataset.limit", 10, "exceed the 8 training samples"),
    ("dataset", "<del>", "dataset"),
    ("proxyDataset.name", "brown", "proxyDataset.name"),
    ("proxyDataset.name", "svhn", "unknown data set 'svhn'"),
    ("targetAccuracy", 0, "targetAccuracy"),
    ("targetAccuracy", 1.5, "targetAccuracy"),
    ("targetAccuracy", "high", "targetAccuracy"),
    ("targetAccuracy", None, "targetAccuracy"),
    ("powerLimitWatts", -1, "powerLimitWatts"),
    ("powerLimitWatts", 0.5, "idle power"),
    ("powerLimitWatts", "lots", "powerLimitWatts"),
    ("batchSizes", [], "batchSizes"),
    ("batchSizes", [0], "batchSizes"),
    ("batchSizes", [8, 8], "unique"),
    ("batchSizes", [4096], "exceed the 1438 training samples of 'digits'"),
    ("batchSizes", "8", "batchSizes"),
    ("gpuFrequenciesHz", [123], "GPU table"),
    ("gpuFrequenciesHz", [-5], "gpuFrequenciesHz"),
    ("optimizer.name", "rmsprop", "optimizer.name"),
    ("optimizer.learningRate", -1, "optimizer.learningRate"),
    ("optimizer.scaling", "cubic", "optimizer.scaling"),
    ("placement.device", "sim:jetson-nanoo", "unknown board 'jetson-nanoo'"),
    ("placement.device", "gpu0", "'sim:<board>' or 'local'"),
    ("placement.device", "local", "'local' needs this machine to be a Jetson"),
    ("strategy.profiling", "guess", "strategy.profiling"),
    ("strategy.predictPoints", 1, "strategy.predictPoints"),
    ("strategy.predictPoints", 1000, "strategy.predictPoints"),
    ("strategy.objective", "speed", "strategy.objective"),
    ("strategy.powerMetric", "max", "strategy.powerMetric"),
    ("budget.estimateSamples", 0, "budget.estimateSamples"),
    ("budget.estimateSamples", 4, "less than one minibatch"),
    ("budget.trainSamples", 1, "budget.trainSamples"),
    ("budget.evalIntervalSamples", 10**9, "evaluate only once"),
    ("budget.profileMinibatches", 1, "budget.profileMinibatches"),
    ("budget.seeds", [], "budget.seeds"),
    ("tagetAccuracy", 0.9, "tagetAccuracy"),
]


@pytest.mark.parametrize(
    ("field", "value", "needle"), JOB_FIELD_CASES, ids=[f"{c[0]}={c[1]!r}" for c in JOB_FIELD_CASES]
)
@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry-run"])
def test_run_rejects_bad_job_field(
    workdir: Path, capsys: pytest.CaptureFixture[str], field: str, value: Any, needle: str,
    dry_run: bool,
) -> None:
    job = workdir / "job.yaml"
    job.write_text(yaml.safe_dump(with_field(field, value)))
    before = files_under(workdir)
    code, _out, err = invoke(["run", *(["--dry-run"] if dry_run else []), str(job)], capsys)
    assert_one_line_error(code, err, "job.yaml", needle)
    assert files_under(workdir) == before


def _unreadable(path: Path) -> Path:
    path.mkdir()  # a folder: unreadable as a file even for root, unlike chmod 000
    return path


FILE_CASES: list[tuple[str, Any, str]] = [
    ("missing", None, "no such file"),
    ("folder", "<dir>", "is a folder"),
    ("malformed YAML", "model: [1,\n", "not valid YAML"),
    ("a list", "- 1\n- 2\n", "expected a mapping"),
    ("empty", "", "expected a mapping"),
    ("binary", b"\xff\xfe\x00\x81", "not a UTF-8 text file"),
    ("wrong kind", "kind: Deployment\nspec: {}\n", "kind"),
]


@pytest.mark.parametrize(("what", "content", "needle"), FILE_CASES, ids=[c[0] for c in FILE_CASES])
def test_run_rejects_bad_job_file(
    workdir: Path, capsys: pytest.CaptureFixture[str], what: str, content: Any, needle: str
) -> None:
    job = workdir / "job.yaml"
    if content == "<dir>":
        _unreadable(job)
    elif isinstance(content, bytes):
        job.write_bytes(content)
    elif content is not None:
        job.write_text(content)
    before = files_under(workdir)
    code, _out, err = invoke(["run", str(job)], capsys)
    assert_one_line_error(code, err, "job.yaml", needle)
    assert files_under(workdir) == before


def test_run_names_a_data_set_that_is_not_installed(
    workdir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EDGETRAIN_DATA_DIR", str(workdir / "nodata"))
    job = workdir / "job.yaml"
    job.write_text(yaml.safe_dump(GOOD_SPEC))
    code, _out, err = invoke(["run", str(job)], capsys)
    assert_one_line_error(code, err, "field 'dataset.name'", "'mnist' is not installed",
                          "make data")


def test_manifest_fields_are_named_under_spec(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = workdir / "job.yaml"
    manifest = {"apiVersion": "edgetrain.io/v1alpha1", "kind": "PowerAwareTrainingJob",
                "metadata": {"name": "x"}, "spec": with_field("dataset.name", "cifar10")}
    job.write_text(yaml.safe_dump(manifest))
    code, _out, err = invoke(["run", str(job)], capsys)
    assert_one_line_error(code, err, "'spec.dataset.name'", "known: austen")


def test_dry_run_of_a_good_job_trains_nothing(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = workdir / "job.yaml"
    job.write_text(yaml.safe_dump(GOOD_SPEC))
    code, out, err = invoke(["run", "--dry-run", str(job)], capsys)
    assert code == 0, err
    for phase in ("estimate", "profile", "train"):
        assert phase in out
    assert "miss" in out and "18,432" in out  # 3 batch sizes × 3 seeds (the default) × 2048
    assert files_under(workdir) == {job}


def _write(tmp: Path, name: str, text: str) -> str:
    (tmp / name).write_text(text)
    return str(tmp / name)


# Every command, bad options or files; `{tmp}` is the working folder.
COMMAND_CASES: list[tuple[str, list[str], str]] = [
    ("plan missing profile", ["plan", "--profile", "{tmp}/no.csv", "--efficiency",
                              "{tmp}/e.json", "--power-limit", "5"], "no such file"),
    ("plan malformed csv", ["plan", "--profile", "{bad_csv}", "--efficiency", "{tmp}/e.json",
                            "--power-limit", "5"], "bad.csv"),
    ("plan malformed json", ["plan", "--profile", "{good_csv}", "--efficiency", "{bad_json}",
                             "--power-limit", "5"], "not valid JSON"),
    ("plan folder as csv", ["plan", "--profile", "{tmp}", "--efficiency", "{bad_json}",
                            "--power-limit", "5"], "is a folder"),
    ("plan limit not a number", ["plan", "--profile", "{good_csv}", "--efficiency",
                                 "{bad_json}", "--power-limit", "lots"], "--power-limit"),
    ("plan bad baseline", ["plan", "--profile", "{good_csv}", "--efficiency", "{good_json}",
                           "--power-limit", "5", "--baseline-freqs", "x:y"], "--baseline-freqs"),
    ("estimate unknown model", ["estimate", "--model", "resnet9", "--dataset", "digits",
                                "--batch-sizes", "8", "--target-accuracy", "0.5", "-o",
                                "{tmp}/e.json"], "unknown model"),
    ("estimate unknown dataset", ["estimate", "--model", "resnet8", "--dataset", "cifar10",
                                  "--batch-sizes", "8", "--target-accuracy", "0.5", "-o",
                                  "{tmp}/e.json"], "unknown data set"),
    ("estimate text set", ["estimate", "--model", "resnet8", "--dataset", "austen",
                           "--batch-sizes", "8", "--target-accuracy", "0.5", "-o",
                           "{tmp}/e.json"], "text data set"),
    ("estimate batch not int", ["estimate", "--model", "resnet8", "--dataset", "digits",
                                "--batch-sizes", "a,b", "--target-accuracy", "0.5", "-o",
                                "{tmp}/e.json"], "--batch-sizes"),
    ("estimate batch too big", ["estimate", "--model", "resnet8", "--dataset", "digits",
                                "--batch-sizes", "100000", "--target-accuracy", "0.5", "-o",
                                "{tmp}/e.json"], "exceed"),
    ("estimate target 2", ["estimate", "--model", "resnet8", "--dataset", "digits",
                           "--batch-sizes", "8", "--target-accuracy", "2", "-o",
                           "{tmp}/e.json"], "--target-accuracy"),
    ("estimate weights missing", ["estimate", "--model", "resnet8", "--dataset", "digits",
                                  "--batch-sizes", "8", "--target-accuracy", "0.5", "-o",
                                  "{tmp}/e.json", "--weights", "{tmp}/w.pt"], "--weights"),
    ("estimate seeds", ["estimate", "--model", "resnet8", "--dataset", "digits",
                        "--batch-sizes", "8", "--target-accuracy", "0.5", "-o", "{tmp}/e.json",
                        "--seeds", "x"], "--seeds"),
    ("pretrain unknown model", ["pretrain", "--model", "vgg", "--dataset", "digits"],
     "unknown model"),
    ("pretrain unknown dataset", ["pretrain", "--model", "resnet8", "--dataset", "cifar"],
     "unknown data set"),
    ("pretrain samples 0", ["pretrain", "--model", "resnet8", "--dataset", "digits",
                            "--samples", "0"], "--samples"),
    ("profile unknown model", ["profile", "--model", "x", "--dataset", "digits",
                               "--batch-sizes", "8", "-o", "{tmp}/p.csv"], "unknown model"),
    ("profile strategy", ["profile", "--model", "resnet8", "--dataset", "digits",
                          "--batch-sizes", "8", "-o", "{tmp}/p.csv", "--strategy", "guess"],
     "--strategy"),
    ("profile freq", ["profile", "--model", "resnet8", "--dataset", "digits", "--batch-sizes",
                      "8", "-o", "{tmp}/p.csv", "--gpu-freqs", "fast"], "frequency"),
    ("profile no device", ["profile", "--model", "resnet8", "--dataset", "digits",
                           "--batch-sizes", "8", "-o", "{tmp}/p.csv", "--sysfs-root",
                           "{tmp}/nosys"], "--sysfs-root"),
    ("profile agent outside a pod", ["profile", "--model", "resnet8", "--dataset", "digits",
                                     "--batch-sizes", "8", "-o", "{tmp}/p.csv",
                                     "--clock-by-agent"], "POD_NAME and POD_NAMESPACE"),
    ("profile empty batches", ["profile", "--model", "resnet8", "--dataset", "digits",
                               "--batch-sizes", ",", "-o", "{tmp}/p.csv"], "empty"),
    ("train unknown dataset", ["train", "--model", "resnet8", "--dataset", "svhn",
                               "--batch-size", "8", "--target-accuracy", "0.5",
                               "--checkpoint-dir", "{tmp}/ck"], "unknown data set"),
    ("train batch 0", ["train", "--model", "resnet8", "--dataset", "digits", "--batch-size",
                       "0", "--target-accuracy", "0.5", "--checkpoint-dir", "{tmp}/ck"],
     "--batch-size"),
    ("train batch type", ["train", "--model", "resnet8", "--dataset", "digits",
                          "--batch-size", "many", "--target-accuracy", "0.5",
                          "--checkpoint-dir", "{tmp}/ck"], "--batch-size"),
    ("train weights missing", ["train", "--model", "resnet8", "--dataset", "digits",
                               "--batch-size", "8", "--target-accuracy", "0.5",
                               "--checkpoint-dir", "{tmp}/ck", "--weights", "{tmp}/w.pt"],
     "--weights"),
    ("train freq without device", ["train", "--model", "resnet8", "--dataset", "digits",
                                   "--batch-size", "8", "--target-accuracy", "0.5",
                                   "--checkpoint-dir", "{tmp}/ck", "--gpu-freq", "1GHz"],
     "--gpu-freq"),
    ("train await mode without pin", ["train", "--model", "resnet8", "--dataset", "digits",
                                      "--batch-size", "8", "--target-accuracy", "0.5",
                                      "--checkpoint-dir", "{tmp}/ck", "--await-power-mode",
                                      "2,921600000,1600000000"], "needs --await-pin"),
    ("train await pin without device", ["train", "--model", "resnet8", "--dataset", "digits",
                                        "--batch-size", "8", "--target-accuracy", "0.5",
                                        "--checkpoint-dir", "{tmp}/ck", "--await-pin", "1GHz"],
     "--await-pin needs a device"),
    ("train await bad mode", ["train", "--model", "resnet8", "--dataset", "digits",
                              "--batch-size", "8", "--target-accuracy", "0.5",
                              "--checkpoint-dir", "{tmp}/ck", "--await-pin", "1GHz",
                              "--await-power-mode", "2,fast"], "CORES,CPU_HZ,EMC_HZ"),
    ("train optimizer", ["train", "--model", "resnet8", "--dataset", "digits", "--batch-size",
                         "8", "--target-accuracy", "0.5", "--checkpoint-dir", "{tmp}/ck",
                         "--optimizer", "rmsprop"], "--optimizer"),
    ("run missing option value", ["run", "--workdir"], "--workdir"),
    ("device info json flag value", ["device", "info", "--sysfs-root"], "--sysfs-root"),
    ("crds unknown option", ["crds", "--frobnicate"], "--frobnicate"),
    ("train-reference points", ["train-reference", "--points", "3"], "--points"),
    ("unknown command", ["estimat"], "No such command"),
    ("estimate output is a folder", ["estimate", "--model", "resnet8", "--dataset", "digits",
                                     "--batch-sizes", "8", "--target-accuracy", "0.5", "-o",
                                     "{tmp}"], "is a folder"),
    ("estimate output under a file", ["estimate", "--model", "resnet8", "--dataset", "digits",
                                      "--batch-sizes", "8", "--target-accuracy", "0.5", "-o",
                                      "{good_csv}/e.json"], "is not a folder"),
    ("profile output is a folder", ["profile", "--model", "resnet8", "--dataset", "digits",
                                    "--batch-sizes", "8", "-o", "{tmp}"], "is a folder"),
    ("train checkpoint dir is a file", ["train", "--model", "resnet8", "--dataset", "digits",
                                        "--batch-size", "8", "--target-accuracy", "0.5",
                                        "--checkpoint-dir", "{good_csv}"], "not a folder"),
    ("run report is a file", ["run", "--report", "{good_csv}", "{good_job}"], "--report"),
    ("run dry-run bad report", ["run", "--dry-run", "--report", "{good_csv}", "{good_job}"],
     "--report"),
    ("crds output is a file", ["crds", "-o", "{good_csv}"], "not a folder"),
    ("device info root missing", ["device", "info", "--sysfs-root", "{tmp}/nosys"],
     "--sysfs-root"),
    ("device info root is a file", ["device", "info", "--sysfs-root", "{good_csv}"],
     "is not a folder"),
    ("device sim unknown board", ["device", "sim", "--model", "jetson-nanoo", "--root",
                                  "{tmp}/tw"], "unknown board"),
    ("device sim unknown workload", ["device", "sim", "--workload", "vgg", "--root",
                                     "{tmp}/tw"], "unknown model"),
    ("device sim bad shape", ["device", "sim", "--workload", "resnet8", "--input-shape",
                              "3,x,32", "--root", "{tmp}/tw"], "--input-shape"),
    ("device sim root is a file", ["device", "sim", "--root", "{good_csv}"], "not a folder"),
    ("train-reference unknown board", ["train-reference", "--board", "foo", "--output-dir",
                                       "{tmp}/refs"], "unknown board"),
    ("cluster up unknown board", ["cluster", "up", "--jetson", "foo=1"], "unknown board"),
]


@pytest.mark.parametrize(("what", "argv", "needle"), COMMAND_CASES,
                         ids=[c[0] for c in COMMAND_CASES])
def test_command_rejects_bad_input(
    workdir: Path, capsys: pytest.CaptureFixture[str], what: str, argv: list[str], needle: str
) -> None:
    from edgetrain.api import format_profile_csv
    from tests.conftest import FIGURE1_POINTS

    names = {
        "tmp": str(workdir),
        "bad_csv": _write(workdir, "bad.csv", "batch_size,gpu_freq_hz\n1,2\n"),
        "good_csv": _write(workdir, "good.csv", format_profile_csv(FIGURE1_POINTS)),
        "bad_json": _write(workdir, "bad.json", "{\"model\": "),
        "good_json": _write(workdir, "good.json", (
            '{"model": "m", "dataset": "d", "target_accuracy": 0.5, "batch_sizes": [64, 128],'
            ' "samples_to_accuracy": [1.0, 2.0], "r": [0.5, 1.0]}')),
        "good_job": _write(workdir, "job.yaml", yaml.safe_dump(GOOD_SPEC)),
    }
    before = files_under(workdir)
    code, _out, err = invoke([a.format(**names) for a in argv], capsys)
    assert_one_line_error(code, err, needle)
    assert files_under(workdir) == before


def test_debug_shows_the_traceback(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = workdir / "job.yaml"
    job.write_text(yaml.safe_dump(with_field("placement.device", "sim:jetson-nanoo")))
    code, _out, err = invoke(["--debug", "run", str(job)], capsys)
    assert code == 2
    assert "Traceback" in err and "jetson-nanoo" in err.splitlines()[-1]


def test_estimate_target_never_reached_is_one_line(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Trains two tiny minibatches per batch size: the message has the best accuracies."""
    out = workdir / "eff.json"
    code, _out, err = invoke(
        ["estimate", "--model", "resnet8-w025", "--dataset", "digits", "--batch-sizes", "8,16",
         "--target-accuracy", "0.999", "--sample-budget", "32", "--eval-interval", "16",
         "--eval-samples", "40", "-o", str(out), "--json-progress"],
        capsys,
    )
    assert_one_line_error(code, err, "no batch size reached target accuracy 0.999",
                          "b=8: ", "b=16: ", "within 32 samples", "--sample-budget",
                          "budget.estimateSamples", "targetAccuracy")
    assert not out.exists()


def test_operator_fails_bad_input_at_pending() -> None:
    spec = PowerAwareTrainingJobSpec.model_validate(with_field("dataset.name", "cifar10"))
    message = ph.bad_input(spec, "ns/job")
    assert message is not None
    assert message.startswith("ns/job, field 'spec.dataset.name': unknown data set 'cifar10'")
    # The operator does not read placement.device: a twin board name is no concern of its.
    ok = PowerAwareTrainingJobSpec.model_validate(with_field("placement.device", "sim:x"))
    assert ph.bad_input(ok, "ns/job") is None


_values = st.one_of(
    st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True),
    st.text(max_size=12), st.lists(st.integers(-5, 10**5), max_size=4),
    st.dictionaries(st.text(max_size=6), st.integers(), max_size=2),
)
_fields = st.sampled_from(sorted({c[0] for c in JOB_FIELD_CASES}))


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutations=st.lists(st.tuples(_fields, _values), min_size=1, max_size=3))
def test_random_job_mutations_never_trace(
    workdir: Path, capsys: pytest.CaptureFixture[str], mutations: list[tuple[str, Any]]
) -> None:
    """Any mutation of a good job is either accepted by the check or one line with exit 2."""
    spec: dict[str, Any] = copy.deepcopy(GOOD_SPEC)
    for field, value in mutations:
        *parents, last = field.split(".")
        node = spec
        for part in parents:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        node[last] = value
    job = workdir / "job.yaml"
    job.write_text(yaml.safe_dump(spec))
    before = files_under(workdir)
    code, _out, err = invoke(["run", "--dry-run", str(job)], capsys)
    assert "Traceback" not in err
    if code != 0:
        assert_one_line_error(code, err)
    assert files_under(workdir) == before


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=80))
def test_random_job_text_never_traces(
    workdir: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    job = workdir / "job.yaml"
    job.write_text(text, encoding="utf-8", errors="surrogatepass")
    code, _out, err = invoke(["run", "--dry-run", str(job)], capsys)
    assert "Traceback" not in err
    assert_one_line_error(code, err, "job.yaml")


@pytest.mark.parametrize("argv", [["run", "{job}"], ["estimate", "--model", "vgg", "--dataset",
                                                       "digits", "--batch-sizes", "8",
                                                       "--target-accuracy", "0.5", "-o", "e"]])
def test_console_script_prints_one_line(tmp_path: Path, argv: list[str]) -> None:
    """The real process (python -m edgetrain), as a user's terminal sees it."""
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(with_field("placement.device", "sim:jetson-nanoo")))
    env = {**os.environ, "EDGETRAIN_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("EDGETRAIN_DEBUG", None)
    proc = subprocess.run([sys.executable, "-m", "edgetrain", *[a.format(job=job) for a in argv]],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60)
    assert_one_line_error(proc.returncode, proc.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.yaml"]


def test_run_target_never_reached_leaves_no_cache_entry(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The estimate trains a few minibatches, misses 0.999, and nothing is cached or reported."""
    spec = with_field("targetAccuracy", 0.999)
    spec.update(dataset={"name": "digits"}, batchSizes=[8, 16],
                budget={"estimateSamples": 32, "evalIntervalSamples": 16, "evalSamples": 40})
    job = workdir / "job.yaml"
    job.write_text(yaml.safe_dump(spec))
    code, _out, err = invoke(["run", "--json-progress", "--workdir", str(workdir / "w"),
                              str(job)], capsys)
    assert_one_line_error(code, err, "job.yaml: no batch size reached target accuracy 0.999",
                          "best accuracy b=8: ", "budget.estimateSamples", "targetAccuracy")
    left = {p.relative_to(workdir).parts[0] for p in files_under(workdir)}
    assert left == {"job.yaml"}, left


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(csv_text=st.text(alphabet="batch_sizegpufreqhz,0123456789.-\n e", max_size=120),
       json_text=st.text(max_size=60))
def test_random_plan_inputs_never_trace(
    workdir: Path, capsys: pytest.CaptureFixture[str], csv_text: str, json_text: str
) -> None:
    """Whatever is in the profile CSV and efficiency JSON, plan answers in one line or plans."""
    from edgetrain.api import format_profile_csv
    from tests.conftest import FIGURE1_POINTS

    header = format_profile_csv(FIGURE1_POINTS).splitlines()[0]
    (workdir / "p.csv").write_text(header + "\n" + csv_text)
    (workdir / "e.json").write_text(json_text)
    code, _out, err = invoke(["plan", "--profile", "p.csv", "--efficiency", "e.json",
                              "--power-limit", "5"], capsys)
    assert "Traceback" not in err
    assert code == 2  # the JSON is never a valid vector
    assert_one_line_error(code, err)
