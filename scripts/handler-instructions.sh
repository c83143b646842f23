#!/usr/bin/env bash
# Instructions one create costs in the API handler, counted by valgrind:
# unlike time on a shared machine, the count does not move from run to run.
# Two runs (1000 and 3000 creates) are subtracted so the setup cancels.
# Arguments go to the benchmark: `--pods`, `--pods --secured`.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v valgrind >/dev/null; then
    echo "installing valgrind" >&2
    apt-get install -y -q --no-install-recommends valgrind >/dev/null
fi
exe=$(cargo bench -p orchestra-benches --bench handler --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "handler":
        print(m["executable"])')
extra=("$@")
count() {
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$exe" --creates "$1" --rounds 1 "${extra[@]}" 2>&1 |
        awk '/Collected/ { print $4 }'
}
small=$(count 1000)
large=$(count 3000)
echo "handler op=create args=\"${extra[*]}\" instructions_per_op=$(( (large - small) / 2000 ))"
