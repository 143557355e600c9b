#!/usr/bin/env bash
# The simulation engine's acceptance runs (README "Measured"): one JSON summary line each.
set -euo pipefail
for args in "--alpha 0.5 --problem op" "--alpha 0.5 --problem dp" "--alpha 1.3 --problem op" \
            "--alpha 1.3 --problem dp" "--alpha 0.3 --problem op --model hebbian" "--alpha 0.3 --problem dp --model hebbian"; do
  start=$(date +%s.%N)
  jaxmem train --d 32 $args --seeds 8 --json | python3 -c "
import json, sys
r = json.load(sys.stdin)
print(json.dumps({k: r[k] for k in ('problem', 'model', 'alpha', 'p', 'fraction_all_stored', 'seconds')} | {'stored': sum(r['all_stored'])}))"
  echo "  wall: $(python3 -c "print(round($(date +%s.%N) - $start, 1))") s"
done
