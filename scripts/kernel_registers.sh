#!/usr/bin/env bash
# Registers, stack and spills of every kernel in chosen CUDA sources, this tree against another
# revision, from ptxas (-Xptxas=-v) with the build's own compile commands: the kernels whose
# figures differ, one line each. Run it before landing any change to a kernel template: a
# run-time branch that is never taken still costs every instantiation its registers (session
# 38: session 37's dynamic split, off by default, took the default 16-bit d64 decode tile from
# 120 registers to 128 with spills, and the fp8 kernels 2-13% of their speed).
#   usage: bash scripts/kernel_registers.sh BASE_REV [SOURCE_REGEX] [BUILD_DIR]
#   e.g.   bash scripts/kernel_registers.sh HEAD~3 'decode_inst_.*hd64'
# SOURCE_REGEX selects source paths (default: every decode instantiation); BUILD_DIR (default
# build-gpu) must be configured, e.g. as the README's GPU build. Compiles each source twice on
# this machine's cores (a decode instantiation takes 1-3 minutes); writes nothing in the tree.
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:?usage: kernel_registers.sh BASE_REV [SOURCE_REGEX] [BUILD_DIR]}
pattern=${2:-src/kernels/cuda/decode/decode_inst_}
build=${3:-build-gpu}
here=$PWD
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/base"
git archive "$(git rev-parse --verify "$base^{commit}")" src include | tar -C "$work/base" -xf -

# The objects of the chosen sources, and each one's compile command.
mapfile -t objects < <(ninja -C "$build" -t targets all | awk -F: '{print $1}' |
  grep -E '\.cu\.o$' | grep -E "$pattern" | sort -u)
[ "${#objects[@]}" -gt 0 ] || { echo "no CUDA object in $build matches '$pattern'" >&2; exit 1; }

# ptxas's report -> "kernel registers stack spill_stores spill_loads", one line a kernel.
summarize() {
  awk '/Compiling entry function/ {name = $0; sub(/.*function .?/, "", name); sub(/.? for .*/, "", name)
                                  sub(/_GLOBAL__N__[0-9a-f]+_[0-9]+_[A-Za-z0-9_]+_cu_[0-9a-f]+_[0-9]+/, "", name)}
       /bytes stack frame/ {stack = $1; stores = $5; loads = $9}
       /Used [0-9]+ registers/ {print name, $5, stack, stores, loads}' "$1" | sort
}

compile() {  # TREE OBJECT REPORT
  local tree=$1 object=$2 report=$3 cmd
  # The build's command, its object and dependency file replaced (nothing of the build changes).
  cmd=$(ninja -C "$build" -t commands "$object" | tail -n 1 | sed -E 's/^cd [^&]*&& //; s/ -MD -MT [^ ]+ -MF [^ ]+//')
  cmd=${cmd/ -o $object/ -o $work/$(basename "$report").o}
  if [ "$tree" != "$here" ]; then cmd=${cmd//$here\/src/$tree/src}; cmd=${cmd//$here\/include/$tree/include}; fi
  (cd "$build" && eval "$cmd -Xptxas=-v") > "$report" 2>&1 ||
    { echo "compile failed ($tree, $object):" >&2; tail -n 5 "$report" >&2; return 1; }
}

for object in "${objects[@]}"; do
  name=$(basename "$object" .cu.o)
  compile "$here" "$object" "$work/$name.head.txt" & head_job=$!
  compile "$work/base" "$object" "$work/$name.base.txt" & base_job=$!
  wait "$head_job" && wait "$base_job" || exit 1
  summarize "$work/$name.head.txt" > "$work/$name.head"
  summarize "$work/$name.base.txt" > "$work/$name.base"
  diffs=$(join -a1 -a2 -e - -o 0,1.2,1.3,1.4,1.5,2.2,2.3,2.4,2.5 "$work/$name.base" "$work/$name.head" |
    awk '$2 != $6 || $3 != $7 || $4 != $8 || $5 != $9')
  echo "== $name: $(wc -l < "$work/$name.head") kernels, $(printf '%s' "$diffs" | grep -c . || true) changed"
  if [ -n "$diffs" ]; then
    printf '%s\n' "$diffs" | awk '{printf "  %s\n    %s: %s regs, stack %s, spills %s/%s  ->  this tree: %s regs, stack %s, spills %s/%s\n", $1, "'"$base"'", $2, $3, $4, $5, $6, $7, $8, $9}'
  fi
done
