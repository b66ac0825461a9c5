#!/usr/bin/env bash
# The run steps of dsbisect-nightly.yml, one subcommand per step (the workflow calls them; the
# tests run them with the same variables set):
#
#   nightly.sh green    the nightly suite passed: move the last green tag to HEAD (and push it)
#   nightly.sh bisect   it failed: bisect from the last green commit to HEAD within the budget,
#                       or go on with the range of an unfinished bisection carried in the store
#   nightly.sh issue    open the regression's issue, or comment on the one that has its key
#
# Read from the environment (the workflow's inputs):
#   DSBISECT_PACKAGE     the distribution the repository builds (bisect)
#   DSBISECT_ARGS        the rest of the bisect line: options and -- COMMAND, as shell words (bisect)
#   DSBISECT_LAST_GREEN  the tag of the last green commit            [nightly-last-green]
#   DSBISECT_STORE       dsbisect's store, carried between jobs       [$RUNNER_TEMP/dsbisect-store]
#   DSBISECT_REPORT      where the issue body and the reports go     [$RUNNER_TEMP/dsbisect-report]
#   DSBISECT_MAX_RUNS, DSBISECT_DEADLINE   the budget of one job (empty: none)
#   DSBISECT             the dsbisect command                         [dsbisect]
#   DSBISECT_PUSH        1: push the moved tag to origin              [1]
#   DSBISECT_ISSUE_KEY, DSBISECT_ISSUE_TITLE, DSBISECT_ISSUE_BODY, DSBISECT_ISSUE_LABELS (issue)
#   GH                   the GitHub CLI                               [gh]
# Step outputs go to $GITHUB_OUTPUT, the summary to $GITHUB_STEP_SUMMARY (dsbisect writes its own).
set -euo pipefail

tmp=${RUNNER_TEMP:-${TMPDIR:-/tmp}}
store=${DSBISECT_STORE:-$tmp/dsbisect-store}
report=${DSBISECT_REPORT:-$tmp/dsbisect-report}
tag=${DSBISECT_LAST_GREEN:-nightly-last-green}
dsbisect=${DSBISECT:-dsbisect}
state=$store/nightly-range   # "GOOD BAD" of a bisection the budget cut short

output() { if [ -n "${GITHUB_OUTPUT:-}" ]; then echo "$1=$2" >> "$GITHUB_OUTPUT"; fi; }
summary() { if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then echo "$1" >> "$GITHUB_STEP_SUMMARY"; fi; echo "$1"; }

green() {
    local head
    head=$(git rev-parse HEAD)
    git tag --force "$tag" "$head" > /dev/null
    if [ "${DSBISECT_PUSH:-1}" = 1 ]; then
        git push --quiet --force origin "refs/tags/$tag"
    fi
    if [ -e "$state" ]; then  # a cut-short range is moot once HEAD is green: the cache must forget it too
        rm -f "$state"
        output store_changed true
    fi
    output last_green "$head"
    summary "dsbisect nightly: green at ${head:0:10}; $tag moved there"
}

bisect() {
    : "${DSBISECT_PACKAGE:?set DSBISECT_PACKAGE to the distribution the repository builds}"
    local good bad resumed=false rc=0 args=() budget=()
    if [ -s "$state" ]; then
        read -r good bad < "$state"
        resumed=true
        git checkout --quiet --detach "$bad"  # the command's files as the cut-short job had them
    elif good=$(git rev-parse --verify --quiet "refs/tags/$tag^{commit}"); then
        bad=$(git rev-parse HEAD)
    else
        output verdict no-last-green
        output files_issue false
        summary "dsbisect nightly: no tag $tag yet, so nothing to bisect from; it is set on the next green night"
        return 0
    fi
    eval "args=(${DSBISECT_ARGS:-})"
    [ -n "${DSBISECT_MAX_RUNS:-}" ] && budget+=(--max-runs "$DSBISECT_MAX_RUNS")
    [ -n "${DSBISECT_DEADLINE:-}" ] && budget+=(--deadline "$DSBISECT_DEADLINE")
    mkdir -p "$store" "$report"
    output range "$good..$bad"
    output resumed "$resumed"
    "$dsbisect" bisect "$DSBISECT_PACKAGE" --commits "$good..$bad" --git-repo . --store "$store" \
        "${budget[@]}" --format github --output "$report/issue.md" "${args[@]}" || rc=$?
    case $rc in
        75) echo "$good $bad" > "$state" ;;  # unfinished: the next job goes on with this range
        0|1) rm -f "$state" ;;               # an answer (1: the ends did not behave, or untestable)
        *) return "$rc" ;;                   # bad input (2), interrupted: the step fails
    esac
    "$dsbisect" report --store "$store" --format html --output "$report/report.html" || true
    "$dsbisect" report --store "$store" --format json --output "$report/report.json" > /dev/null || true
}

issue() {
    : "${DSBISECT_ISSUE_KEY:?}" "${DSBISECT_ISSUE_TITLE:?}" "${DSBISECT_ISSUE_BODY:?}"
    local gh=${GH:-gh} number labels=()
    [ -n "${DSBISECT_ISSUE_LABELS:-}" ] && labels=(--label "$DSBISECT_ISSUE_LABELS")
    number=$("$gh" issue list --state open --search "\"$DSBISECT_ISSUE_KEY\" in:body" \
        --json number --jq '.[0].number // empty')
    if [ -n "$number" ]; then
        "$gh" issue comment "$number" --body-file "$DSBISECT_ISSUE_BODY" > /dev/null
        output issue "$number"
        summary "dsbisect nightly: found again; commented on issue #$number"
    else
        url=$("$gh" issue create --title "$DSBISECT_ISSUE_TITLE" --body-file "$DSBISECT_ISSUE_BODY" "${labels[@]}")
        output issue "${url##*/}"
        summary "dsbisect nightly: opened $url"
    fi
}

case ${1:-} in
    green|bisect|issue) "$1" ;;
    *) echo "usage: nightly.sh green|bisect|issue" >&2; exit 2 ;;
esac
