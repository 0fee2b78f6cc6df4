#!/usr/bin/env bash
# The GitHub Actions job's logic, runnable here too (the workflow YAML stays thin).
#
#   ci/gh-job.sh cache-key     print the actions/cache key for this job's inputs
#   ci/gh-job.sh run           set up, then run the job; results under $RESULTS
#   ci/gh-job.sh --dry-run run print what `run` would do, run nothing
#   ci/gh-job.sh merge DIR...  merge the shards' results folders into $RESULTS
#                              (one JUnit, summary.md, report.html, verdict)
#   ci/gh-job.sh lines         the release lane's refs as a JSON list (the newest tag
#                              of each line in $LINES, then master)
#   ci/gh-job.sh lines-table DIR...  each line's results side by side ($RESULTS/lines.md)
#
# Inputs (environment, all optional):
#   SERIES          patch series manifest name (default async-dio; "none": the ref as it is)
#   KERNEL          kernel profile in vmimages/ (default debian-6.1)
#   ZFS_REPOSITORY  OpenZFS repository, owner/name (default openzfs/zfs)
#   ZFS_REF         branch, tag or commit of it (default: the series' base)
#   SELECTION       pytest -k expression (default: zvol-dio "zvol", async-dio "not zvol",
#                   none: every case)
#   PR              gate mode: an openzfs/zfs pull request number, N or N@COMMIT
#                   (suite gate --pr: its base is the merge-base with master)
#   MODE            cases | gate | zts | xfstests (gate: base vs base+series; zts: the ZTS
#                   lane, OpenZFS's own direct/async tags on the same build; xfstests: the
#                   kernel's file system suite, each shard its share of $XFSTESTS)
#   XFSTESTS        xfstests mode: what ./check runs (default quick: -g quick; dio, g:GROUP,
#                   generic/NNN; space-separated)
#   XFSTESTS_PROFILES  xfstests mode: profiles (default "plain direct")
#   RESULTS         results folder (default ./results/gh)
#   JOBS            guests side by side (default 2)
#   SHARD           i/N: this runner's share of the selection (balanced by the case
#                   times of earlier runs, kept in the cache); empty: all of it
#   TIER            auto | quick | full (default: full on KVM, quick under TCG)
#   LINES           release lines for `lines` (default "2.3 2.4")
set -euo pipefail
cd "$(dirname "$0")/.."

DRY=0
if [ "${1:-}" = "--dry-run" ]; then DRY=1; shift; fi
CMD="${1:-run}"
SERIES="${SERIES:-async-dio}"
KERNEL="${KERNEL:-debian-6.1}"
ZFS_REPOSITORY="${ZFS_REPOSITORY:-openzfs/zfs}"
PR="${PR:-}"
ZFS_REF="${ZFS_REF:-}"
SELECTION="${SELECTION:-}"
[ -n "$SELECTION" ] && SELECTION_SET=1
if [ -z "$SELECTION" ]; then       # each series runs its own cases (as ci/main.sh)
  case "$SERIES" in
    zvol-dio) SELECTION="zvol" ;;
    async-dio) SELECTION="not zvol" ;;
  esac
fi
MODE="${MODE:-cases}"
RESULTS="${RESULTS:-results/gh}"
JOBS="${JOBS:-2}"
SHARD="${SHARD:-}"
TIER="${TIER:-auto}"

# The OpenZFS commit the ref names now (empty when it cannot be asked): a rerun
# of the same PR head gets the same key, so its build comes from the cache.
resolve_ref() {
  [ -n "$ZFS_REF" ] || { echo "series-base"; return; }
  if [[ "$ZFS_REF" =~ ^[0-9a-f]{40}$ ]]; then echo "$ZFS_REF"; return; fi
  git ls-remote "https://github.com/${ZFS_REPOSITORY}" "$ZFS_REF" 2>/dev/null |
    awk 'NR==1 {print $1}'
}

