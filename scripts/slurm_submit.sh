#!/bin/bash
# Submit a jaxmem measurement to SLURM: a job array of one task per unit of work
# (scripts/slurm_array.sbatch), and a merge job that runs once every task has ended.
#
#   scripts/slurm_submit.sh OUT COMMAND...
#   scripts/slurm_submit.sh runs/op jaxmem capacity --d 64 96 128 --problem op dp --seeds 256
#   SBATCH_ARGS="--gres=gpu:1 --cpus-per-task=8" scripts/slurm_submit.sh runs/op jaxmem capacity --d 512 --seeds 16 --group 4
#
# COMMAND is given without --out and --shard. The merge runs JAXMEM_MERGE (default
# `jaxmem capacity OUT --quiet`, the merged table alone) into OUT/logs/jaxmem-merge-JOB.out. Prints the two
# job ids, array first. Extra sbatch options for both jobs: SBATCH_ARGS, split at spaces.
set -euo pipefail
if [ $# -lt 2 ]; then
    echo "usage: $0 OUT COMMAND... (see the comments of $0)" >&2
    exit 2
fi
out=$1
shift
here=$(cd "$(dirname "$0")" && pwd)
read -ra extra <<< "${SBATCH_ARGS:-}"
units=$("$@" --out "$out" --plan --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["units"])')
mkdir -p "$out/logs"
array=$(JAXMEM_COMMAND="$*" JAXMEM_OUT="$out" sbatch --parsable --array="0-$((units - 1))" \
    --output="$out/logs/%x-%A_%a.out" "${extra[@]}" "$here/slurm_array.sbatch")
array=${array%%;*}
merge=$(sbatch --parsable --job-name=jaxmem-merge --dependency="afterany:$array" \
    --output="$out/logs/%x-%j.out" "${extra[@]}" --wrap "${JAXMEM_MERGE:-jaxmem capacity $out --quiet}")
merge=${merge%%;*}
echo "$array $merge"
echo "jaxmem: array $array ($units tasks) and merge $merge submitted; logs in $out/logs" >&2
