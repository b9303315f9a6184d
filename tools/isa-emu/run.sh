#!/usr/bin/env bash
# Cross-checks ember's base/AVX2/AVX-512 kernel variants: native base vs avx2, a --break self-test, then
# avx512 vs avx2 (and avx2 vs base) under bochs 3.0. Exits non-zero on any mismatch. See README.md.
#   tools/isa-emu/run.sh             everything (calls setup.sh first; ~20 min on 2 cores, see README)
# env: EMBER_ISA_EMU_CACHE (default ~/.cache/ember-isa-emu), EMBER_ISA_EMU_RESULTS (default
#      $CACHE/results/<time>-<commit>), JOBS (parallel compiles/native runs, default 2),
#      SKIP_EMU=1 (native checks only), SKIP_BUILD=1 (reuse $CACHE/build), MODEL (default corei7_skylake_x),
#      EMU_SEEDS (extra seeds for more avx512-vs-avx2 emulated runs, e.g. "1 2")
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
CACHE=${EMBER_ISA_EMU_CACHE:-$HOME/.cache/ember-isa-emu}
export EMBER_ISA_EMU_CACHE=$CACHE
JOBS=${JOBS:-2}
MODEL=${MODEL:-corei7_skylake_x}
COMMIT=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo nogit)
RES=${EMBER_ISA_EMU_RESULTS:-$CACHE/results/$(date +%Y%m%d-%H%M%S)-$COMMIT}
B=$CACHE/build
mkdir -p "$RES" "$B"
t0=$(date +%s)
log() { echo "run.sh: $*" | tee -a "$RES/run.log"; }
log "repo $REPO (commit $COMMIT$(git -C "$REPO" diff --quiet HEAD -- cpp 2>/dev/null || echo ', cpp/ modified')), results $RES"

[ -n "${SKIP_EMU:-}" ] || "$HERE/setup.sh" | tee -a "$RES/run.log"

# --- build: the ISA objects exactly as CMake's ember_isa_variant() compiles them ----------------------
# Per-ISA flags are read from CMakeLists.txt so they cannot drift; the rest is what a Release build adds
# (CMAKE_CXX_STANDARD 17 with extensions, POSITION_INDEPENDENT_CODE, -O3 -DNDEBUG) plus the function's own options.
CML=$REPO/cpp/CMakeLists.txt
isa_flags() { sed -n "s/^ *ember_isa_variant($1 \"\(.*\)\")$/\1/p" "$CML" | head -1; }
grep -q 'target_compile_options(ember_isa_${name} PRIVATE ${_flags} -fno-math-errno -fno-trapping-math)' "$CML" \
  || { echo "run.sh: ember_isa_variant() in CMakeLists.txt changed; update the flags here" >&2; exit 1; }
COMMON="-O3 -DNDEBUG -std=gnu++17 -fPIC -fno-math-errno -fno-trapping-math -I$REPO/cpp"
if [ -z "${SKIP_BUILD:-}" ] || [ ! -x "$B/harness" ]; then
  grep -q 'ember_isa_variant(avx512 ' "$CML" || { echo "run.sh: no avx512 variant in CMakeLists.txt" >&2; exit 1; }
  rm -f "$B"/*.o "$B/harness"
  {
    for isa in base avx2 avx512; do
      for tu in kernels fused gemm; do
        echo "g++ $COMMON $(isa_flags $isa) -DEMBER_ISA=$isa -c $REPO/cpp/cpu/${tu}_isa.cpp -o $B/${isa}_${tu}.o"
      done
    done
    # thread_scratch() (cpu/fused.h), used by fused_isa.cpp, lives in this baseline object
    echo "g++ $COMMON -c $REPO/cpp/cpu/scratch.cpp -o $B/scratch.o"
    # the harness: no ISA flags (it must run anywhere); -ffp-contract=off keeps its double references unfused
    for h in main kernels fused sdpa gemm; do
      echo "g++ -O2 -std=gnu++17 -ffp-contract=off -I$REPO/cpp -I$HERE -c $HERE/harness_$h.cpp -o $B/harness_$h.o"
    done
  } > "$B/compile.txt"
  log "compiling $(wc -l < "$B/compile.txt") translation units ($JOBS at a time)"
  tr '\n' '\0' < "$B/compile.txt" | xargs -0 -P "$JOBS" -I{} sh -c '{}' > "$B/compile.log" 2>&1 \
    || { cat "$B/compile.log" >&2; echo "run.sh: compile failed" >&2; exit 1; }
  # static, so the same binary runs as /init in the guest with no libraries there
  g++ -static -o "$B/harness" "$B"/harness_*.o "$B"/{base,avx2,avx512}_{kernels,fused,gemm}.o "$B/scratch.o"
  log "built $B/harness"
fi
H=$B/harness

# --- native: base vs avx2 must agree; every family must be able to fail ------------------------------
summary() { local s; s=$(grep -h '^SUMMARY' "$1" 2>/dev/null | tail -1 || true); echo "${s:-no SUMMARY}"; }
mism() { summary "$1" | sed -n 's/.* \([0-9]*\) mismatches.*/\1/p'; }  # empty if no SUMMARY
fail=0
status=""
if ! "$H" base avx2 > "$RES/native_base_avx2.txt"; then :; fi
n=$(mism "$RES/native_base_avx2.txt"); n=${n:-missing}
log "native avx2 vs base: $(summary "$RES/native_base_avx2.txt")"
[ "$n" = 0 ] || fail=1
status+="native avx2-vs-base: $n mismatches; "
if grep -q 'avx512(f,bw,vl,dq)=1' "$RES/native_base_avx2.txt"; then  # a dev machine with AVX-512: check natively too
  "$H" avx2 avx512 > "$RES/native_avx2_avx512.txt" || true
  n=$(mism "$RES/native_avx2_avx512.txt"); n=${n:-missing}
  log "native avx512 vs avx2: $(summary "$RES/native_avx2_avx512.txt")"
  [ "$n" = 0 ] || fail=1
  status+="native avx512-vs-avx2: $n mismatches; "
