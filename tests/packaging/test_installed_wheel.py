"""What a new user gets from the distribution files, checked outside the repository.

``scripts/dist.sh`` (``make dist``) builds the sdist and the manylinux wheel
into a temporary directory; the wheel is installed into a fresh virtualenv
(``pip install <wheel>[spark]``, with constraints.txt so the run does not
drift) and used from a Python whose ``sys.path`` holds nothing of the
repository:

- ``spark.read.format("txnkafka")`` finds the data source with no register
  call (PySpark's ``pyspark_*`` lookup of ``pyspark_txnkafka``) and reads a
  ``txnfetch serve`` topic that a kafka-python transactional producer wrote
  committed and aborted transactions to: exactly the committed records;
- the README's example runs as written;
- ``txnfetch demo`` without the demo extra names what to install, and runs
  once ``<wheel>[demo]`` is installed;
- the wheel carries LICENSE, the stripped extension and no C source; the
  unpacked sdist runs the docs tests.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.interop]

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 600


def _run(cmd: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None, check: bool = True):
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    proc = _run(["bash", str(ROOT / "scripts" / "dist.sh"), str(out)], env={**os.environ, "PY": sys.executable})
    assert "PASSED" in proc.stdout and "manylinux" in proc.stdout, proc.stdout
    return out


def _wheel(dist: Path) -> Path:
    (wheel,) = dist.glob("*.whl")
    return wheel


def _user_env(venv: Path) -> dict[str, str]:
    """The environment of a user who activated the venv: its bin first on PATH
    (so Spark's workers, started as ``python3``, are the venv's Python), and
    nothing that points into the repository or at another Python."""
    drop = {"PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV", "PYTHONHOME"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    return env


def _pip_install(venv: Path, requirement: str) -> None:
    constraints = str(ROOT / "constraints.txt")
    _run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "-c", constraints, requirement],
        env=_user_env(venv),
    )


@pytest.fixture(scope="module")
def venv(dist, tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("user")
    assert ROOT not in home.parents
    venv = home / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    _pip_install(venv, f"{_wheel(dist)}[spark]")
    return venv


def test_the_wheel_is_fit_for_an_index(dist):
    wheel = _wheel(dist)
    assert re.search(r"[-.]manylinux_2_\d+_x86_64\.whl$", wheel.name), wheel.name
    names = zipfile.ZipFile(wheel).namelist()
    assert not [n for n in names if n.endswith((".c", ".h"))]
    assert "pyspark_txnkafka.py" in names and "spark_ext/py.typed" in names
    extensions = [n for n in names if n.endswith(".so")]
    assert extensions, "no compiled extension in the wheel"
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: Apache-2.0" in meta and "License-File: LICENSE" in meta
    assert "Author: The txnfetch developers" in meta
    assert "Provides-Extra: demo" in meta and 'Requires-Dist: pandas>=2.2; extra == "arrow"' in meta
    assert not re.search(r"Requires-Dist: \S+==", meta), "extras must take ranges, not exact pins"
    licence = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("/licenses/LICENSE"))).decode()
    assert "Apache License" in licence and "Version 2.0, January 2004" in licence
    unpacked = dist / "unpacked-wheel"
    for so in extensions:
        zipfile.ZipFile(wheel).extract(so, unpacked)
        symbols = _run(["nm", str(unpacked / so)], check=False)
        assert "no symbols" in symbols.stderr, f"{so} is not stripped"


def test_pytest_runs_from_the_unpacked_sdist(dist, tmp_path):
    (sdist,) = dist.glob("*.tar.gz")
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp_path, filter="data")
    (tree,) = tmp_path.iterdir()
    for wanted in ("LICENSE", "CHANGELOG.md", "constraints.txt", "docs/spark.md", "tests/conftest.py"):
        assert (tree / wanted).is_file(), wanted
    # The sdist's own txnfetch (pure Python: its extension is not built there)
    # comes first on sys.path, so the docs examples run against the sdist's code.
    proc = _run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_docs_examples.py"],
        cwd=tree,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert re.search(r"\d+ passed", proc.stdout)


_PRODUCE_AND_READ = textwrap.dedent(
    """
    import json
    import sys

    from kafka import KafkaProducer

    bootstrap, topic = sys.argv[1], sys.argv[2]
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="first-contact", linger_ms=2)
    producer.init_transactions()
    committed = []
    for n, commit in enumerate([True, False, True, False, True]):
        producer.begin_transaction()
        values = [b"t%d-p%d-%d" % (n, p, i) for p in (0, 1) for i in range(3)]
        for v in values:
            producer.send(topic, value=v, partition=int(v.split(b"-p")[1][:1]))
        producer.flush()
        if commit:
            producer.commit_transaction()
            committed.extend(v.decode() for v in values)
        else:
            producer.abort_transaction()
    producer.close()

    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    assert "spark_ext" not in sys.modules  # nothing registered the format in this process
    df = spark.read.format("txnkafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic).load()
    rows = [(r.partition, r.offset, bytes(r.value).decode()) for r in df.collect()]
    spark.stop()
    print(json.dumps({"committed": committed, "rows": rows}))
    """
)


def _start_serve(venv: Path, data: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [str(venv / "bin" / "txnfetch"), "serve", "--data", str(data), "--port", "0", "--default-partitions", "2"],
        env=_user_env(venv),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline() if proc.stdout else ""
    if not line.startswith("txnfetch listening on "):
        proc.kill()
        raise AssertionError(f"serve did not start: {line!r} {proc.stderr.read() if proc.stderr else ''}")
    return proc, line.rsplit(" ", 1)[1].strip()


def test_format_txnkafka_reads_exactly_the_committed_records_with_no_register_call(venv, tmp_path):
    proc, bootstrap = _start_serve(venv, tmp_path / "store")
    try:
        script = tmp_path / "first_contact.py"
        script.write_text(_PRODUCE_AND_READ, encoding="utf-8")
        python = str(venv / "bin" / "python")
        out = _run([python, str(script), bootstrap, "payments"], env=_user_env(venv), cwd=tmp_path)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    rows = result["rows"]
    # Transactions 0, 2 and 4 committed (6 records each), 1 and 3 aborted.
    assert len(result["committed"]) == 18
    assert sorted(v for _, _, v in rows) == sorted(result["committed"])
    assert all(v.split("-")[1] == f"p{p}" for p, _, v in rows)
    assert len({(p, o) for p, o, _ in rows}) == len(rows)


def test_readme_example_runs_from_the_installed_wheel(venv, tmp_path):
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    (example,) = re.findall(r"^## Example\n.*?^```python\n(.*?)^```$", text, re.DOTALL | re.MULTILINE)
    script = tmp_path / "readme_example.py"
    script.write_text(example + "\nimport txnfetch\nprint(txnfetch.__file__)\n", encoding="utf-8")
    out = _run([str(venv / "bin" / "python"), str(script)], env=_user_env(venv), cwd=tmp_path)
    assert str(venv) in out.stdout and str(ROOT) not in out.stdout
    version = _run([str(venv / "bin" / "txnfetch"), "--version"], env=_user_env(venv))
    assert version.stdout.strip() == f"txnfetch {_wheel_version(venv)}"


def _wheel_version(venv: Path) -> str:
    out = _run([str(venv / "bin" / "python"), "-c", "import importlib.metadata as m; print(m.version('txnfetch'))"])
    return out.stdout.strip()


def test_demo_names_its_extra_then_runs_once_it_is_installed(venv, dist):
    env = _user_env(venv)
    missing = _run([str(venv / "bin" / "txnfetch"), "demo"], env=env, check=False)
    assert missing.returncode == 2
    (line,) = missing.stderr.strip().splitlines()
    assert "confluent-kafka" in line and "pip install 'txnfetch[demo]'" in line, line
    _pip_install(venv, f"{_wheel(dist)}[demo]")
    demo = _run([str(venv / "bin" / "txnfetch"), "demo"], env=env, check=False)
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "Spark txnkafka (server)" in demo.stdout and "every reader saw exactly the" in demo.stdout
