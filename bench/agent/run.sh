#!/usr/bin/env bash
# Benchmark of visitors-agent against mariadb-dump and mydumper/myloader (issues 4 and 9).
#
# Starts its own throwaway MariaDB server and, for each dataset of --datasets, generates it (one
# large table holding 80% of the data and 50 small tables), then on the same server and data:
#   backup:  visitors-agent backup | mariadb-dump --single-transaction --quick | zstd | mydumper -c
#   restore: visitors-agent restore | zstd -dc dump | mariadb                         | myloader
# and reports wall time, throughput (MiB/s of table data = SUM(DATA_LENGTH) after ANALYZE),
# server CPU seconds (from /proc of mariadbd), the client side's CPU seconds (the agent, or the
# dump/load programs with zstd; user+system from /usr/bin/time -v) and the agent's peak memory.
#
# Datasets: "compressible" (generated text that zstd -1 shrinks about 4:1) and "realistic"
# (random-looking identifiers, hashes, amounts and times that it shrinks about 2.5:1, like the
# production-like data of issue 9).
#
# Usage: bench/agent/run.sh [--size-mib N] [--threads N] [--levels "1 3"] [--datasets "compressible realistic"]
#                           [--work-dir DIR] [--agent PATH] [--other-agent PATH] [--repeat N] [--no-mydumper]
#                           [--backups-only] [--no-dump] [--drill] [--secure] [--physical] [--keep]
# --work-dir: where the server's data and the backups go (default /tmp); a tmpfs such as /dev/shm
# takes the disk (and fsync) out of the measurement.
# --repeat N: every backup and restore N times, interleaved (agent, dump, ..., agent, dump, ...), so a
# changing machine load hits every tool alike; a "best of N" table and the agent's ratios follow.
# --other-agent PATH: a second build of the agent (say, the one before a change) measured beside
# the first, in the same interleaved rounds, as "visitors-agent (other build)".
# --no-mydumper: leave out mydumper and myloader (quicker runs for the agent against the pipeline).
# --backups-only: leave out the restores (a quick measure of a backup change).
# --no-dump: leave out mariadb-dump (an A/B of two agent builds only).
# --drill: after the agent's restore, also a restore drill (`verify --deep`) of the same backup
# into the emptied server: what a drill costs beside a plain restore.
# --secure: the server also serves TLS (a certificate made here with openssl), and every round
# also runs the agent over TLS, verifying the CA, with its backup encrypted with age (a key
# made by age-keygen) and restored from it: "visitors-agent (TLS + age)" beside the agent in
# plain text, what TLS and encryption cost. Needs openssl and age (Debian packages).
# --physical: every round also takes physical backups (issue 42): `mariadb-backup --backup
# --stream=mbstream | zstd -1` alone, and the same stream stored by `visitors-agent backup
# --physical-stream -` (zstd -1, SHA-256 per chunk; with --secure also encrypted with age): what
# the agent costs beside the tool. The agent's peak RSS is its own, not the tool's. Needs
# mariadb-backup (Debian package). Unless --backups-only, every round also restores the agent's
# physical backup: unpacked, prepared and a second server started on it, against the logical
# restores of the same data.
# With --repeat, the agent builds (plain, --other-agent, secure) run in reverse order every
# second round.
# Backups run at each zstd level of --levels (agent and mariadb-dump at the same level);
# restores use the backups of the first level.
# Needs: mariadb-server mariadb-client zstd mydumper time (Debian packages), and a release
# build of the agent (cargo build --release -p visitors-agent) unless --agent is given.
set -euo pipefail

SIZE_MIB=1024
THREADS=2
LEVELS="1 3"
DATASETS="compressible realistic"
WORK_DIR=/tmp
AGENT=""
OTHER_AGENT=""
REPEAT=1
MYDUMPER=1
RESTORES=1
DUMP=1
DRILL=0
SECURE=0
PHYSICAL=0
KEEP=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --size-mib) SIZE_MIB="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --levels) LEVELS="$2"; shift 2 ;;
    --datasets) DATASETS="$2"; shift 2 ;;
    --work-dir) WORK_DIR="$2"; shift 2 ;;
    --agent) AGENT="$2"; shift 2 ;;
    --other-agent) OTHER_AGENT="$2"; shift 2 ;;
    --repeat) REPEAT="$2"; shift 2 ;;
    --no-mydumper) MYDUMPER=0; shift ;;
    --backups-only) RESTORES=0; shift ;;
    --no-dump) DUMP=0; shift ;;
    --drill) DRILL=1; shift ;;
    --secure) SECURE=1; shift ;;
    --physical) PHYSICAL=1; shift ;;
    --keep) KEEP=1; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