fi
FAMILIES="unary binary reduce col softmax softmax_bwd rms rms_bwd ln ln_bwd act sdpa sdpa_bwd gemm"
printf '%s\n' $FAMILIES | xargs -P "$JOBS" -I{} sh -c "'$H' base avx2 --break {} > '$RES/break_{}.txt' || true"
caught=0
for f in $FAMILIES; do
  n=$(mism "$RES/break_$f.txt")
  printf '%-12s %s\n' "$f" "$(summary "$RES/break_$f.txt")" >> "$RES/native_break.txt"
  if [ "${n:-0}" -gt 0 ]; then caught=$((caught + 1)); else log "--break $f: NOT detected"; fail=1; fi
done
rm -f "$RES"/break_*.txt
log "--break self-test: $caught of $(echo $FAMILIES | wc -w) families detected (native_break.txt)"
status+="break: $caught/$(echo $FAMILIES | wc -w) families caught; "

# --- emulated: one bochs at a time (each needs a full core for ~2 min) --------------------------------
if [ -z "${SKIP_EMU:-}" ]; then
  emu() {  # TAG ARGS...: runs the harness in the guest, records its mismatch count
    local tag=$1 n
    shift
    if "$HERE/emu.sh" "$MODEL" "$tag" "$RES" "$@" | tee -a "$RES/run.log"; then
      n=$(mism "$RES/emu_$tag.txt"); n=${n:-missing}
    else
      n=unfinished
    fi
    log "emulated $* ($MODEL): $(summary "$RES/emu_$tag.txt")"
    grep -q 'avx512(f,bw,vl,dq)=1 xcr0=0xe7' "$RES/emu_$tag.txt" || { log "guest lacks AVX-512 state (see emu_$tag.txt)"; n=noavx512; }
    [ "$n" = 0 ] || fail=1
    status+="emu $tag: $n mismatches; "
  }
  emu a512 avx2 avx512
  emu a2 base avx2
  for s in ${EMU_SEEDS:-}; do emu "a512s$s" avx2 avx512 "seed=$s"; done
  # the emulator's own AVX2/FMA/F16C must reproduce the native results line for line
  if diff <(grep '^ok\|^FAIL\|^SUMMARY' "$RES/native_base_avx2.txt") <(grep '^ok\|^FAIL\|^SUMMARY' "$RES/emu_a2.txt") \
      > "$RES/emu_vs_native.diff"; then
    status+="emu avx2-vs-base == native; "
  else
    log "emulated avx2-vs-base differs from native (emu_vs_native.diff)"; fail=1
    status+="emu avx2-vs-base != native; "
  fi
fi

grep -h '^FAIL\|^  MISMATCH' "$RES"/native_*.txt "$RES"/emu_*.txt 2>/dev/null | head -50 | tee -a "$RES/run.log" || true
ln -sfn "$RES" "$CACHE/results/latest" 2>/dev/null || true
verdict=PASS
[ "$fail" = 0 ] || verdict=FAIL
log "isa-emu $verdict ($COMMIT, $(( $(date +%s) - t0 )) s): ${status% } results in $RES"
exit "$fail"
