#!/usr/bin/env bash
# A/B benchmark of two versions of ferrisson on this machine, back to back.
#
# Builds the benches of commit A in a git worktree of its own (with its own target dir)
# and those of B (by default the working tree this script is in, uncommitted changes
# included, with that tree's target dir), then runs each bench alternately A, B, A, B,
# and prints the ratio columns of their tables side by side, with the load average
# before and after every run.
#
# usage: scripts/bench-ab.sh [options] A [B]
#
#   A, B            anything `git rev-parse` takes (a commit, a branch); B defaults to the
#                   working tree this script is in
#   --rounds N      A/B pairs of runs per bench (default 2)
#   --benches LIST  which benches, space separated (default "lock synchronizers ids")
#   --same-benches  build A with B's bench sources (crates/ferrisson-redis/benches/, and those
#                   of B's dev-dependencies that A lacks): the library is then the only
#                   difference.
#                   Works while A's library has the API those benches use; without it
#                   each side runs its own benches, whose tables must match to compare
#   --quick         short runs, to try the procedure rather than to decide anything
#   --dir DIR       worktrees, target dirs and results (default ${TMPDIR:-/tmp}/ferrisson-ab)
#   --columns REGEX table columns to compare, matched against their headers (default:
#                   ratios to a floor or a round trip, the hand-off p50 in µs, and
#                   requests per grant)
#
# Every run's full output is kept under DIR/results-<time>/ (one file per bench, side and
# round); the comparison can be printed again from such a directory with
#   scripts/bench-ab.sh --compare DIR/results-<time>
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(git -C "$here" rev-parse --show-toplevel)"
rounds=2
benches="lock synchronizers ids"
same_benches=0
quick=0
dir="${TMPDIR:-/tmp}/ferrisson-ab"
columns='/ floor|/ raw|/ manager|/ RTT|ratio|hand-off p50|requests per grant'
compare_only=""
revs=()

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }

while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --benches) benches="$2"; shift 2 ;;
    --same-benches) same_benches=1; shift ;;
    --quick) quick=1; shift ;;
    --dir) dir="$2"; shift 2 ;;
    --columns) columns="$2"; shift 2 ;;
    --compare) compare_only="$2"; shift 2 ;;
    -h|--help) usage 0 ;;
    -*) echo "unknown option $1" >&2; usage 2 ;;
    *) revs+=("$1"); shift ;;
  esac
done