if [[ -z "$AGENT" ]]; then
  AGENT="${CARGO_TARGET_DIR:-$ROOT/target}/release/visitors-agent"
fi
TOOLS=(mariadbd mariadb-install-db mariadb mariadb-dump zstd /usr/bin/time "$AGENT" ${OTHER_AGENT:+"$OTHER_AGENT"})
[[ "$MYDUMPER" == 0 ]] || TOOLS+=(mydumper myloader)
[[ "$SECURE" == 0 ]] || TOOLS+=(openssl age-keygen)
[[ "$PHYSICAL" == 0 ]] || TOOLS+=(mariadb-backup)
for program in "${TOOLS[@]}"; do
  command -v "$program" >/dev/null || [[ -x "$program" ]] || { echo "missing: $program" >&2; exit 1; }
done

WORK="$(mktemp -d "$WORK_DIR/visitors-agent-bench.XXXXXX")"
SERVER_PID=""
cleanup() {
  if [[ -n "$SERVER_PID" ]]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
  if [[ "$KEEP" == 0 ]]; then rm -rf "$WORK"; fi
}
trap cleanup EXIT

PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
SOCKET="$WORK/mysql.sock"
export MYSQL_PWD="bench-password"
USER_ARGS=()
[[ "$(id -u)" == 0 ]] && USER_ARGS=(--user=root)
mkdir -p "$WORK/tmp"
TLS_ARGS=()
if [[ "$SECURE" == 1 ]]; then
  mkdir -p "$WORK/tls" "$WORK/keys"
  (cd "$WORK/tls" &&
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=bench-ca 2>/dev/null &&
    openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=127.0.0.1 2>/dev/null &&
    printf 'subjectAltName=IP:127.0.0.1\n' > ext.cnf &&
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 \
      -extfile ext.cnf 2>/dev/null)
  age-keygen -o "$WORK/keys/bench" 2>/dev/null
  TLS_ARGS=(--ssl-ca="$WORK/tls/ca.pem" --ssl-cert="$WORK/tls/server.pem" --ssl-key="$WORK/tls/server.key")
fi
mariadb-install-db --no-defaults --datadir="$WORK/data" --tmpdir="$WORK/tmp" --auth-root-authentication-method=socket \
  --skip-test-db "${USER_ARGS[@]}" >/dev/null
mariadbd --no-defaults --datadir="$WORK/data" --socket="$SOCKET" --port="$PORT" --bind-address=127.0.0.1 \
  --tmpdir="$WORK/tmp" --log-error="$WORK/error.log" --skip-log-bin --local-infile=1 --skip-name-resolve \
  --innodb-buffer-pool-size=2G --innodb-log-file-size=512M --innodb-flush-log-at-trx-commit=2 \
  --max-allowed-packet=256M "${TLS_ARGS[@]}" "${USER_ARGS[@]}" &
SERVER_PID=$!
for _ in $(seq 1 120); do
  mariadb --no-defaults --socket="$SOCKET" -uroot -e "SELECT 1" >/dev/null 2>&1 && break
  sleep 0.5
done
root_sql() { mariadb --no-defaults --socket="$SOCKET" -uroot --batch --skip-column-names -D mysql -e "$1"; }
root_sql "CREATE USER 'bench'@'%' IDENTIFIED BY '$MYSQL_PWD'; GRANT ALL ON *.* TO 'bench'@'%';"
TCP=(-h 127.0.0.1 -P "$PORT" -u bench)
AGENT_TCP=(--host 127.0.0.1 --port "$PORT" --user bench)

# ---- datasets --------------------------------------------------------------------------
ROW_BYTES=230   # InnoDB bytes per row of the tables below, measured
BIG_ROWS=$(( SIZE_MIB * 1024 * 1024 * 8 / 10 / ROW_BYTES ))
SMALL_ROWS=$(( SIZE_MIB * 1024 * 1024 * 2 / 10 / 50 / ROW_BYTES ))
COLUMNS="id BIGINT PRIMARY KEY, account INT NOT NULL, code CHAR(40) NOT NULL, note VARCHAR(255) NOT NULL,
  amount DECIMAL(12,2) NOT NULL, created DATETIME(3) NOT NULL"
