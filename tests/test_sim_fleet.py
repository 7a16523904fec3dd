"""colo-sim at fleet scale: node by node, in processes and on a Dask cluster with the same answer byte for byte,
from Parquet files and datasets partitioned by node (`colo-sim convert`), and the inputs that used to break it
(a wild time, millisecond clocks, a byte-order mark, a plot that cannot be written)."""

from __future__ import annotations

import gzip
import json
import os
import random
from collections import Counter
from pathlib import Path

import pytest

from colo_sim import main as cli
from colo_sim.report import Progress
from colo_sim.trace import LONG_HEADER

LONG = ",".join(LONG_HEADER)
BITBRAINS = "vm,unix_s,cores,cpu_prov_mhz,cpu_used_mhz,mem_prov_kb,mem_used_kb"
GI = float(1 << 30)
T0 = 1_700_000_000


def fleet_rows(nodes: int = 5, pods: int = 4, steps: int = 120, unplaced: int = 6, seed: int = 11) -> list[str]:
    """Long-format rows: `nodes` named nodes of `pods` pods and `unplaced` pods to pack, interleaved by time (as
    a Prometheus export is), with gaps, a pod with two samples in one step and one sample out of order."""
    rng = random.Random(seed)
    placed = [(f"node-{n}", f"ns/p{n}-{i}") for n in range(nodes) for i in range(pods)]
    loose = [("", f"vm{i}") for i in range(unplaced)]
    rows = []
    for k in range(steps):
        for j, (node, pod) in enumerate(placed + loose):
            if (j + k) % 17 == 0:
                continue  # a gap
            req = 1.0 + j % 4
            use = req * (0.95 if rng.random() < 0.08 else 0.3 * rng.random())
            t = T0 + 300 * k + j % 7
            rows.append(f"{node},{pod},{t},{req},{use!r},{(2 + j % 3) * GI},{(0.2 + 0.5 * rng.random()) * GI!r}")
            if j == 3 and k % 10 == 0:
                rows.append(f"{node},{pod},{t + 100},{req},{use / 2!r},{(2 + j % 3) * GI},{0.1 * GI!r}")
    rows.insert(50, rows[10])  # again, after later samples of its pod: skipped as time_backwards
    return rows