# Prints the compared columns of every result file in $1, A and B side by side.
compare() {
  local results="$1"
  # Files are named BENCH.SIDE.ROUND.md; the sort keeps rounds in order.
  # shellcheck disable=SC2012
  ls "$results"/*.md | sort -t. -k3,3n | xargs awk -v colre="$columns" '
    function trim(s) { gsub(/^[ \t]+|[ \t]+$/, "", s); return s }
    function cells(line, out,    n, i, parts) {
      sub(/^\|/, "", line); sub(/\|[ \t]*$/, "", line)
      n = split(line, parts, "|")
      for (i = 1; i <= n; i++) out[i] = trim(parts[i])
      return n
    }
    # A number, possibly followed by a unit ("0.97x", "189 µs"); the number, or "".
    function number(s) {
      if (match(s, /^-?[0-9]+(\.[0-9]+)?/) && (RLENGTH == length(s) || substr(s, RLENGTH + 1) ~ /^ ?(x|µs|ms|s|%)$/))
        return substr(s, 1, RLENGTH)
      return ""
    }
    FNR == 1 {
      name = FILENAME; sub(/.*\//, "", name); split(name, part, ".")
      bench = part[1]; side = part[2]; round = part[3]
      heading = ""; table = 0; in_table = 0
      if (!(bench in seen_bench)) { seen_bench[bench] = 1; benches[++nbench] = bench }
    }
    /^#/ { heading = $0; sub(/^#+ */, "", heading); sub(/ *\(.*$/, "", heading); table = 0; in_table = 0; next }
    /^load average/ { load[bench, side, round] = load[bench, side, round] (load[bench, side, round] == "" ? "" : " -> ") $NF; next }
    /^\|/ {
      if (!in_table) {
        in_table = 1; table++; nh = cells($0, header)
        for (i = 1; i <= nh; i++) label[i] = (header[i] ~ /^\// && i > 1) ? header[i-1] " " header[i] : header[i]
        next
      }
      if ($0 ~ /^\|[-:| ]+\|?[ \t]*$/) next
      n = cells($0, cell)
      # The row is named by its leading cells up to the first one that is not a number
      # (tasks, permits, then the name), or by its first cell when all are numbers.
      key = ""; keylen = 1
      for (i = 1; i <= n; i++) { key = key (i > 1 ? " · " : "") cell[i]; if (number(cell[i]) == "") { keylen = i; break } }
      if (i > n) { key = cell[1]; keylen = 1 }
      for (i = keylen + 1; i <= n && i <= nh; i++) {
        if (label[i] !~ colre) continue
        v = number(cell[i]); if (v == "") continue
        id = bench SUBSEP (heading == "" ? "table " table : heading) " / " key " / " label[i]
        if (!(id in seen)) { seen[id] = 1; ids[bench, ++nid[bench]] = id }
        values[id, side] = values[id, side] (values[id, side] == "" ? "" : " ") v
      }
      next
    }
    { in_table = 0 }
    function median(list,    n, a, i, j, t) {
      n = split(list, a, " ")
      for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
      return n == 0 ? "" : (n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2)
    }
    END {
      for (b = 1; b <= nbench; b++) {
        bench = benches[b]
        printf "\n== %s\n", bench
        for (r = 1; (bench, "a", r) in load || (bench, "b", r) in load; r++)
          printf "run %d load average: A %s, B %s\n", r, load[bench, "a", r], load[bench, "b", r]
        printf "%-100s | %-17s | %-17s | %7s | %7s | %5s\n", "table / row / column", "A runs", "B runs", "A med", "B med", "B/A"
        for (k = 1; k <= nid[bench]; k++) {
          id = ids[bench, k]; row = id; sub(/^[^\034]*\034/, "", row)
          # A floor row divided by itself says nothing.
          if ((values[id, "a"] " " values[id, "b"]) ~ /^(1\.00? ?)+$/) continue
          ma = median(values[id, "a"]); mb = median(values[id, "b"])
          ratio = (ma != "" && mb != "" && ma + 0 != 0) ? sprintf("%5.2f", mb / ma) : "    -"
          printf "%-100s | %-17s | %-17s | %7s | %7s | %s\n", substr(row, 1, 100), values[id, "a"], values[id, "b"], ma, mb, ratio
        }
      }
    }'
}

if [ -n "$compare_only" ]; then
  compare "$compare_only"
  exit 0
fi
[ "${#revs[@]}" -ge 1 ] && [ "${#revs[@]}" -le 2 ] || usage 2

# A side's source tree: a worktree of DIR at that commit, cleaned of anything else.
checkout() {
  local side="$1" rev="$2" tree="$dir/$1"
  local sha
  sha="$(git -C "$repo" rev-parse --verify "$rev^{commit}")"
  if [ -e "$tree/.git" ]; then
    git -C "$tree" checkout --quiet --force --detach "$sha"
    git -C "$tree" clean --quiet -fd
  else
    mkdir -p "$dir"
    git -C "$repo" worktree add --quiet --detach "$tree" "$sha"
  fi
  echo "$tree"
}