case "$CMD" in
  cache-key)
    inputs=$(cat patches/*.toml "vmimages/${KERNEL}.toml" suite/build/*.py | sha256sum | cut -c1-16)
    echo "ozfs-vmci-${KERNEL}-${SERIES}-${ZFS_REPOSITORY//\//_}-$(resolve_ref)-${inputs}"
    ;;
  run)
    pytest_args=(--kernel "$KERNEL" -n "$JOBS" --results "$RESULTS"
                 --junitxml "$RESULTS/junit.xml")
    [ "$SERIES" != "none" ] && pytest_args+=(--series "$SERIES")
    [ -n "$ZFS_REF" ] && pytest_args+=(--zfs-ref "$ZFS_REF")
    [ "$ZFS_REPOSITORY" != "openzfs/zfs" ] &&
      pytest_args+=(--zfs-source "https://github.com/${ZFS_REPOSITORY}")
    [ -n "$SELECTION" ] && pytest_args+=(-k "$SELECTION")
    # A lane's own selection replaces the per-series default -k (a given one narrows).
    lane_args=("${pytest_args[@]}")
    if [ -z "${SELECTION_SET:-}" ]; then
      lane_args=(); skip=0
      for a in "${pytest_args[@]}"; do
        if [ "$skip" = 1 ]; then skip=0; continue; fi
        if [ "$a" = "-k" ]; then skip=1; continue; fi
        lane_args+=("$a")
      done
    fi
    if [ "$MODE" != "cases" ] && [ "$MODE" != "xfstests" ] && [ -n "$SHARD" ] &&
       [ "${SHARD%%/*}" != 1 ]; then
      echo "MODE=$MODE runs whole on shard 1: nothing for shard $SHARD"
      exit 0
    fi
    if [ "$MODE" = "gate" ]; then
      export OZFS_VMCI_RESULTS="$RESULTS"       # gate-<time>/ with junit, markdown, HTML
      if [ -n "$PR" ]; then
        cmd=(python3 -m suite gate --pr "$PR" --kernel "$KERNEL")
      else
        [ "$SERIES" != "none" ] || { echo "MODE=gate needs a SERIES or a PR" >&2; exit 2; }
        cmd=(python3 -m suite gate --series "$SERIES" --kernel "$KERNEL")
      fi
      [ -n "$SELECTION" ] && cmd+=(-k "$SELECTION")
      cmd+=(-- -n "$JOBS")
    elif [ "$MODE" = "zts" ]; then
      # The selection is the tags here: -m zts, narrowed by SELECTION if given.
      cmd=(python3 -m pytest cases -m zts "${lane_args[@]}")
    elif [ "$MODE" = "xfstests" ]; then
      # Each shard runner runs its share of the tests ./check's selection names.
      cmd=(python3 -m pytest cases -m xfstests "${lane_args[@]}")
      for x in ${XFSTESTS:-quick}; do cmd+=(--xfstests "$x"); done
      for p in ${XFSTESTS_PROFILES:-plain direct}; do cmd+=(--xfstests-profile "$p"); done
      [ -n "$SHARD" ] && cmd+=(--xfstests-shard "$SHARD")
    else
      cmd=(python3 -m pytest cases "${pytest_args[@]}" --tier "$TIER")
      [ -n "$SHARD" ] && cmd+=(--shard "$SHARD")
    fi
    if [ "$DRY" = 1 ]; then
      echo "would run: bash ci/setup.sh"
      echo "would run: python3 -m suite doctor"
      printf 'would run:'; printf ' %q' "${cmd[@]}"; echo
      echo "would run: python3 -m suite report $RESULTS --out $RESULTS"
      exit 0
    fi
    mkdir -p "$RESULTS"
    bash ci/setup.sh
    python3 -m suite doctor || true        # what this runner has (KVM or not), in the log
    rc=0
    "${cmd[@]}" || rc=$?
    # One report.html at the top of the artifact whatever the mode (a gate's: of its
    # gate-*/ folder); its verdict is the run's, so only the run's exit code counts.
    python3 -m suite report "$RESULTS" --out "$RESULTS" || true
    exit "$rc"
    ;;
  merge)
    shift
    [ "$#" -gt 0 ] || { echo "usage: ci/gh-job.sh merge SHARD_RESULTS_DIR..." >&2; exit 2; }
    cmd=(python3 -m suite merge --out "$RESULTS" --expect "${SHARDS:-$#}" "$@")
    if [ "$DRY" = 1 ]; then
      printf 'would run:'; printf ' %q' "${cmd[@]}"; echo
      exit 0
    fi
    rc=0
    "${cmd[@]}" || rc=$?
    [ -n "${GITHUB_STEP_SUMMARY:-}" ] && cat "$RESULTS/summary.md" >> "$GITHUB_STEP_SUMMARY"
    exit "$rc"
    ;;
  lines)
    cmd=(python3 -m suite lines newest --json)
    for l in ${LINES:-2.3 2.4}; do cmd+=(--line "$l"); done
    if [ "$DRY" = 1 ]; then
      printf 'would run:'; printf ' %q' "${cmd[@]}"; echo
      exit 0
    fi
    "${cmd[@]}"
    ;;
  lines-table)
    shift
    [ "$#" -gt 0 ] || { echo "usage: ci/gh-job.sh lines-table LINE_RESULTS_DIR..." >&2; exit 2; }
    cmd=(python3 -m suite lines table --out "$RESULTS/lines.md" "$@")
    if [ "$DRY" = 1 ]; then
      printf 'would run:'; printf ' %q' "${cmd[@]}"; echo
      exit 0
    fi
    mkdir -p "$RESULTS"
    rc=0
    "${cmd[@]}" || rc=$?
    [ -n "${GITHUB_STEP_SUMMARY:-}" ] && cat "$RESULTS/lines.md" >> "$GITHUB_STEP_SUMMARY"
    exit "$rc"
    ;;
  *)
    echo "usage: ci/gh-job.sh [--dry-run] cache-key|run|merge DIR...|lines|lines-table DIR..." >&2
    exit 2
    ;;
esac