# The row expression of each dataset, over seq. "realistic" takes its values from RAND(seed), so
# every run generates the same data.
row_of() {
  case "$1" in
    compressible) echo "seq, seq % 100003, SHA1(seq), CONCAT(MD5(seq), ' ', REPEAT(CHAR(97 + seq % 26), seq % 100), ' ', MD5(seq + 1)),
      (seq % 1000000) / 100, '2020-01-01' + INTERVAL seq SECOND" ;;
    realistic) echo "seq, FLOOR(RAND(seq) * 2000000000), SHA1(RAND(seq + 1)),
      CONCAT(ELT(1 + FLOOR(RAND(seq + 2) * 6), 'paid', 'refunded', 'pending', 'failed', 'disputed', 'settled'), ' ',
        ELT(1 + FLOOR(RAND(seq + 10) * 4), 'card payment', 'bank transfer', 'direct debit', 'voucher'), ' ',
        LEFT(MD5(RAND(seq + 3)), 8 + FLOOR(RAND(seq + 4) * 24)), ' ', CONV(FLOOR(RAND(seq + 5) * 1e15), 10, 36), ' ',
        LEFT(TO_BASE64(SHA2(RAND(seq + 6), 256)), FLOOR(RAND(seq + 7) * 24))),
      ROUND(RAND(seq + 8) * 100000, 2), '2020-01-01' + INTERVAL FLOOR(RAND(seq + 9) * 150000000) SECOND" ;;
    *) echo "unknown dataset $1" >&2; exit 2 ;;
  esac
}
generate() {
  local row; row=$(row_of "$1")
  echo "generating the $1 dataset, ~${SIZE_MIB} MiB: big (${BIG_ROWS} rows) + 50 small tables (${SMALL_ROWS} rows each)" >&2
  local gen_start; gen_start=$(date +%s)
  root_sql "DROP DATABASE IF EXISTS bench; CREATE DATABASE bench; CREATE TABLE bench.big ($COLUMNS, KEY (account));"
  for (( from = 1; from <= BIG_ROWS; from += 250000 )); do
    to=$(( from + 249999 < BIG_ROWS ? from + 249999 : BIG_ROWS ))
    root_sql "INSERT INTO bench.big SELECT $row FROM seq_${from}_to_${to}"
  done
  for i in $(seq 1 50); do
    root_sql "CREATE TABLE bench.small_$i ($COLUMNS); INSERT INTO bench.small_$i SELECT $row FROM seq_1_to_${SMALL_ROWS};"
  done
  root_sql "$(for t in big $(seq -f 'small_%g' 1 50); do echo "ANALYZE TABLE bench.$t;"; done)" >/dev/null
  DATA_BYTES=$(root_sql "SELECT SUM(DATA_LENGTH) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'bench'")
  DATA_MIB=$(awk "BEGIN { printf \"%.0f\", $DATA_BYTES / 1048576 }")
  echo "generated ${DATA_MIB} MiB of table data in $(( $(date +%s) - gen_start ))s" >&2
  CHECKSUM_BEFORE=$(root_sql "CHECKSUM TABLE bench.big, bench.small_50")
}

