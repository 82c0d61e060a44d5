#!/usr/bin/env python3
"""Benchmark of point-in-time recovery (issue 21): the archiver's RPO and cost under a steady
write load, and replaying an archive against `mariadb-binlog | mariadb`.

Starts its own throwaway MariaDB (binary log on, row format, as the VisitorsApp controller runs
it) in --work-dir, then:

1. lag: `visitors-agent archive` streams the binary log to a folder while one session commits
   --tps single-row transactions a second for --seconds. Each row holds its commit time
   (NOW(6)); each segment's record says when it was stored and which GTIDs it holds; a
   transaction's lag is the time its segment was stored minus its commit time. Reports p50, p99
   and max, and the archiver's CPU (user+system seconds per second of wall time, from /proc)
   and its peak and final RSS.
2. replay: a base backup of an empty table, then about --replay-mib MiB of binary log (rows
   written in transactions of --rows-per-transaction rows), archived; then, on the same server and data,
   a) `visitors-agent restore --binlog-archive ... --until-time <end>` (load the empty base,
      replay into staging, swap), and
   b) the base restored the same way, then the same segments, decompressed, through
      `mariadb-binlog <segments> | mariadb`,
   each timed (wall) with the server's CPU seconds (from /proc of mariadbd) and checked: the
   table's checksum must equal the original's.

Usage: bench/pitr/run.py [--work-dir DIR] [--agent PATH] [--tps N] [--seconds N]
                         [--replay-mib N] [--rows-per-transaction N] [--skip-lag] [--skip-replay]
Needs: mariadb-server mariadb-client zstd (Debian packages) and a release build of the agent
(cargo build --release -p visitors-agent) unless --agent is given.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TICKS = os.sysconf("SC_CLK_TCK")
# What one row of the replay's table takes in a row event (measured: 534 MiB for 5,014,928 rows).
BINLOG_BYTES_PER_ROW = 112


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, root: Path):
        self.root = root
        self.data = root / "data"
        self.sock = root / "mysql.sock"
        self.port = free_port()
        user = ["--user=root"] if os.geteuid() == 0 else []
        subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={self.data}", "--auth-root-authentication-method=socket",
                        "--skip-test-db", *user], check=True, stdout=subprocess.DEVNULL)
        self.proc = subprocess.Popen(
            ["mariadbd", "--no-defaults", f"--datadir={self.data}", f"--socket={self.sock}", f"--port={self.port}",
             "--bind-address=127.0.0.1", f"--log-error={root / 'error.log'}", f"--log-bin={root / 'binlog'}",
             "--binlog-format=ROW", "--server-id=1", "--max-binlog-size=256M", "--innodb-buffer-pool-size=512M",
             "--innodb-log-file-size=256M", "--local-infile=1", "--skip-name-resolve", "--max-allowed-packet=256M", *user],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(300):
            if self.try_sql("SELECT 1") is not None:
                break
            time.sleep(0.2)
        self.sql("CREATE USER bench@'%' IDENTIFIED BY 'bench'; GRANT ALL ON *.* TO bench@'%' WITH GRANT OPTION;")

    def client(self) -> list[str]:
        return ["mariadb", "--no-defaults", f"--socket={self.sock}", "-uroot", "-N", "-B"]

    def try_sql(self, sql: str) -> str | None:
        r = subprocess.run(self.client() + ["-e", sql], capture_output=True, text=True)
        return r.stdout if r.returncode == 0 else None

    def sql(self, sql: str) -> str:
        r = subprocess.run(self.client() + ["-e", sql], capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError(f"{sql[:200]}: {r.stderr}")
        return r.stdout

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.proc.pid)

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def rss_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def agent_env(server: Server) -> dict:
    env = dict(os.environ, MYSQL_PWD="bench", RUST_LOG="warn")
    return env


def agent_args(server: Server) -> list[str]:
    return ["--host", "127.0.0.1", "--port", str(server.port), "--user", "bench"]


def start_archiver(agent: str, server: Server, archive: Path) -> subprocess.Popen:
    return subprocess.Popen([agent, "archive", "--to", f"file://{archive}", *agent_args(server)],
                            env=agent_env(server), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop_archiver(proc: subprocess.Popen):
    proc.terminate()
    proc.wait(timeout=60)


def records(archive: Path) -> list[dict]:
    return [json.loads(Path(p).read_text()) for p in sorted(glob.glob(str(archive / "index" / "*.json")))]


def write_load(server: Server, tps: int, seconds: int, first_id: int):
    """One session committing `tps` single-row transactions a second, paced by wall time."""
    client = subprocess.Popen(server.client() + ["bench"], stdin=subprocess.PIPE, text=True)
    start = time.monotonic()
    for n in range(tps * seconds):
        due = start + n / tps
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        client.stdin.write(f"INSERT INTO t (id, at, v) VALUES ({first_id + n}, NOW(6), REPEAT('x', 100));\n")
        client.stdin.flush()
    client.stdin.close()
    client.wait()


def percentile(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def lag_benchmark(agent: str, server: Server, work: Path, tps: int, seconds: int):
    server.sql("CREATE DATABASE IF NOT EXISTS bench; CREATE TABLE bench.t (id BIGINT PRIMARY KEY, at DATETIME(6), v VARCHAR(200))")
    archive = work / "lag-archive"
    archiver = start_archiver(agent, server, archive)
    time.sleep(3)
    cpu_before, wall_before = cpu_seconds(archiver.pid), time.monotonic()
    gtid_before = server.sql("SELECT @@gtid_binlog_pos").strip()
    peak = [0]

    def sample():
        while archiver.poll() is None:
            try:
                peak[0] = max(peak[0], rss_kib(archiver.pid, "VmRSS"))
            except FileNotFoundError:
                return
            time.sleep(0.5)

    threading.Thread(target=sample, daemon=True).start()
    write_load(server, tps, seconds, 1)
    time.sleep(8)  # everything stored
    cpu = (cpu_seconds(archiver.pid) - cpu_before) / (time.monotonic() - wall_before)
    hwm, rss = rss_kib(archiver.pid, "VmHWM"), rss_kib(archiver.pid, "VmRSS")
    stop_archiver(archiver)
    commits = {int(i): float(ts) for i, ts in (line.split("\t") for line in server.sql(
        "SELECT id, UNIX_TIMESTAMP(at) FROM bench.t").splitlines())}
    # The load is the only writer: the transaction with GTID sequence s inserted id s - base.
    base = int(gtid_before.split("-")[-1]) if gtid_before else 0
    lags = []
    for record in records(archive):
        if not record.get("firstGtid"):
            continue
        first, last = (int(record[k].split("-")[-1]) for k in ("firstGtid", "lastGtid"))
        stored = time_of(record["storedTime"])
        for seq in range(first, last + 1):
            commit = commits.get(seq - base)
            if commit is not None:
                lags.append(stored - commit)
    missing = len(commits) - len(lags)
    print(f"\n## lag: {tps} transactions/s for {seconds} s, {len(commits)} committed, {len(lags)} archived"
          f"{f', {missing} NOT FOUND' if missing else ''}")
    print(f"| p50 | p99 | max | archiver CPU (cores) | archiver RSS peak (sampled) | VmHWM | RSS at end |")
    print(f"|---|---|---|---|---|---|---|")
    print(f"| {percentile(lags, 50):.2f} s | {percentile(lags, 99):.2f} s | {max(lags):.2f} s | {cpu:.3f} | "
          f"{peak[0] / 1024:.1f} MiB | {hwm / 1024:.1f} MiB | {rss / 1024:.1f} MiB |")
    return missing == 0


def time_of(rfc3339: str) -> float:
    # 2026-11-25T10:00:00.123456789Z
    from datetime import datetime, timezone
    text = rfc3339.rstrip("Z")
    whole, _, fraction = text.partition(".")
    seconds = datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
    return seconds + (float("0." + fraction) if fraction else 0.0)


def replay_benchmark(agent: str, server: Server, work: Path, mib: int, rows_per_transaction: int):
    server.sql("DROP DATABASE IF EXISTS bench; CREATE DATABASE bench; "
               "CREATE TABLE bench.r (id BIGINT PRIMARY KEY, a VARCHAR(100), b VARCHAR(100), n INT)")
    archive, base = work / "replay-archive", work / "replay-base"
    archiver = start_archiver(agent, server, archive)
    time.sleep(2)
    subprocess.run([agent, "backup", "--to", f"file://{base}", *agent_args(server)], env=agent_env(server), check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = mib * 1024 * 1024 // BINLOG_BYTES_PER_ROW
    print(f"\nwriting {rows} rows (about {mib} MiB of binary log) in transactions of {rows_per_transaction} rows...",
          file=sys.stderr)
    for start in range(0, rows, rows_per_transaction):
        end = min(rows, start + rows_per_transaction)
        server.sql(f"INSERT INTO bench.r SELECT seq, MD5(seq), REPEAT(SHA2(seq, 256), 1), seq % 1000 "
                   f"FROM bench.seq_{start + 1}_to_{end}")
    end_time = int(server.sql("SELECT UNIX_TIMESTAMP()").strip()) + 1
    expected = server.sql("CHECKSUM TABLE bench.r").split("\t")[1].strip()
    time.sleep(3)
    while True:
        checkpoint = json.loads((archive / "checkpoint.json").read_text())
        if (checkpoint.get("caughtUpTime") or 0) > end_time:
            break
        time.sleep(1)
    stop_archiver(archiver)
    stored = sum(r.get("bytes", 0) for r in records(archive))
    print(f"archived {stored / 2**20:.0f} MiB of binary log in {len(records(archive))} segments", file=sys.stderr)
    until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(end_time))

    def timed(label, run):
        server.sql("DROP DATABASE IF EXISTS bench")
        cpu, wall = server.cpu_seconds(), time.monotonic()
        run()
        wall, cpu = time.monotonic() - wall, server.cpu_seconds() - cpu
        got = server.sql("CHECKSUM TABLE bench.r").split("\t")[1].strip()
        assert got == expected, f"{label}: checksum {got}, expected {expected}"
        return wall, cpu

    def agent_pitr():
        subprocess.run([agent, "restore", "--from", f"file://{base}", "--binlog-archive", f"file://{archive}",
                        "--until-time", until, "--drop-existing", *agent_args(server)], env=agent_env(server), check=True,
                       stdout=subprocess.DEVNULL)

    plain = work / "plain-binlogs"
    plain.mkdir(exist_ok=True)
    for record in records(archive):
        if record.get("object"):
            subprocess.run(["zstd", "-q", "-d", "-f", str(archive / record["object"]), "-o",
                            str(plain / Path(record["object"]).name.replace(".zst", ""))], check=True)

    def mysqlbinlog_pipe():
        subprocess.run([agent, "restore", "--from", f"file://{base}", "--drop-existing", *agent_args(server)],
                       env=agent_env(server), check=True, stdout=subprocess.DEVNULL)
        gtid = json.loads((base / "manifest.json").read_text())["position"]["gtid"]
        files = sorted(str(p) for p in plain.iterdir())
        dump = subprocess.Popen(["mariadb-binlog", f"--start-position={gtid}", *files], stdout=subprocess.PIPE)
        subprocess.run(server.client(), stdin=dump.stdout, check=True)
        dump.wait()

    results = [("visitors-agent restore --binlog-archive (base + replay + swap)", *timed("agent", agent_pitr)),
               ("agent restore of the base, then mariadb-binlog \\| mariadb", *timed("mariadb-binlog", mysqlbinlog_pipe))]
    print(f"\n## replay: {stored / 2**20:.0f} MiB of binary log, {rows} rows in transactions of {rows_per_transaction}")
    print("| | wall | server CPU |")
    print("|---|---|---|")
    for label, wall, cpu in results:
        print(f"| {label} | {wall:.1f} s | {cpu:.1f} s |")
    print(f"\nagent speed against the pipe: {results[1][1] / results[0][1]:.2f}x; server CPU {results[0][2] / results[1][2]:.2f}x")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--work-dir", default=tempfile.gettempdir())
    parser.add_argument("--agent", default=str(REPO / "target" / "release" / "visitors-agent"))
    parser.add_argument("--tps", type=int, default=500)
    parser.add_argument("--seconds", type=int, default=120)
    parser.add_argument("--replay-mib", type=int, default=1100)
    parser.add_argument("--rows-per-transaction", type=int, default=1000)
    parser.add_argument("--skip-lag", action="store_true")
    parser.add_argument("--skip-replay", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pitr-bench-", dir=args.work_dir))
    server = Server(work / "server")
    try:
        print(f"# point-in-time recovery benchmark: {server.sql('SELECT VERSION()').strip()}, {os.cpu_count()} cores")
        if not args.skip_lag:
            lag_benchmark(args.agent, server, work, args.tps, args.seconds)
        if not args.skip_replay:
            replay_benchmark(args.agent, server, work, args.replay_mib, args.rows_per_transaction)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
