#!/usr/bin/env bash
# Upload the benchmark job this build needs: `ci/buildkite/kickoff.sh`, run by the pipeline's own
# step (ci/buildkite/pipeline.yml) after it has checked ci/buildkite/ out from main.
#   - a pull request with the perf-benchmarks label: pr-gate.yml (scripts/compare, the merge base
#     against the PR, its comment as an annotation);
#   - the scheduled build of main: nightly.yml (scripts/nightly, the export, the dashboard);
#   - anything else: nothing.
# The PR's labels come from GitHub's API (as vLLM's kickoff reads them); GITHUB_TOKEN, when set,
# authenticates the call (a private repository needs it). A label added after the build started
# takes effect on the next build: rebuild the PR's build in Buildkite.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LABEL=perf-benchmarks

if [ "${BUILDKITE_PULL_REQUEST:-false}" != false ]; then
  # owner/name of the pipeline's repository: git@github.com:o/n.git or https://github.com/o/n.git
  repo=$(printf '%s' "$BUILDKITE_REPO" | sed -E 's#^.*github\.com[:/]##; s#\.git$##')
  labels=$(curl -fsSL ${GITHUB_TOKEN:+-H "Authorization: Bearer $GITHUB_TOKEN"} \
    "https://api.github.com/repos/$repo/issues/$BUILDKITE_PULL_REQUEST/labels" \
    | python3 -c 'import json, sys; print(*(label["name"] for label in json.load(sys.stdin)))')
  if [[ " $labels " == *" $LABEL "* ]]; then
    echo "PR #$BUILDKITE_PULL_REQUEST has the $LABEL label: uploading the PR gate"
    buildkite-agent pipeline upload "$here/pr-gate.yml"
  else
    echo "PR #$BUILDKITE_PULL_REQUEST has no $LABEL label (labels: ${labels:-none}): no benchmark"
  fi
elif [ "${BUILDKITE_SOURCE:-}" = schedule ] && [ "${BUILDKITE_BRANCH:-}" = main ]; then
  echo "scheduled build of main: uploading the nightly"
  buildkite-agent pipeline upload "$here/nightly.yml"
else
  echo "neither a labelled pull request nor the scheduled build of main: no benchmark"
fi