# ---- measurement helpers ---------------------------------------------------------------
TICKS=$(getconf CLK_TCK)
server_cpu() { awk -v t="$TICKS" '{ printf "%.2f", ($14 + $15) / t }' "/proc/$SERVER_PID/stat"; }
RESULTS="$WORK/results.md"
: > "$RESULTS"
# measure STEP TOOL STORED_PATH COMMAND...: runs the command, appends a result row.
measure() {
  local step="$1" tool="$2" stored="$3"; shift 3
  sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
  local cpu0 t0 t1 cpu1 rss="-" size="-" client
  rm -rf "$stored"
  cpu0=$(server_cpu); t0=$(date +%s.%N)
  /usr/bin/time -v -o "$WORK/time.txt" "$@" < /dev/null > "$WORK/out.txt" 2> "$WORK/err.txt" || {
    echo "$tool $step failed:" >&2; tail -5 "$WORK/err.txt" >&2; exit 1; }
  t1=$(date +%s.%N); cpu1=$(server_cpu)
  client=$(awk '/User time|System time/ { s += $NF } END { printf "%.1f", s }' "$WORK/time.txt")
  if [[ "$tool" == visitors-agent* ]]; then
    rss=$(awk '/Maximum resident set size/ { printf "%.0f", $6 / 1024 }' "$WORK/time.txt")
  fi
  # A pipeline's agent measured on its own (physical backups: the tool beside it is not ours).
  if [[ -s "$WORK/agent-time.txt" ]]; then
    rss=$(awk '/Maximum resident set size/ { printf "%.0f", $6 / 1024 }' "$WORK/agent-time.txt")
    rm -f "$WORK/agent-time.txt"
  fi
  [[ -n "$stored" ]] && size=$(du -sm "$stored" | cut -f1)
  local wall; wall=$(awk "BEGIN { printf \"%.1f\", $t1 - $t0 }")
  local rate; rate=$(awk "BEGIN { printf \"%.1f\", $DATA_MIB / ($t1 - $t0) }")
  local cpu; cpu=$(awk "BEGIN { printf \"%.1f\", $cpu1 - $cpu0 }")
  printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$step" "${tool//|/\\|}" "$wall" "$rate" "$cpu" "$client" "$rss" "$size" \
    | tee -a "$RESULTS" >&2
}
drop_bench() { root_sql "DROP DATABASE IF EXISTS bench"; }
check_restored() {
  local after; after=$(root_sql "CHECKSUM TABLE bench.big, bench.small_50")
  [[ "$after" == "$CHECKSUM_BEFORE" ]] || { echo "restored data differs after $1" >&2; exit 1; }
}

run_dataset() {
  generate "$1"
  DATASET_START=$(wc -l < "$RESULTS")
  {
    echo
    echo "Dataset $1: ${DATA_MIB} MiB of table data (SUM(DATA_LENGTH)), big: ${BIG_ROWS} rows, 50 x ${SMALL_ROWS} rows"
    echo
    echo '| step | tool | wall s | MiB/s | server CPU s | client CPU s | agent peak RSS MiB | stored MiB |'
    echo '|---|---|---|---|---|---|---|---|'
  } >> "$RESULTS"
  local round
  for round in $(seq 1 "$REPEAT"); do
    [[ "$REPEAT" == 1 ]] || echo "round $round of $REPEAT" >&2
    run_round "$round"
  done
  best_of "$1"
}

# agent_builds: "label|path|backup folder|restored folder|backup options|restore options"
# lines, the agent under test first. Every build but the secure one restores the backup of the
# agent under test; plain builds connect in plain text.
agent_builds() {
  local plain="--ssl-mode disabled"
  echo "visitors-agent|$AGENT|agent|agent|$plain|$plain"
  [[ -z "$OTHER_AGENT" ]] || echo "visitors-agent (other build)|$OTHER_AGENT|other-agent|agent|$plain|$plain"
  if [[ "$SECURE" == 1 ]]; then
    local tls="--ssl-ca $WORK/tls/ca.pem"
    echo "visitors-agent (TLS + age)|$AGENT|secure|secure|$tls --encrypt-key-file $WORK/keys/bench --encrypt-key-id bench|$tls --decrypt-keys-dir $WORK/keys"
  fi
}

# agent_builds_of_round N: the agent builds in the order round N runs them: reversed every
# second round, so that neither build always runs right after the other (a restore after
# another one also pays the server's purge of the database dropped before it).
agent_builds_of_round() {
  if (( $1 % 2 == 0 )); then agent_builds | tac; else agent_builds; fi
}

# physical_backups: the tool's stream through zstd -1 alone, then stored by the agent.
physical_backups() {
  local tool="rm -rf '$WORK/mbtarget'; mariadb-backup --backup --stream=mbstream --host=127.0.0.1 --port=$PORT --user=bench --target-dir='$WORK/mbtarget' 2> '$WORK/mariadb-backup.err'"
  measure backup "mariadb-backup --stream=mbstream | zstd -1" "$WORK/physical.mbstream.zst" \
    bash -c "$tool | zstd -q -1 -o '$WORK/physical.mbstream.zst'"
  local agent="/usr/bin/time -v -o '$WORK/agent-time.txt' '$AGENT' backup --physical-stream - ${AGENT_TCP[*]} --ssl-mode disabled --progress-interval 0"
  measure backup "visitors-agent physical (mariadb-backup | agent, zstd -1)" "$WORK/physical-agent" \
    bash -c "set -o pipefail; $tool | $agent --to 'file://$WORK/physical-agent'"
  [[ "$SECURE" == 1 ]] || return 0
  measure backup "visitors-agent physical (mariadb-backup | agent, zstd -1 + age)" "$WORK/physical-secure" \
    bash -c "set -o pipefail; $tool | $agent --to 'file://$WORK/physical-secure' --encrypt-key-file '$WORK/keys/bench' --encrypt-key-id bench"
}

# physical_restore: the agent's physical backup unpacked (every chunk checked against the
# manifest), prepared by mariadb-backup, and a second server started on the copy until it
# answers SQL: what a physical restore costs (its swap into place is a rename). The copy's
# tables are then checked against the source's, outside the measure.
physical_restore() {
  local copy="$WORK/physical-copy" socket="$WORK/copy.sock"
  local start_copy="mariadbd --no-defaults --datadir='$copy' --socket='$socket' --pid-file='$WORK/copy.pid' --skip-networking \
    --skip-log-bin --tmpdir='$WORK/tmp' --log-error='$WORK/copy.err' --innodb-buffer-pool-size=2G ${USER_ARGS[*]} &"
  local answers="for _ in \$(seq 1 600); do mariadb --no-defaults --socket='$socket' -uroot -e 'SELECT 1' >/dev/null 2>&1 && exit 0; sleep 0.1; done; exit 1"
  rm -rf "$copy"
  measure restore "visitors-agent unpack + mariadb-backup --prepare + server answering" "" \
    bash -c "set -e; /usr/bin/time -v -o '$WORK/agent-time.txt' '$AGENT' unpack --from 'file://$WORK/physical-agent' --into '$copy' >/dev/null;
      mariadb-backup --prepare --use-memory=1G --target-dir='$copy' 2> '$WORK/prepare.err'; $start_copy $answers"
  local after
  after=$(mariadb --no-defaults --socket="$socket" -uroot --batch --skip-column-names -e "CHECKSUM TABLE bench.big, bench.small_50")
  mariadb-admin --no-defaults --socket="$socket" -uroot shutdown 2>/dev/null || true
  while [[ -e "$WORK/copy.pid" ]]; do sleep 0.2; done
  [[ "$after" == "$CHECKSUM_BEFORE" ]] || { echo "the physical copy differs from the source" >&2; exit 1; }
  rm -rf "$copy"
}

run_round() {
  local round=$1 label path
  # ---- backups ---------------------------------------------------------------------------
  for LEVEL in $LEVELS; do
    while IFS='|' read -r label path dir _ options _; do
      # shellcheck disable=SC2086 # the options are words
      measure backup "$label (zstd -$LEVEL, $THREADS workers)" "$WORK/$dir-$LEVEL" \
        "$path" backup --to "file://$WORK/$dir-$LEVEL" "${AGENT_TCP[@]}" --database bench --parallelism "$THREADS" \
        --compression zstd --compression-level "$LEVEL" --progress-interval 0 $options
    done < <(agent_builds_of_round "$round")
    [[ "$DUMP" == 1 ]] || continue
    measure backup "mariadb-dump --single-transaction --quick | zstd -$LEVEL" "$WORK/dump-$LEVEL.sql.zst" \
      bash -c "mariadb-dump ${TCP[*]} --single-transaction --quick --databases bench | zstd -q -$LEVEL -o '$WORK/dump-$LEVEL.sql.zst'"
  done
  [[ "$PHYSICAL" == 0 ]] || physical_backups
  FIRST_LEVEL="${LEVELS%% *}"
  if [[ "$MYDUMPER" == 1 ]]; then
    measure backup "mydumper -t $THREADS -c --rows 500000 (gzip)" "$WORK/mydumper" \
      mydumper "${TCP[@]}" -p "$MYSQL_PWD" -t "$THREADS" -c --rows 500000 -B bench -o "$WORK/mydumper"
  fi
  [[ "$RESTORES" == 1 ]] || return 0
  local from="$WORK/agent-$FIRST_LEVEL"

  # ---- restores --------------------------------------------------------------------------
  while IFS='|' read -r label path _ restored _ options; do
    drop_bench
    # shellcheck disable=SC2086 # the options are words
    measure restore "$label ($THREADS workers)" "" \
      "$path" restore --from "file://$WORK/$restored-$FIRST_LEVEL" "${AGENT_TCP[@]}" --parallelism "$THREADS" \
      --progress-interval 0 $options
    check_restored "$label restore"
  done < <(agent_builds_of_round "$round")
  if [[ "$DRILL" == 1 ]]; then
    drop_bench
    measure restore "visitors-agent verify --deep (drill, $THREADS workers)" "" \
      "$AGENT" verify --deep --from "file://$from" "${AGENT_TCP[@]}" --parallelism "$THREADS" --ssl-mode disabled
    check_restored "the drill"
  fi
  if [[ "$DUMP" == 1 ]]; then
    drop_bench
    measure restore "zstd -dc | mariadb" "" bash -c "zstd -dc '$WORK/dump-$FIRST_LEVEL.sql.zst' | mariadb ${TCP[*]}"
    check_restored "mariadb"
  fi
  if [[ "$MYDUMPER" == 1 ]]; then
    drop_bench
    measure restore "myloader -t $THREADS" "" myloader "${TCP[@]}" -p "$MYSQL_PWD" -t "$THREADS" -d "$WORK/mydumper" -o
    check_restored "myloader"
  fi
  [[ "$PHYSICAL" == 0 ]] || physical_restore
}

# best_of DATASET: with --repeat, the fastest run of each tool, and the agent's ratios.
best_of() {
  [[ "$REPEAT" == 1 ]] && return
  {
    echo
    echo "Dataset $1, best of $REPEAT interleaved runs (lowest wall time of each tool):"
    echo
    echo '| step | tool | wall s | MiB/s | server CPU s | client CPU s | agent peak RSS MiB | stored MiB |'
    echo '|---|---|---|---|---|---|---|---|'
    awk -F' [|] ' -v from="$DATASET_START" 'NR > from && /^[|] (backup|restore) / {
        key = $1 " | " $2; if (!(key in best) || $3 + 0 < wall[key]) { best[key] = $0; wall[key] = $3 + 0 }
        if (!(key in order)) { order[key] = ++n; keys[n] = key } }
      END { for (i = 1; i <= n; i++) print best[keys[i]] }' "$RESULTS"
    echo
    awk -F' [|] ' -v from="$DATASET_START" 'NR > from && /^[|] (backup|restore) / {
        key = $1 " | " $2; if (!(key in wall) || $3 + 0 < wall[key]) wall[key] = $3 + 0 }
      END {
        for (k in wall) if (k ~ /^[|] backup [|] visitors-agent/) {
          level = k; sub(/.*zstd -/, "", level); sub(/,.*/, "", level)
          base = "| backup | mariadb-dump --single-transaction --quick \\| zstd -" level
          if (base in wall) printf "%s: %.2fx mariadb-dump | zstd -%s\n", substr(k, 12), wall[base] / wall[k], level }
        for (k in wall) if (k ~ /^[|] restore [|] visitors-agent/) {
          if ("| restore | myloader -t '"$THREADS"'" in wall)
            printf "%s: %.2fx myloader\n", substr(k, 13), wall["| restore | myloader -t '"$THREADS"'"] / wall[k]
          if ("| restore | zstd -dc \\| mariadb" in wall)
            printf "%s: %.2fx zstd -dc | mariadb\n", substr(k, 13), wall["| restore | zstd -dc \\| mariadb"] / wall[k] }
        raw = "| backup | mariadb-backup --stream=mbstream \\| zstd -1"
        for (k in wall) if (k ~ /^[|] backup [|] visitors-agent physical/ && (raw in wall))
          printf "%s: %.2fx the throughput of mariadb-backup | zstd -1\n", substr(k, 12), wall[raw] / wall[k]
      }' "$RESULTS"
  } > "$WORK/best.md"
  cat "$WORK/best.md" >> "$RESULTS"
}

for DATASET in $DATASETS; do
  run_dataset "$DATASET"
done

echo
echo "Threads ${THREADS}, zstd levels ${LEVELS}, $(mariadbd --version | awk '{print $3}'), $(nproc) cores," \
  "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
cat "$RESULTS"