# The bench binaries of the tree $1 built into the target dir $2: "name path" lines.
build() {
  local tree="$1" target="$2" args=() line path name
  for bench in $benches; do args+=(--bench "$bench"); done
  echo "== building the benches of $tree (target dir $target)" >&2
  (cd "$tree" && CARGO_TARGET_DIR="$target" cargo bench -p ferrisson --no-run "${args[@]}" 2>&1) |
    tee "$dir/build.log" | grep -E '^\s*(Executable|error)' >&2 || true
  grep -E '^\s*Executable ' "$dir/build.log" | while read -r line; do
    path="${line##*(}"; path="${path%)}"
    case "$path" in /*) ;; *) path="$tree/$path" ;; esac
    name="${line#*benches/}"; name="${name%%.rs*}"
    echo "$name $path"
  done
}

a_tree="$(checkout a "${revs[0]}")"
a_desc="$(git -C "$a_tree" log -1 --format='%h %s' | cut -c1-70)"
if [ "${#revs[@]}" -eq 2 ]; then
  b_tree="$(checkout b "${revs[1]}")"
  b_target="$dir/b-target"
  b_desc="$(git -C "$b_tree" log -1 --format='%h %s' | cut -c1-70)"
else
  b_tree="$repo"
  b_target="${CARGO_TARGET_DIR:-$repo/target}"
  b_desc="working tree $repo at $(git -C "$repo" log -1 --format=%h)$(git -C "$repo" diff --quiet HEAD || echo ' with uncommitted changes')"
fi
if [ "$same_benches" = 1 ]; then
  rm -rf "$a_tree/crates/ferrisson-redis/benches"
  cp -R "$b_tree/crates/ferrisson-redis/benches" "$a_tree/crates/ferrisson-redis/benches"
  # B's dev-dependencies that the benches use (by crate path) and A's manifest lacks,
  # added to A's; cargo resolves them into A's Cargo.lock at the build.
  manifest="$a_tree/crates/ferrisson/Cargo.toml"
  used=" $(grep -rhoE '\b[a-z_][a-z0-9_]*::' "$b_tree/crates/ferrisson-redis/benches" | sort -u | tr -d ':' | tr '\n' ' ') "
  awk -v used="$used" '
    function name(line) { sub(/^[ \t]*/, "", line); sub(/[ .=].*/, "", line); return line }
    function crate(dep) { gsub(/-/, "_", dep); return dep }
    FNR == 1 { section = "" }
    /^\[/ { section = $0 }
    FNR == NR {
      if (section == "[dev-dependencies]" && $0 !~ /^\[/ && $0 ~ /=/ && index(used, " " crate(name($0)) " "))
        wanted[name($0)] = $0
      next
    }
    section == "[dev-dependencies]" && $0 !~ /^\[/ && $0 ~ /=/ { delete wanted[name($0)] }
    { lines[++n] = $0; if ($0 == "[dev-dependencies]") at = n }
    END {
      for (i = 1; i <= n; i++) {
        print lines[i]
        if (i == at) for (dep in wanted) print wanted[dep]
      }
    }' "$b_tree/crates/ferrisson/Cargo.toml" "$manifest" >"$manifest.new"
  mv "$manifest.new" "$manifest"
  a_desc="$a_desc (with B's benches)"
fi

a_bins="$(build "$a_tree" "$dir/a-target")"
b_bins="$(build "$b_tree" "$b_target")"
for bench in $benches; do
  for bins in "$a_bins" "$b_bins"; do
    grep -q "^$bench " <<<"$bins" || { echo "bench $bench did not build; see $dir/build.log" >&2; exit 1; }
  done
done

results="$dir/results-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$results"
{
  echo "A: $a_desc"
  echo "B: $b_desc"
} >"$results/sides.txt"

bench_args() {
  if [ "$quick" = 1 ] && [ "$1" = lock ]; then echo "--quick"; fi
}
quick_env=()
if [ "$quick" = 1 ]; then
  quick_env=(SYNC_BENCH_ROUNDS=2 SYNC_BENCH_SLICE_MS=300 SYNC_BENCH_LATCH_ITERS=100
    IDS_BENCH_MILLIS=300 IDS_BENCH_ROUNDS=2)
fi

for round in $(seq 1 "$rounds"); do
  for bench in $benches; do
    for side in a b; do
      if [ "$side" = a ]; then bins="$a_bins" tree="$a_tree"; else bins="$b_bins" tree="$b_tree"; fi
      bin="$(grep "^$bench " <<<"$bins" | head -1 | cut -d' ' -f2-)"
      out="$results/$bench.$side.$round.md"
      echo "== $bench, round $round, ${side^^} (load average $(cut -d' ' -f1-3 /proc/loadavg))" >&2
      {
        echo "load average before: $(cut -d' ' -f1 /proc/loadavg)"
        # shellcheck disable=SC2046
        (cd "$tree/crates/ferrisson" && env "${quick_env[@]}" "$bin" $(bench_args "$bench"))
        echo "load average after: $(cut -d' ' -f1 /proc/loadavg)"
      } >"$out"
    done
  done
done

echo
cat "$results/sides.txt"
echo "outputs: $results"
compare "$results"