def write_csv(path: Path, rows: list[str], header: str = LONG) -> str:
    path.write_text(header + "\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return str(path)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


COMMON = ("--output", "json", "--node-cpu", "8", "--node-memory", "24Gi", "--horizon", "1800")


def test_jobs_give_the_same_json_byte_for_byte(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_csv(tmp_path / "t.csv", fleet_rows())
    code, one, _ = run(capsys, "--trace", path, "--jobs", "1", *COMMON)
    assert code == 0
    doc = json.loads(one)
    assert doc["nodes"] >= 6 and doc["skipped_rows"] == {"time_backwards": 1}
    code, two, _ = run(capsys, "--trace", path, "--jobs", "2", *COMMON)
    assert code == 0 and two == one
    code, three, _ = run(capsys, "--trace", path, "--jobs", "3", *COMMON)
    assert code == 0 and three == one


def test_a_converted_dataset_and_a_parquet_file_replay_as_the_csv(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    from colo_sim.packing import NodeSize
    from colo_sim.parquet_trace import PartitionRows, plan_parquet

    rows = fleet_rows()
    del rows[50]  # no skipped row: a dataset holds the usable rows only
    path = write_csv(tmp_path / "t.csv", rows)
    code, from_csv, _ = run(capsys, "--trace", path, *COMMON)
    assert code == 0
    code, _, err = run(capsys, "convert", "--trace", path, "--to", str(tmp_path / "ds"))
    assert code == 0 and "rows of 5 nodes written" in err
    assert sorted(p.name for p in (tmp_path / "ds").iterdir()) == [
        "node=__HIVE_DEFAULT_PARTITION__", *(f"node=node-{n}" for n in range(5))]  # fmt: skip
    code, from_dataset, _ = run(capsys, "--trace", str(tmp_path / "ds"), "--jobs", "2", *COMMON)
    assert code == 0 and from_dataset == from_csv
    plan = plan_parquet(str(tmp_path / "ds"), NodeSize(8.0, 24 * GI), 1.0, None, 1e9)
    assert all(isinstance(n.rows, PartitionRows) for n in plan.nodes if n.name.startswith("node-"))
    # one Parquet file with a node column, node names as a dictionary, times as a timestamp in milliseconds
    table = pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(
        column_types={"node": pa.string(), "pod": pa.string()}, strings_can_be_null=False))  # fmt: skip
    millis = pa.array((table.column("unix_s").to_numpy() * 1000).astype("int64")).cast(pa.timestamp("ms"))
    table = table.set_column(2, "unix_s", millis).set_column(0, "node", table.column("node").dictionary_encode())
    pq.write_table(table, tmp_path / "one.parquet")
    code, from_file, err = run(capsys, "--trace", str(tmp_path / "one.parquet"), *COMMON)
    assert err == "" and code == 0 and from_file == from_csv


def test_a_dask_cluster_on_loopback_gives_the_same_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    distributed = pytest.importorskip("distributed")
    path = write_csv(tmp_path / "t.csv", fleet_rows())
    code, local, _ = run(capsys, "--trace", path, "--jobs", "1", *COMMON)
    assert code == 0
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None, worker_dashboard_address=None) as cluster:  # fmt: skip
        code, remote, _ = run(capsys, "--trace", path, "--cluster", cluster.scheduler_address, *COMMON)
    assert code == 0 and remote == local
    code, _, err = run(capsys, "--trace", path, "--cluster", "tcp://127.0.0.1:1", *COMMON)
    assert code == 2 and err.count("\n") == 1 and "cannot reach the Dask scheduler" in err


def test_millisecond_and_microsecond_clocks_are_converted_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = fleet_rows(nodes=2, unplaced=2, steps=40)
    seconds = write_csv(tmp_path / "s.csv", rows)
    code, expected, err = run(capsys, "--trace", seconds, *COMMON)
    assert code == 0 and err == ""
    for scale, unit in ((1000, "milliseconds"), (1_000_000, "microseconds")):
        scaled = []
        for row in rows:
            f = row.split(",")
            f[2] = str(int(f[2]) * scale)
            scaled.append(",".join(f))
        code, out, err = run(capsys, "--trace", write_csv(tmp_path / f"{unit}.csv", scaled), *COMMON)
        assert code == 0 and out == expected
        assert err.count("\n") == 1 and f"looks like {unit}" in err and "warning" in err


def test_a_wild_time_is_one_line_naming_the_row_and_max_span_raises_the_bound(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = fleet_rows(nodes=1, unplaced=1, steps=30)
    rows.append(f"node-0,ns/late,9999999999,1,0.5,{GI},{GI}")
    path = write_csv(tmp_path / "t.csv", rows)
    code, out, err = run(capsys, "--trace", path, *COMMON)
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert "'ns/late' on node 'node-0' at unix_s 9999999999" in err and "--max-span" in err
    early = [f",early,1000,1,0.5,{GI},{GI}", *fleet_rows(nodes=1, unplaced=1, steps=30)]
    code, _, err = run(capsys, "--trace", write_csv(tmp_path / "e.csv", early), *COMMON)
    assert code == 2 and "pod 'early' at unix_s 1000 " in err
    short = fleet_rows(nodes=1, unplaced=1, steps=30)  # 2.5 hours
    code, _, err = run(capsys, "--trace", write_csv(tmp_path / "s.csv", short), "--max-span", "1h", *COMMON)
    assert code == 2 and "beyond the 0.0416667-day limit" in err
    code, _, _ = run(capsys, "--trace", write_csv(tmp_path / "s.csv", short), "--max-span", "3h", *COMMON)
    assert code == 0


def test_a_byte_order_mark_and_crlf_headers_are_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    body = "\r\n".join(f"7,{T0 + 300 * k},4,10000.0,{2500.0 + k},1024,512" for k in range(30)) + "\r\n"
    plain = tmp_path / "plain.csv"
    plain.write_text(f"{BITBRAINS}\n" + body.replace("\r\n", "\n"), encoding="utf-8")
    code, expected, _ = run(capsys, "--trace", str(plain), "--horizon", "600", "--output", "json")
    assert code == 0
    marked = tmp_path / "marked.csv.gz"
    with gzip.open(marked, "wb") as f:
        f.write(b"\xef\xbb\xbf" + f"{BITBRAINS}\r\n{body}".encode())
    code, out, err = run(capsys, "--trace", str(marked), "--horizon", "600", "--output", "json")
    assert (code, err) == (0, "") and out == expected


def test_the_plot_is_checked_before_the_trace_is_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    missing = str(tmp_path / "missing.csv")  # were the trace read first, the error would name it
    code, _, err = run(capsys, "--trace", missing, "--plot", str(tmp_path / "no" / "p.png"))
    assert code == 2 and "--plot" in err and "no such directory" in err
    code, _, err = run(capsys, "--trace", missing, "--plot", str(tmp_path))
    assert code == 2 and "is a directory" in err


def test_the_progress_bar_is_drawn_on_a_terminal_only(tmp_path: Path) -> None:
    leader, follower = os.openpty()
    with os.fdopen(follower, "w") as terminal:
        bar = Progress(terminal)
        bar(1, 4)
        bar(4, 4)
    drawn = ""
    while True:  # what the terminal received, up to the end (EIO once the other side is closed and read)
        try:
            chunk = os.read(leader, 4096)
        except OSError:
            break
        if not chunk:
            break
        drawn += chunk.decode()
    os.close(leader)
    assert "1/4 nodes" in drawn and "4/4 nodes" in drawn
    with open(tmp_path / "log", "w") as f:
        quiet = Progress(f)
        quiet(1, 4)
    assert (tmp_path / "log").read_text() == ""


def test_pyarrows_csv_reader_reads_what_the_standard_reader_reads(tmp_path: Path) -> None:
    """The same usable rows and skip counts from pyarrow's CSV reader as from the csv module's; a number
    pyarrow parses differently from float() (spaces around it, a word) sends the file to the csv module."""

    from colo_sim.columns import Intake, Pods
    from colo_sim.csv_arrow import Unsupported, arrow_csv_batches, read_csv
    from colo_sim.trace import csv_batches

    def rows_of(reader: object, path: str) -> tuple[object, ...]:
        pods, intake, skipped = Pods(), Intake(Pods(), keep=True), Counter()
        intake.pods = pods
        for batch in reader(path, None, pods, skipped):  # type: ignore[operator]
            intake.add(batch)
        r = intake.rows()
        return (pods.names, dict(skipped + intake.skipped),
                *(getattr(r, f).tolist() for f in ("code", "t", "cpu_request", "cpu_usage", "memory_request")))  # fmt: skip

    long_rows = ["n,a,10,1,0.5,100,50", "n,a,10,1", "n,a,20,1,nan,100,50", "n,a,20,1,-0.5,100,50", "n,,20,1,0.5,100,50",
                 "n,a,5,1,0.5,100,50", "n,a,10,1,0.5,100,50", "", "n,a,30,1,0.5,100,50", "m, a ,5,1,0.5,100,50",
                 '"q,x",b,7,1,inf,1,1', "m,b,8,1,,1,1", "m,b,9,1,NA,1,1", "m,b,10,2,0.25,3,1e3"]  # fmt: skip
    bb_rows = ["1,10,0,0,0,1,1", "1,10,1,inf,0,1,1", "1,20,1,100,50,1,1", "1,30,1,100,50,1,-1", ",40,2,200,20,1,1",
               "1,50,4,10000.0,2500.0,1024,512"]  # fmt: skip
    for name, header, rows in (("long.csv", LONG, long_rows), ("bb.csv", BITBRAINS, bb_rows)):
        path = write_csv(tmp_path / name, rows, header)
        python, arrow = rows_of(csv_batches, path), rows_of(arrow_csv_batches, path)
        assert python == arrow and len(python[2]) >= 2  # type: ignore[arg-type]
    spaced = write_csv(tmp_path / "spaced.csv", ["n,a,10, 1 ,0.5,100,50", "n,a,20,1,x,100,50"])
    with pytest.raises(Unsupported):
        rows_of(arrow_csv_batches, spaced)
    _, intake = read_csv(spaced, None, fast=True)
    assert intake.summary.samples == 1 and dict(intake.skipped) == {"not_a_number": 1}


def test_a_node_whose_files_cannot_be_read_at_replay_is_one_error(tmp_path: Path) -> None:
    """A worker that cannot see the dataset (here: a node's file gone after the first pass) names the node."""
    from colo_sim.executors import local
    from colo_sim.packing import NodeSize
    from colo_sim.parquet_trace import plan_parquet
    from colo_sim.replay import Settings, run_plan
    from colo_sim.trace import TraceError

    rows = fleet_rows(nodes=2, unplaced=0, steps=30)
    del rows[50]
    path = write_csv(tmp_path / "t.csv", rows)
    assert cli.main(["convert", "--trace", path, "--to", str(tmp_path / "ds")]) == 0
    settings = Settings(node=NodeSize(8.0, 24 * GI))
    plan = plan_parquet(str(tmp_path / "ds"), settings.node, 1.0, None, 1e9)
    (tmp_path / "ds" / "node=node-1" / "part-00000.parquet").unlink()
    for jobs in (1, 2):
        with pytest.raises(TraceError, match="node 'node-1': cannot read it"):
            run_plan(plan, settings, executor=local(jobs))
