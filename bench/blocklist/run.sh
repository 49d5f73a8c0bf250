#!/bin/sh
# The figures of docs/frontends.md: block lists made of blocks and pinned
# pages, measured against explorer-sim in process on a test clock (no wall
# time: the counts do not depend on the machine). Prints each figure as the
# tests log it, and fails if any of their bounds is missed.
#
#   bench/blocklist/run.sh
set -eu
cd "$(dirname "$0")/../.."
out=$(go test -count=1 -v -timeout 600s \
	-run 'TestBlockListAssembledEqualsUpstream|TestBlockListLinkPagesStayPut|TestBlockListPinnedPagesShared|TestBlockListFromItemsCostsNoCall' \
	./proxy/) || { printf '%s\n' "$out"; exit 1; }
printf '%s\n' "$out" | grep -E 'duplicates|clients|calls for|^--- |^ok' || true
